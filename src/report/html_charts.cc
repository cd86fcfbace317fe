#include "report/html_charts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "base/median.h"
#include "base/units.h"
#include "diagnose/diagnose.h"

namespace perftracker::report::internal {

namespace {

using diagnose::Diagnosis;
using diagnose::Finding;
using pattern::CompactJob;
using pattern::CompactRank;
using pattern::FunctionClass;
using pattern::FunctionInfo;

// --- Policy numbers of the page, each once. ---
// Ranks shown one by one (bars, heatmap rows, lines); above, a distribution plus outliers.
constexpr size_t kMaxRanksOneByOne = 64;
// Ranks whose lines are drawn over the distribution band of the iteration chart.
constexpr size_t kHighlightedLines = 6;
// Functions (columns) in the differential view.
constexpr size_t kHeatmapFunctions = 12;
// A heading's name is cut to this many characters (a column stays narrow).
constexpr size_t kHeadingChars = 24;
// Rows of the differential view and of the breakdown at scale: the culprits, then the ranks
// that deviate most.
constexpr size_t kOutlierRows = 40;
// Points per line on the iteration chart (steps are averaged into buckets beyond).
constexpr size_t kMaxPointsPerLine = 400;
// Histogram bins of a culprit chart at scale.
constexpr int kHistogramBins = 40;

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                          "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

std::string Short(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 1) + "\u2026";
}

double Quantile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * (sorted.size() - 1) + 0.5))];
}

// A chart's value axis: a "nice" top and 4 ticks.
struct Axis {
  double top = 1;
  std::vector<double> ticks;
};
Axis NiceAxis(double max_value) {
  Axis a;
  if (!(max_value > 0)) max_value = 1;
  const double raw = max_value / 4;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  for (int i = 0; i <= 4; ++i) a.ticks.push_back(step * i);
  a.top = step * 4;
  return a;
}

std::string FunctionKey(const diagnose::FunctionRef& f) {
  std::string key = f.kind;
  key.push_back('\x1f');
  key += f.name;
  key.push_back('\x1f');
  for (size_t i = 0; i < f.stack.size(); ++i) {
    if (i) key.push_back(';');
    key += f.stack[i];
  }
  return key;
}

// A rank's per-iteration time in function INFO (0 when it does not run it).
double PerIterMs(const CompactRank& r, const FunctionInfo* info) {
  for (const auto& f : r.compact)
    if (f.info == info) return UsToMs(f.per_iter_us);
  return 0;
}

std::set<int> CulpritRanks(const Diagnosis& d) {
  std::set<int> out;
  for (const Finding& f : d.findings)
    if (f.finding_class == diagnose::FindingClass::kSubset)
      out.insert(f.ranks.begin(), f.ranks.end());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Charts. Every chart is an inline <svg> with a viewBox, so it scales with the page.

class Svg {
 public:
  Svg(int w, int h, const std::string& label) : w_(w), h_(h) {
    out_ = fmt::format(
        "<svg class=\"chart\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\" "
        "xmlns=\"http://www.w3.org/2000/svg\">",
        w, h, Escape(label));
  }
  void Raw(const std::string& s) { out_ += s; }
  void Text(double x, double y, const std::string& text, const char* anchor = "start",
            const char* cls = "lbl") {
    out_ += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" class=\"{}\">{}</text>",
                        x, y, anchor, cls, Escape(text));
  }
  void Line(double x1, double y1, double x2, double y2, const char* cls) {
    out_ +=
        fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"{}\"/>",
                    x1, y1, x2, y2, cls);
  }
  void Rect(double x, double y, double w, double h, const std::string& fill,
            const std::string& title) {
    out_ += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">", x, y,
        std::max(w, 0.0), std::max(h, 0.0), fill);
    if (!title.empty()) out_ += "<title>" + Escape(title) + "</title>";
    out_ += "</rect>";
  }
  std::string Take() { return out_ + "</svg>"; }
  int w() const { return w_; }
  int h() const { return h_; }

 private:
  int w_, h_;
  std::string out_;
};

// Plot area and the value axis on the left.
struct Frame {
  double left = 56, right = 12, top = 14, bottom = 34;
};

void ValueAxis(Svg& svg, const Frame& fr, const Axis& axis, const std::string& unit) {
  const double ph = svg.h() - fr.top - fr.bottom;
  for (double t : axis.ticks) {
    const double y = fr.top + ph - ph * t / axis.top;
    svg.Line(fr.left, y, svg.w() - fr.right, y, "grid");
    svg.Text(fr.left - 6, y + 4, fmt::format("{:g}", t), "end");
  }
  svg.Text(12, fr.top + ph / 2, unit, "middle", "lbl axis-title");
}

}  // namespace

std::string Ms(double ms) {
  if (std::fabs(ms) >= 100) return fmt::format("{:.0f} ms", ms);
  if (std::fabs(ms) >= 1) return fmt::format("{:.1f} ms", ms);
  return fmt::format("{:.2f} ms", ms);
}

// The culprit against its peers in the finding's top function: a bar per rank, or, at scale,
// the distribution of every rank with the culprits marked.
std::string CulpritChart(const Finding& f, const Diagnosis& d, const CompactJob* job) {
  if (f.ranks.empty() || f.finding_class != diagnose::FindingClass::kSubset) return "";
  std::vector<std::pair<int, double>> values;  // (rank, ms per iteration)
  std::string what;
  const FunctionInfo* info = nullptr;
  if (job && !f.functions.empty()) info = job->FindFunction(FunctionKey(f.functions[0]));
  if (info) {
    what = Short(info->name, 60) + ", ms per iteration";
    for (const CompactRank& r : job->ranks()) values.push_back({r.rank, PerIterMs(r, info)});
  } else if (!d.job.iteration_ms_per_rank.empty()) {
    what = "iteration time, ms";
    for (const auto& [r, ms] : d.job.iteration_ms_per_rank) values.push_back({r, ms});
  }
  if (values.size() < 2) return "";
  const std::set<int> culprits(f.ranks.begin(), f.ranks.end());
  // Culprits with nothing to show (a missing rank) get no chart: it would show only the others.
  if (std::none_of(values.begin(), values.end(),
                   [&](const auto& v) { return culprits.count(v.first) > 0; }))
    return "";
  std::vector<double> peers;
  for (const auto& [r, v] : values)
    if (!culprits.count(r)) peers.push_back(v);
  const double median = Median(peers);
  double max_v = 0;
  for (const auto& [r, v] : values) max_v = std::max(max_v, v);
  const Axis axis = NiceAxis(max_v);
  Svg svg(960, 220, "the culprit against its peers: " + what);
  Frame fr;
  const double pw = svg.w() - fr.left - fr.right, ph = svg.h() - fr.top - fr.bottom;
  ValueAxis(svg, fr, axis, "ms");
  if (values.size() <= kMaxRanksOneByOne) {
    const double bw = pw / values.size();
    const size_t label_every = values.size() <= 16 ? 1 : (values.size() + 15) / 16;
    for (size_t i = 0; i < values.size(); ++i) {
      const auto& [r, v] = values[i];
      const double h = ph * v / axis.top;
      const bool bad = culprits.count(r) > 0;
      svg.Rect(fr.left + i * bw + bw * 0.15, fr.top + ph - h, bw * 0.7, h,
               bad ? "#d62728" : "#9aa5b1", fmt::format("rank {}: {}", r, Ms(v)));
      if (i % label_every == 0 || bad)
        svg.Text(fr.left + i * bw + bw / 2, svg.h() - fr.bottom + 14, std::to_string(r), "middle",
                 bad ? "lbl bad" : "lbl");
    }
    svg.Text(fr.left + pw / 2, svg.h() - 4, "rank", "middle", "lbl axis-title");
  } else {
    // At scale: a histogram of every rank; the culprits as red marks with their rank.
    std::vector<int> bins(kHistogramBins, 0);
    const double width = axis.top / kHistogramBins;
    for (const auto& [r, v] : values)  // clamped as a double: a wild value is no index
      ++bins[static_cast<int>(std::clamp(std::floor(v / width), 0.0, kHistogramBins - 1.0))];
    const int max_bin = *std::max_element(bins.begin(), bins.end());
    // Horizontal: value on x; the count on a log-free scale of its own (bars only).
    const double bw = pw / kHistogramBins;
    for (int b = 0; b < kHistogramBins; ++b) {
      if (!bins[b]) continue;
      const double h = std::max(1.0, ph * 0.8 * bins[b] / max_bin);
      svg.Rect(fr.left + b * bw, fr.top + ph - h, bw * 0.92, h, "#9aa5b1",
               fmt::format("{}-{}: {} ranks", Ms(b * width), Ms((b + 1) * width), bins[b]));
    }
    int shown = 0;
    for (const auto& [r, v] : values) {
      if (!culprits.count(r) || shown++ >= 10) continue;
      const double x = fr.left + pw * v / axis.top;
      svg.Line(x, fr.top, x, fr.top + ph, "mark");
      svg.Text(x + 3, fr.top + 10 + 11 * (shown - 1), fmt::format("rank {}", r), "start",
               "lbl bad");
    }
    svg.Text(fr.left + pw / 2, svg.h() - 4,
             fmt::format("{} (x) over {} ranks (bar height: how many)", what, values.size()),
             "middle", "lbl axis-title");
    return svg.Take();
  }
  const double y = fr.top + ph - ph * median / axis.top;
  svg.Line(fr.left, y, svg.w() - fr.right, y, "median");
  svg.Text(svg.w() - fr.right, y - 4, "peers' median " + Ms(median), "end", "lbl");
  return svg.Take();
}

// Iteration time per rank: over the run (online series) or the window's iterations.
namespace {

// Bytes in a GiB, for the memory charts' axis.
constexpr double kBytesPerGiB = 1024.0 * 1024 * 1024;

// One line per rank over iterations (SERIES: values in UNIT), the windows shaded under them:
// every rank when few; else the CULPRITS, then the highest on average, over the distribution of
// all (median and p10-p90 per bucket of iterations).
std::string RankLines(const std::vector<RunSeries>& series, const std::vector<WindowMark>& windows,
                      const std::set<int>& culprits, const std::string& title,
                      const std::string& unit) {
  if (series.empty()) return "";
  int64_t x0 = INT64_MAX, x1 = INT64_MIN;
  double max_ms = 0;  // the highest value, in UNIT
  for (const RunSeries& s : series)
    for (size_t i = 0; i < s.steps.size(); ++i) {
      x0 = std::min(x0, s.steps[i]);
      x1 = std::max(x1, s.steps[i]);
      max_ms = std::max<double>(max_ms, s.ms[i]);
    }
  for (const WindowMark& w : windows)
    if (w.start_iteration >= 0) x1 = std::max<int64_t>(x1, w.start_iteration + w.iterations);
  if (x1 <= x0) x1 = x0 + 1;
  // Buckets of steps, so a long run is at most kMaxPointsPerLine points per line.
  const int64_t span = x1 - x0 + 1;
  const int64_t bucket = std::max<int64_t>(1, (span + kMaxPointsPerLine - 1) / kMaxPointsPerLine);
  const size_t nb = static_cast<size_t>((span + bucket - 1) / bucket);
  auto bucketed = [&](const RunSeries& s) {
    std::vector<double> sum(nb, 0);
    std::vector<int> n(nb, 0);
    for (size_t i = 0; i < s.steps.size(); ++i) {
      const size_t b = static_cast<size_t>((s.steps[i] - x0) / bucket);
      sum[b] += s.ms[i];
      ++n[b];
    }
    std::vector<double> out(nb, NAN);
    for (size_t b = 0; b < nb; ++b)
      if (n[b]) out[b] = sum[b] / n[b];
    return out;
  };
  const Axis axis = NiceAxis(max_ms * 1.05);
  Svg svg(960, 300, title);
  Frame fr;
  fr.right = 130;
  const double pw = svg.w() - fr.left - fr.right, ph = svg.h() - fr.top - fr.bottom;
  auto X = [&](double step) { return fr.left + pw * (step - x0) / std::max<double>(1, x1 - x0); };
  auto Y = [&](double ms) { return fr.top + ph - ph * ms / axis.top; };
  // The windows first, under the lines.
  for (const WindowMark& w : windows) {
    if (w.start_iteration < 0) continue;
    const double xa = X(w.start_iteration), xb = X(w.start_iteration + w.iterations);
    svg.Rect(xa, fr.top, std::max(2.0, xb - xa), ph, "rgba(255,165,0,0.18)",
             fmt::format("window {}: iterations {}..{} ({})", w.id, w.start_iteration,
                         w.start_iteration + w.iterations - 1, w.reason));
    svg.Text(xa + 2, fr.top + 10, fmt::format("w{}", w.id), "start", "lbl win");
  }
  ValueAxis(svg, fr, axis, unit);
  int64_t last_tick = INT64_MIN;
  for (int i = 0; i <= 4; ++i) {
    const int64_t step = x0 + static_cast<int64_t>(std::llround((x1 - x0) * i / 4.0));
    if (step == last_tick) continue;  // a short window: each step once
    last_tick = step;
    svg.Text(X(step), svg.h() - fr.bottom + 14, std::to_string(step), "middle");
  }
  svg.Text(fr.left + pw / 2, svg.h() - 4, "iteration", "middle", "lbl axis-title");
  auto polyline = [&](const std::vector<double>& v, const char* colour, double width,
                      const std::string& title) {
    std::string pts;
    for (size_t b = 0; b < v.size(); ++b) {
      if (std::isnan(v[b])) continue;
      pts += fmt::format("{:.1f},{:.1f} ", X(x0 + b * bucket + (bucket - 1) / 2.0), Y(v[b]));
    }
    if (pts.empty()) return;
    svg.Raw(fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" points=\"{}\"><title>{}</title>"
        "</polyline>",
        colour, width, pts, Escape(title)));
  };
  // Which ranks get a line of their own: all of them when few; else the culprits, then the
  // slowest on average.
  std::vector<const RunSeries*> lines;
  if (series.size() <= 8) {
    for (const RunSeries& s : series) lines.push_back(&s);
  } else {
    std::vector<std::pair<double, const RunSeries*>> by_mean;
    for (const RunSeries& s : series) {
      double sum = 0;
      for (float v : s.ms) sum += v;
      by_mean.push_back({s.ms.empty() ? 0 : sum / s.ms.size(), &s});
    }
    std::sort(by_mean.begin(), by_mean.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const RunSeries& s : series)
      if (culprits.count(s.rank) && lines.size() < kHighlightedLines) lines.push_back(&s);
    for (const auto& [m, s] : by_mean)
      if (lines.size() < kHighlightedLines &&
          std::find(lines.begin(), lines.end(), s) == lines.end())
        lines.push_back(s);
    // The distribution of every rank per bucket: p10-p90 band and the median.
    std::vector<std::vector<double>> per_bucket(nb);
    for (const RunSeries& s : series) {
      const std::vector<double> v = bucketed(s);
      for (size_t b = 0; b < nb; ++b)
        if (!std::isnan(v[b])) per_bucket[b].push_back(v[b]);
    }
    std::string upper, lower;
    std::vector<double> med(nb, NAN);
    for (size_t b = 0; b < nb; ++b) {
      auto& v = per_bucket[b];
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      const double x = X(x0 + b * bucket + (bucket - 1) / 2.0);
      upper += fmt::format("{:.1f},{:.1f} ", x, Y(Quantile(v, 0.9)));
      lower = fmt::format("{:.1f},{:.1f} ", x, Y(Quantile(v, 0.1))) + lower;
      med[b] = Quantile(v, 0.5);
    }
    svg.Raw(fmt::format(
        "<polygon fill=\"rgba(31,119,180,0.15)\" stroke=\"none\" points=\"{}{}\"><title>10th to "
        "90th percentile of {} ranks</title></polygon>",
        upper, lower, series.size()));
    polyline(med, "#1f77b4", 1.5, fmt::format("median of {} ranks", series.size()));
    svg.Text(svg.w() - fr.right + 8, fr.top + 10, "all: median, p10-p90", "start", "lbl");
  }
  int k = 0;
  for (const RunSeries* s : lines) {
    const char* colour = kPalette[(series.size() <= 8 ? k : k + 1) % std::size(kPalette)];
    polyline(bucketed(*s), colour, series.size() <= 8 ? 1.5 : 1.2, fmt::format("rank {}", s->rank));
    const double ly = fr.top + 26 + 14 * k;
    svg.Line(svg.w() - fr.right + 8, ly - 4, svg.w() - fr.right + 22, ly - 4, "key");
    svg.Raw(
        fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
                    "stroke-width=\"3\"/>",
                    svg.w() - fr.right + 8.0, ly - 4, svg.w() - fr.right + 22.0, ly - 4, colour));
    svg.Text(svg.w() - fr.right + 26, ly, fmt::format("rank {}", s->rank));
    ++k;
  }
  return svg.Take();
}

}  // namespace

std::string IterationChart(const HtmlInput& in) {
  std::vector<RunSeries> series = in.series;
  if (series.empty() && in.job) {
    for (const CompactRank& r : in.job->ranks()) {
      RunSeries s;
      s.rank = r.rank;
      for (size_t i = 0; i < r.iteration_ms.size(); ++i) {
        s.steps.push_back(i < r.iteration_steps.size() ? r.iteration_steps[i]
                                                       : static_cast<int64_t>(i));
        s.ms.push_back(static_cast<float>(r.iteration_ms[i]));
      }
      if (!s.steps.empty()) series.push_back(std::move(s));
    }
  }
  return RankLines(series, in.windows, CulpritRanks(*in.diagnosis), "iteration time per rank",
                   "ms");
}

std::string MemoryChart(const HtmlInput& in, bool gpu) {
  std::vector<RunSeries> series;
  double top = 0;
  for (const diagnose::RankMemoryUse& m : in.diagnosis->job.memory) {
    if (m.host() == gpu || m.iteration_end_bytes.empty()) continue;
    for (double v : m.iteration_end_bytes) top = std::max(top, v);
  }
  // GiB once a rank holds several; MiB below.
  const bool gib = top >= 4 * kBytesPerGiB;
  const double scale = gib ? kBytesPerGiB : kBytesPerGiB / 1024;
  for (const diagnose::RankMemoryUse& m : in.diagnosis->job.memory) {
    if (m.host() == gpu || m.iteration_end_bytes.empty()) continue;
    RunSeries s;
    s.rank = m.rank;
    for (size_t i = 0; i < m.iteration_end_bytes.size(); ++i) {
      s.steps.push_back(i < m.iteration_numbers.size() ? m.iteration_numbers[i]
                                                       : static_cast<int64_t>(i));
      s.ms.push_back(static_cast<float>(m.iteration_end_bytes[i] / scale));
    }
    series.push_back(std::move(s));
  }
  if (series.empty()) return "";
  return RankLines(series, in.windows, CulpritRanks(*in.diagnosis),
                   gpu ? "GPU memory per rank" : "host memory per rank", gib ? "GiB" : "MiB");
}

namespace {

// The ranks a per-rank table shows: all of them when few; else the culprits, then the ranks
// SCORE puts first, in rank order.
std::vector<size_t> RowsToShow(const CompactJob& job, const std::set<int>& culprits,
                               const std::vector<double>& score, size_t* hidden) {
  const auto& ranks = job.ranks();
  std::vector<size_t> rows;
  if (ranks.size() <= kMaxRanksOneByOne) {
    for (size_t i = 0; i < ranks.size(); ++i) rows.push_back(i);
    *hidden = 0;
    return rows;
  }
  std::vector<size_t> order(ranks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const bool ca = culprits.count(ranks[a].rank), cb = culprits.count(ranks[b].rank);
    if (ca != cb) return ca;
    return score[a] > score[b];
  });
  order.resize(kOutlierRows);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return ranks[a].rank < ranks[b].rank; });
  *hidden = ranks.size() - order.size();
  return order;
}

}  // namespace

// Ranks x top functions, each cell coloured by the rank's deviation from its peer group (the
// ranks the diagnosis compares it with: diagnose::PeerGroups).
ColumnHeading HeadingOf(std::string_view function) {
  // A Python function: "PATH(LINE): NAME".
  if (const size_t colon = function.find("): "); colon != std::string_view::npos) {
    const size_t open = function.rfind('(', colon);
    const std::string_view line =
        open == std::string_view::npos ? "" : function.substr(open + 1, colon - open - 1);
    if (!line.empty() &&
        std::all_of(line.begin(), line.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      std::string_view path = function.substr(0, open);
      if (const size_t slash = path.rfind('/'); slash != std::string_view::npos)
        path.remove_prefix(slash + 1);
      return {std::string(function.substr(colon + 3)), fmt::format("{}:{}", path, line)};
    }
  }
  // A C++ signature (a kernel's): its function's own name, without scope, template or arguments.
  if (function.find_first_of("<(") != std::string_view::npos) {
    std::string_view s = function;
    if (s.starts_with("void ")) s.remove_prefix(5);
    s = s.substr(0, s.find_first_of("<("));
    if (const size_t scope = s.rfind("::"); scope != std::string_view::npos)
      s.remove_prefix(scope + 2);
    if (!s.empty()) return {std::string(s), ""};
  }
  return {std::string(function), ""};
}

std::string Heatmap(const Diagnosis& d, const CompactJob& job) {
  const auto& ranks = job.ranks();
  if (ranks.size() < 2) return "";
  // Columns: the findings' functions first, then the biggest by total time.
  std::vector<const FunctionInfo*> cols;
  for (const Finding& f : d.findings)
    for (const auto& fn : f.functions)
      if (const FunctionInfo* info = job.FindFunction(FunctionKey(fn));
          info && std::find(cols.begin(), cols.end(), info) == cols.end() && cols.size() < 4)
        cols.push_back(info);
  std::vector<double> total(job.function_count(), 0);
  for (const CompactRank& r : ranks)
    for (const auto& f : r.compact) total[f.id()] += f.per_iter_us;
  std::vector<uint32_t> ids(job.function_count());
  for (uint32_t i = 0; i < ids.size(); ++i) ids[i] = i;
  std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) { return total[a] > total[b]; });
  for (uint32_t id : ids) {
    if (cols.size() >= kHeatmapFunctions) break;
    const FunctionInfo* info = &job.function(id);
    if (std::find(cols.begin(), cols.end(), info) == cols.end()) cols.push_back(info);
  }
  // values[rank index][col], and each column's median per peer group (role).
  std::vector<std::vector<double>> values(ranks.size(), std::vector<double>(cols.size(), 0));
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::unordered_map<const FunctionInfo*, double> mine;
    for (const auto& f : ranks[i].compact) mine[f.info] = UsToMs(f.per_iter_us);
    for (size_t c = 0; c < cols.size(); ++c)
      if (auto it = mine.find(cols[c]); it != mine.end()) values[i][c] = it->second;
  }
  // Each rank's peer group, and each group's median per column.
  std::vector<size_t> group_of(ranks.size(), 0);
  std::vector<std::vector<double>> medians;  // group -> per column
  for (const std::vector<size_t>& g : diagnose::PeerGroups(job)) {
    std::vector<double> med(cols.size());
    for (size_t c = 0; c < cols.size(); ++c) {
      std::vector<double> v;
      v.reserve(g.size());
      for (size_t i : g) v.push_back(values[i][c]);
      med[c] = Median(std::move(v));
    }
    for (size_t i : g) group_of[i] = medians.size();
    medians.push_back(std::move(med));
  }
  auto median_of = [&](size_t i, size_t c) { return medians[group_of[i]][c]; };
  auto deviation = [&](size_t i, size_t c) {
    const double med = median_of(i, c);
    const double v = values[i][c];
    if (med <= 0) return v > 0 ? 1.0 : 0.0;
    return v / med - 1;
  };
  std::vector<double> score(ranks.size(), 0);
  for (size_t i = 0; i < ranks.size(); ++i)
    for (size_t c = 0; c < cols.size(); ++c)
      score[i] =
          std::max(score[i], std::fabs(deviation(i, c)) * std::max(values[i][c], median_of(i, c)));
  size_t hidden = 0;
  const std::set<int> culprits = CulpritRanks(d);
  const std::vector<size_t> rows = RowsToShow(job, culprits, score, &hidden);
  std::string out = "<div class=\"scroll\"><table class=\"heat\"><thead><tr><th>rank</th>";
  // Each heading its name and, below it, where it is (the whole name and stack in its tooltip);
  // headings alike still are numbered apart.
  std::map<std::pair<std::string, std::string>, int> seen;
  for (const FunctionInfo* info : cols) {
    ColumnHeading h = HeadingOf(info->name);
    h.name = Short(h.name, kHeadingChars);
    if (const int n = ++seen[{h.name, h.where}]; n > 1) h.name += fmt::format(" #{}", n);
    out += fmt::format("<th title=\"{}\"><span class=\"fn\">{}</span>{}</th>",
                       Escape(info->name + (info->stack.empty() ? "" : "\n at " + info->stack)),
                       Escape(h.name),
                       h.where.empty() ? "" : "<span class=\"at\">" + Escape(h.where) + "</span>");
  }
  out += "</tr></thead><tbody>";
  for (size_t i : rows) {
    const CompactRank& r = ranks[i];
    out += fmt::format("<tr><th class=\"{}\">{}</th>", culprits.count(r.rank) ? "bad" : "", r.rank);
    for (size_t c = 0; c < cols.size(); ++c) {
      const double dev = deviation(i, c);
      out += fmt::format(
          "<td style=\"background:{}\" title=\"rank {}, {}: {} per iteration, {:+.0f}% vs its "
          "peers' median {}\">{:+.0f}%</td>",
          internal::DeviationColour(dev), r.rank, Escape(cols[c]->name), Ms(values[i][c]),
          dev * 100, Ms(median_of(i, c)), dev * 100);
    }
    out += "</tr>";
  }
  out += "</tbody></table></div>";
  if (hidden)
    out += fmt::format(
        "<p class=\"note\">{} of {} ranks shown: the culprits and the ranks that deviate most "
        "(time-weighted); the other {} are closer to their peers.</p>",
        rows.size(), ranks.size(), hidden);
  return out;
}

namespace {

// Where each rank's iteration goes, from its functions' exclusive times on the training
// thread (inclusive top-level times when the trace has no exclusive times).
struct Parts {
  static constexpr int kN = 7;
  double v[kN] = {0};
};
const char* kPartNames[Parts::kN] = {"compute", "communication",  "data loading", "Python",
                                     "GC",      "waiting (sync)", "other"};
const char* kPartColours[Parts::kN] = {"#1f77b4", "#d62728", "#ff7f0e", "#9467bd",
                                       "#8c564b", "#e377c2", "#c7c7c7"};

int PartOf(FunctionClass c) {
  switch (c) {
    case FunctionClass::kCompute:
    case FunctionClass::kLaunch:
    case FunctionClass::kMemcpy:
    case FunctionClass::kOptimizer:
      return 0;
    case FunctionClass::kCollective:
      return 1;
    case FunctionClass::kDataLoader:
      return 2;
    case FunctionClass::kPython:
      return 3;
    case FunctionClass::kGc:
      return 4;
    case FunctionClass::kSync:
      return 5;
    case FunctionClass::kAnnotation:
    case FunctionClass::kOther:
      return 6;
  }
  return 6;
}

Parts Breakdown(const CompactRank& r) {
  Parts p;
  const double iter = r.MeanIterationMs();
  double sum = 0;
  // With the Python tracer's calls (an online window), Python's own time, GC and data loading
  // come from them and the rest from the profiler's ops: a built-in method's self time is the
  // native op the profiler also shows, which would count twice.
  const bool python = std::any_of(r.compact.begin(), r.compact.end(), [&](const auto& f) {
    return f.kind() == trace::EventKind::kPythonFunction && (!r.any_main || f.main_thread);
  });
  for (const auto& f : r.compact) {
    if (trace::IsGpuKind(f.kind())) continue;  // the GPU timeline: its idle time is shown apart
    const bool py = f.kind() == trace::EventKind::kPythonFunction;
    if (r.any_main && !f.main_thread && !(python && !py)) continue;
    if (python && py &&
        (f.name().rfind("<built-in", 0) == 0 || PartOf(f.fclass()) == 0 || PartOf(f.fclass()) == 1))
      continue;
    double ms = 0;
    if (r.has_self) {
      ms = UsToMs(f.self_per_iter_us);
    } else if (f.top_level) {
      ms = UsToMs(f.per_iter_us);
    }
    if (ms <= 0) continue;
    p.v[PartOf(f.fclass())] += ms;
    sum += ms;
  }
  // Exclusive times of all threads can exceed the iteration: scale to it; the rest is "other".
  if (iter > 0 && sum > iter)
    for (double& v : p.v) v *= iter / sum;
  else if (iter > sum)
    p.v[6] += iter - sum;
  return p;
}

}  // namespace

std::string BreakdownChart(const Diagnosis& d, const CompactJob& job) {
  const auto& ranks = job.ranks();
  if (ranks.empty()) return "";
  std::vector<Parts> parts;
  std::vector<double> score;
  double max_total = 0;
  for (const CompactRank& r : ranks) {
    parts.push_back(Breakdown(r));
    score.push_back(r.MeanIterationMs());
    max_total = std::max(max_total, r.MeanIterationMs());
  }
  size_t hidden = 0;
  const std::set<int> culprits = CulpritRanks(d);
  const std::vector<size_t> rows = RowsToShow(job, culprits, score, &hidden);
  const Axis axis = NiceAxis(max_total);
  const int row_h = 18;
  Svg svg(960, static_cast<int>(rows.size()) * row_h + 60, "time per iteration by kind, per rank");
  Frame fr;
  fr.left = 70;
  fr.top = 26;
  fr.bottom = 30;
  const double pw = svg.w() - fr.left - fr.right;
  // Legend on top.
  double lx = fr.left;
  for (int k = 0; k < Parts::kN; ++k) {
    svg.Rect(lx, 6, 10, 10, kPartColours[k], "");
    svg.Text(lx + 14, 15, kPartNames[k]);
    lx += 24 + 7.5 * std::string_view(kPartNames[k]).size();
  }
  for (size_t j = 0; j < rows.size(); ++j) {
    const size_t i = rows[j];
    const double y = fr.top + j * row_h;
    double x = fr.left;
    svg.Text(fr.left - 6, y + 12, fmt::format("rank {}", ranks[i].rank), "end",
             culprits.count(ranks[i].rank) ? "lbl bad" : "lbl");
    for (int k = 0; k < Parts::kN; ++k) {
      const double w = pw * parts[i].v[k] / axis.top;
      if (w <= 0) continue;
      svg.Rect(x, y + 2, w, row_h - 5, kPartColours[k],
               fmt::format("rank {}: {} {}", ranks[i].rank, kPartNames[k], Ms(parts[i].v[k])));
      x += w;
    }
    if (ranks[i].has_gpu && ranks[i].gpu_idle_us > 0)
      svg.Text(x + 4, y + 12, fmt::format("GPU idle {}", Ms(UsToMs(ranks[i].gpu_idle_us))));
  }
  const double base = fr.top + rows.size() * row_h;
  for (double t : axis.ticks) {
    const double x = fr.left + pw * t / axis.top;
    svg.Line(x, fr.top, x, base, "grid");
    svg.Text(x, base + 14, fmt::format("{:g}", t), "middle");
  }
  svg.Text(fr.left + pw / 2, base + 28, "ms per iteration", "middle", "lbl axis-title");
  std::string out = svg.Take();
  if (hidden)
    out += fmt::format(
        "<p class=\"note\">{} of {} ranks shown: the culprits and the slowest; the other {} "
        "take less time per iteration.</p>",
        rows.size(), ranks.size(), hidden);
  return out;
}

}  // namespace perftracker::report::internal
