#include "report/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "base/median.h"
#include "diagnose/diagnose.h"
#include "diagnose/hang.h"
#include "diagnose/policy.h"
#include "diagnose/what_if.h"
#include "report/html_charts.h"
#include "report/report.h"

namespace perftracker::report {

namespace internal {

std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string DeviationColour(double deviation) {
  // White at 0; red (#d62728-ish) towards +1, blue (#1f77b4-ish) towards -1.
  const double d = std::clamp(deviation, -1.0, 1.0);
  auto mix = [](int from, int to, double t) {
    return static_cast<int>(std::lround(from + (to - from) * t));
  };
  if (d >= 0)
    return fmt::format("#{:02x}{:02x}{:02x}", mix(255, 214, d), mix(255, 39, d), mix(255, 40, d));
  return fmt::format("#{:02x}{:02x}{:02x}", mix(255, 31, -d), mix(255, 119, -d), mix(255, 180, -d));
}

}  // namespace internal

namespace {

using diagnose::Diagnosis;
using diagnose::Finding;
using internal::BreakdownChart;
using internal::CulpritChart;
using internal::Escape;
using internal::Heatmap;
using internal::IterationChart;
using internal::Ms;
using pattern::CompactJob;
using pattern::CompactRank;

const char* CauseColour(diagnose::Cause c) {
  switch (c) {
    case diagnose::Cause::kHardware:
      return "#d62728";
    case diagnose::Cause::kSoftware:
      return "#1f77b4";
    case diagnose::Cause::kConfiguration:
      return "#ff7f0e";
    case diagnose::Cause::kUnknown:
      return "#7f7f7f";
  }
  return "#7f7f7f";
}

// Hosts of a finding, with their ranks and switch: where a link or a node is the suspect.
std::string HostTable(const Finding& f, const CompactJob* job) {
  if (!job || f.hosts.empty()) return "";
  // Where the place is the point: a link, a NIC, a switch (a straggler's host is in its card).
  if (f.category != diagnose::Category::kCommunication &&
      f.category != diagnose::Category::kLowBandwidth)
    return "";
  std::map<std::string, std::pair<std::vector<int>, std::string>> by_host;
  for (const CompactRank& r : job->ranks()) {
    auto& e = by_host[r.host];
    e.first.push_back(r.rank);
    if (!r.network_switch.empty()) e.second = r.network_switch;
  }
  if (by_host.size() < 2) return "";
  const std::set<std::string> suspects(f.hosts.begin(), f.hosts.end());
  std::string out =
      "<table class=\"kv hosts\"><thead><tr><th>host</th><th>switch</th><th>ranks</th></tr>"
      "</thead><tbody>";
  size_t n = 0;
  for (const auto& [host, e] : by_host) {
    const bool bad = suspects.count(host) > 0;
    if (!bad && by_host.size() > 16 && n >= 8) continue;  // at scale: the suspects and a few
    ++n;
    out += fmt::format("<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td></tr>", bad ? "bad" : "",
                       Escape(host.empty() ? "?" : host), Escape(e.second),
                       Escape(diagnose::RankList(e.first)));
  }
  return out + "</tbody></table>";
}

std::string FindingCard(int index, const Finding& f, const Diagnosis& d, const CompactJob* job) {
  std::string out =
      fmt::format("<section class=\"card\" style=\"border-left-color:{}\">", CauseColour(f.cause));
  out += fmt::format(
      "<div class=\"card-head\"><span class=\"num\">{}</span><span class=\"badge cat\">{}</span>"
      "<span class=\"badge\">{} cause</span><span class=\"badge\">{}</span>"
      "<span class=\"badge\">confidence {:.1f}</span><span class=\"impact\">{}</span></div>",
      index, Escape(diagnose::CategoryName(f.category)), Escape(diagnose::CauseName(f.cause)),
      f.finding_class == diagnose::FindingClass::kSubset ? "some ranks" : "every rank",
      f.confidence,
      f.impact_ms > 0 ? fmt::format("{} per iteration <small>({:.1f}% of an iteration)</small>",
                                    Ms(f.impact_ms), f.impact_fraction * 100)
                      : std::string("<small>cost not measured</small>"));
  out += "<h3>" + Escape(f.summary) + "</h3>";
  // What the replay says fixing it gives (diagnose/what_if.h), beside the rule's figure.
  if (f.what_if_ms >= 0) {
    out += "<p class=\"whatif\"><b>What if fixed:</b> saves " + Ms(f.what_if_ms) + " per iteration";
    if (f.what_if_iteration_ms >= 0)
      out += " (the iteration " + Ms(f.what_if_iteration_ms + f.what_if_ms) + " &rarr; " +
             Ms(f.what_if_iteration_ms) + ")";
    if (auto it = f.evidence_text.find("what_if"); it != f.evidence_text.end())
      out += "; " + Escape(it->second);
    out += "</p>";
  }
  out += "<p class=\"where\"><b>ranks</b> " + Escape(diagnose::RankList(f.ranks));
  if (!f.hosts.empty()) {
    std::string hosts;
    for (size_t i = 0; i < f.hosts.size() && i < 20; ++i) hosts += (i ? ", " : "") + f.hosts[i];
    if (f.hosts.size() > 20) hosts += fmt::format(" and {} more", f.hosts.size() - 20);
    out += " &nbsp; <b>hosts</b> " + Escape(hosts);
  }
  out += "</p>";
  if (!f.functions.empty()) {
    out += "<ul class=\"fns\">";
    for (const auto& fn : f.functions) {
      out += fmt::format("<li><code>{}</code> <span class=\"kind\">{}</span>", Escape(fn.name),
                         Escape(fn.kind));
      if (!fn.stack.empty()) {
        out += fmt::format("<details><summary>call stack ({} frames)</summary><ol class=\"stack\">",
                           fn.stack.size());
        for (const auto& s : fn.stack) out += "<li><code>" + Escape(s) + "</code></li>";
        out += "</ol></details>";
      }
      out += "</li>";
    }
    out += "</ul>";
  }
  if (auto it = f.evidence_text.find("reasoning"); it != f.evidence_text.end())
    out += "<p class=\"why\"><b>Why:</b> " + Escape(it->second) + "</p>";
  if (!f.suggestion.empty())
    out += "<p class=\"suggest\"><b>What to do:</b> " + Escape(f.suggestion) + "</p>";
  out += CulpritChart(f, d, job);
  out += HostTable(f, job);
  if (!f.evidence.empty() || f.evidence_text.size() > 1) {
    out += "<details><summary>evidence</summary><table class=\"kv\"><tbody>";
    for (const auto& [k, v] : f.evidence)
      out += fmt::format("<tr><td>{}</td><td>{:.4g}</td></tr>", Escape(k), v);
    for (const auto& [k, v] : f.evidence_text)
      if (k != "reasoning" && !f.evidence.count(k))
        out += fmt::format("<tr><td>{}</td><td>{}</td></tr>", Escape(k), Escape(v));
    out += "</tbody></table></details>";
  }
  return out + "</section>";
}

// The findings at a glance, in the diagnosis's order (the replay's saving first): what each
// rule claims an iteration, what the what-if replay says fixing it gives (diagnose/what_if.h)
// and the iteration without it; a claim over kWhatIfOverclaim times the replay's is marked.
std::string FindingsTable(const Diagnosis& d) {
  if (d.findings.size() < 2) return "";
  std::string out =
      "<table class=\"kv findings\"><thead><tr><th>#</th><th>finding</th><th>ranks</th>"
      "<th>rule's cost</th><th>what if fixed</th><th>iteration without it</th></tr></thead>"
      "<tbody>";
  int i = 0;
  for (const Finding& f : d.findings) {
    const bool replayed = f.what_if_ms >= 0;
    const bool over = replayed && f.impact_ms > diagnose::policy::kWhatIfOverclaim * f.what_if_ms;
    out += fmt::format(
        "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "</tr>",
        over ? "bad" : "", ++i, Escape(diagnose::CategoryName(f.category)),
        Escape(diagnose::RankList(f.ranks)), f.impact_ms > 0 ? Ms(f.impact_ms) : "-",
        replayed ? Ms(f.what_if_ms) + (over ? " (the rule claims more)" : "") : "not replayed",
        replayed && f.what_if_iteration_ms >= 0 ? Ms(f.what_if_iteration_ms) : "-");
  }
  return out + "</tbody></table>";
}

std::string WaitTable(const std::vector<WaitGroup>& waits) {
  if (waits.empty()) return "";
  std::string out =
      "<h2>Where each rank stands</h2><table class=\"kv\"><thead><tr><th>ranks</th><th>where "
      "the training thread is</th><th>collective</th></tr></thead><tbody>";
  for (const WaitGroup& g : waits) {
    out += fmt::format("<tr class=\"{}\"><td>{}</td><td><code>{}</code>",
                       waits.size() > 1 && &g == &waits.back() ? "bad" : "",
                       Escape(diagnose::RankList(g.ranks)), Escape(g.where));
    if (!g.stack.empty()) {
      out += fmt::format("<details><summary>call stack ({} frames)</summary><ol class=\"stack\">",
                         g.stack.size());
      for (const auto& f : g.stack) out += "<li><code>" + Escape(f) + "</code></li>";
      out += "</ol></details>";
    }
    out += fmt::format("</td><td>{}</td></tr>", Escape(g.collective));
  }
  return out + "</tbody></table>";
}

constexpr char kStyle[] = R"css(
:root{--fg:#1d2733;--muted:#5b6b7c;--line:#e3e8ee;--bg:#f6f8fa;--bad:#d62728}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1180px;margin:0 auto;padding:20px 24px 48px}
header h1{font-size:22px;margin:4px 0 2px}
header .sub{color:var(--muted);font-size:12px}
.chips{display:flex;flex-wrap:wrap;gap:8px;margin:14px 0 6px}
.chip{background:#fff;border:1px solid var(--line);border-radius:8px;padding:6px 12px}
.chip b{display:block;font-size:18px}
.chip span{color:var(--muted);font-size:12px}
h2{font-size:17px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
.card{background:#fff;border:1px solid var(--line);border-left:6px solid #7f7f7f;border-radius:8px;padding:12px 16px;margin:12px 0}
.card h3{font-size:15px;margin:8px 0 6px;font-weight:600}
.card-head{display:flex;flex-wrap:wrap;gap:6px;align-items:center}
.num{font-weight:700;color:var(--muted);margin-right:2px}
.badge{font-size:12px;border:1px solid var(--line);border-radius:10px;padding:1px 8px;color:var(--muted)}
.badge.cat{background:#1d2733;color:#fff;border-color:#1d2733}
.impact{margin-left:auto;font-weight:700;color:var(--bad)}
.impact small{font-weight:400;color:var(--muted)}
.where,.why,.suggest{margin:6px 0}
.suggest{background:#eef6ee;border-radius:6px;padding:6px 10px}
.fns{margin:6px 0;padding-left:18px}
.kind{color:var(--muted);font-size:12px}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f1f3f5;padding:0 3px;border-radius:3px;word-break:break-all}
.stack{margin:4px 0;padding-left:22px}
details summary{cursor:pointer;color:var(--muted);font-size:12px}
.ok{border-left-color:#2ca02c}
svg.chart{width:100%;height:auto;background:#fff;border:1px solid var(--line);border-radius:6px;margin:8px 0}
svg .lbl{font-size:11px;fill:var(--muted)}
svg .bad{fill:var(--bad);font-weight:700}
svg .win{fill:#b36b00}
svg .axis-title{font-size:11px}
svg .grid{stroke:#eef1f4;stroke-width:1}
svg .median{stroke:#333;stroke-dasharray:4 3;stroke-width:1}
svg .mark{stroke:var(--bad);stroke-width:2}
table{border-collapse:collapse}
.kv td,.kv th{border-bottom:1px solid var(--line);padding:2px 10px 2px 0;font-size:12px;text-align:left}
tr.bad td,th.bad{color:var(--bad);font-weight:700}
.scroll{overflow-x:auto;background:#fff;border:1px solid var(--line);border-radius:6px;padding:6px}
.heat th,.heat td{font-size:11px;padding:3px 6px;text-align:right;white-space:nowrap}
.heat thead th{vertical-align:bottom;max-width:140px;overflow:hidden;text-overflow:ellipsis;font-weight:600;color:var(--muted)}
.heat thead th span{display:block;overflow:hidden;text-overflow:ellipsis}
.heat thead th .at{font-weight:400}
.heat td{border:1px solid #fff;min-width:56px}
.note{color:var(--muted);font-size:12px}
.notes li{color:var(--muted);font-size:12px}
footer{margin-top:36px;color:var(--muted);font-size:12px}
)css";

}  // namespace

std::vector<WaitGroup> GroupWaits(const std::vector<pattern::RankStacks>& stacks) {
  std::map<std::string, WaitGroup> by_place;
  for (const pattern::RankStacks& r : stacks) {
    const pattern::ThreadStack* main = nullptr;
    for (const auto& t : r.threads)
      if (t.main || main == nullptr) main = &t;
    WaitGroup g;
    if (main && !main->frames.empty()) {
      // The innermost frame of the user's own code (diagnose/hang.h), as the hang finding says.
      const pattern::StackFrame* user = &main->frames.back();
      for (auto it = main->frames.rbegin(); it != main->frames.rend(); ++it)
        if (!diagnose::IsLibraryFrame(*it)) {
          user = &*it;
          break;
        }
      const pattern::StackFrame& f = *user;
      g.where = fmt::format("{}:{} in {}", f.file, f.line, f.function);
      for (const auto& fr : main->frames)
        g.stack.push_back(fmt::format("{}:{} in {}", fr.file, fr.line, fr.function));
    } else {
      g.where = "(no stack)";
    }
    const pattern::LastCollective& c = r.last_collective;
    if (c.in_progress) g.collective = fmt::format("in {} for {:.1f} s", c.op, c.seconds);
    auto [it, fresh] = by_place.try_emplace(g.where + "\x1f" + g.collective, std::move(g));
    it->second.ranks.push_back(r.rank);
  }
  std::vector<WaitGroup> out;
  for (auto& [k, g] : by_place) {
    std::sort(g.ranks.begin(), g.ranks.end());
    out.push_back(std::move(g));
  }
  std::stable_sort(out.begin(), out.end(), [](const WaitGroup& a, const WaitGroup& b) {
    return a.ranks.size() > b.ranks.size();
  });
  return out;
}

// Who the others wait for at the collectives (diagnose/what_if.h LateRanks), and which ranks
// each iteration waited for (CriticalPath): a note each, where known.
std::string WaitNotes(const Diagnosis& d) {
  std::string out;
  if (const auto late = diagnose::LateRanks(d.job.slack_ms_per_rank); !late.empty()) {
    out += "<p class=\"note\"><b>At the collectives the others wait for</b> ";
    for (size_t k = 0; k < late.size() && k < 5; ++k)
      out += fmt::format("{}rank {} ({} an iteration)", k ? ", " : "", late[k].first,
                         Ms(late[k].second));
    if (late.size() > 5) out += fmt::format(" and {} more", late.size() - 5);
    out +=
        ": the rest of the job waits for them, and fixing anything elsewhere gains nothing "
        "while they are late.</p>";
  }
  // Only ranks and counts: nothing to escape.
  if (const std::string phrase = diagnose::CriticalPathPhrase(d.job.critical_path);
      !phrase.empty()) {
    out +=
        "<p class=\"note\"><b>The critical path</b> (the last rank to arrive at the "
        "collectives), per iteration: " +
        phrase + ".</p>";
  }
  return out;
}

std::string RenderHtml(const HtmlInput& in) {
  const Diagnosis& d = *in.diagnosis;
  const CompactJob* job = in.job;
  std::string out;
  out.reserve(64 << 10);
  out +=
      "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
      // Nothing leaves the page: no script, no font, no image from anywhere.
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
      "'unsafe-inline'; img-src data:\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  out += "<title>" + Escape(in.title) + "</title><style>" + kStyle + "</style></head><body><main>";
  // The job.
  std::set<std::string> hosts;
  if (job)
    for (const CompactRank& r : job->ranks())
      if (!r.host.empty()) hosts.insert(r.host);
  out += "<header><h1>" + Escape(in.title) + "</h1>";
  if (!in.generated.empty()) out += "<div class=\"sub\">" + Escape(in.generated) + "</div>";
  out += "<div class=\"chips\">";
  auto chip = [&](const std::string& value, const std::string& what) {
    out += fmt::format("<div class=\"chip\"><b>{}</b><span>{}</span></div>", Escape(value),
                       Escape(what));
  };
  chip(std::to_string(d.job.ranks.size()), "ranks");
  chip(std::to_string(d.job.world_size), "world size");
  if (!hosts.empty()) chip(std::to_string(hosts.size()), hosts.size() == 1 ? "host" : "hosts");
  if (d.job.iterations == 0 && !d.job.run_iterations.empty()) {
    // No window behind this diagnosis (a hang): the run's iterations instead.
    int64_t most = 0;
    std::vector<double> p50;
    for (const auto& [r, st] : d.job.run_iterations) {
      most = std::max(most, st.count);
      p50.push_back(st.p50_ms);
    }
    chip(std::to_string(most), "iterations run");
    chip(Ms(Median(p50)), "median iteration (run)");
  } else {
    chip(std::to_string(d.job.iterations), "iterations profiled");
    chip(Ms(d.job.iteration_ms_median), "median iteration");
  }
  chip(std::to_string(d.findings.size()), d.findings.size() == 1 ? "finding" : "findings");
  out += "</div></header>";
  // Findings, biggest first (the diagnosis's order).
  out += "<h2>Findings</h2>";
  if (d.findings.empty()) {
    out +=
        "<section class=\"card ok\"><h3>No findings: nothing costs more than the "
        "thresholds.</h3><p class=\"note\">Every rank was compared with its peers and with the "
        "patterns a healthy job shows.</p></section>";
  }
  out += FindingsTable(d);
  int i = 0;
  for (const Finding& f : d.findings) out += FindingCard(++i, f, d, job);
  out += WaitTable(in.waits);
  out += WaitNotes(d);
  // The charts.
  if (std::string chart = IterationChart(in); !chart.empty()) {
    out += in.series.empty() ? "<h2>Iteration time per rank (the profiled window)</h2>"
                             : "<h2>Iteration time per rank over the run</h2>";
    out += chart;
    if (!in.windows.empty())
      out +=
          "<p class=\"note\">Shaded: the profiling windows (w<i>n</i>), every rank profiling the "
          "same iterations.</p>";
  }
  for (bool gpu : {false, true}) {
    if (std::string chart = internal::MemoryChart(in, gpu); !chart.empty()) {
      out += gpu ? "<h2>GPU memory per rank</h2>" : "<h2>Host memory per rank</h2>";
      out += chart;
      out += in.series.empty()
                 ? "<p class=\"note\">Allocated memory at each profiled iteration's end, as the "
                   "trace's memory records (profile_memory) count it.</p>"
                 : "<p class=\"note\">Each rank's memory as its agent sampled it with the "
                   "iteration reports (RSS; on GPUs the memory its process holds).</p>";
    }
  }
  if (job && in.views_from_window > 0)
    out += fmt::format(
        "<p class=\"note\">The per-rank views below are from window {}, the latest profiled.</p>",
        in.views_from_window);
  if (job) {
    if (std::string heat = Heatmap(d, *job); !heat.empty()) {
      out +=
          "<h2>Differential view: ranks &times; top functions</h2><p class=\"note\">Each cell: "
          "the rank's time per iteration in the function against its peer group's median (the "
          "ranks the diagnosis compares it with: the same role, nearly the same functions). Red "
          "is slower, blue faster.</p>";
      out += heat;
    }
    out +=
        "<h2>Where each rank's iteration goes</h2><p class=\"note\">CPU time per iteration on "
        "the training thread by kind of function (exclusive times); GPU idle time per "
        "iteration where the trace has the GPU.</p>";
    out += BreakdownChart(d, *job);
  } else {
    out +=
        "<p class=\"note\">No behaviour patterns with this report (a hang, or a diagnosis "
        "without its summaries): the per-rank views are left out.</p>";
  }
  if (!in.windows.empty()) {
    out +=
        "<h2>Profiling windows</h2><table class=\"kv\"><thead><tr><th>window</th>"
        "<th>iterations</th><th>why</th></tr></thead><tbody>";
    for (const WindowMark& w : in.windows)
      out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>", w.id,
                         w.start_iteration < 0 ? std::string("stacks")
                                               : fmt::format("{}..{}", w.start_iteration,
                                                             w.start_iteration + w.iterations - 1),
                         Escape(w.reason));
    out += "</tbody></table>";
  }
  if (d.job.attempts.size() > 1) {
    // An elastic restart: every attempt, how far it got and how it ended; the chart shows the
    // attempts' iterations one after another.
    out += "<h2>Attempts</h2><ul class=\"attempts\">";
    for (const auto& a : d.job.attempts) out += "<li>" + Escape(a.summary) + "</li>";
    out += "</ul>";
  }
  if (!d.job.notes.empty()) {
    out += "<h2>Notes</h2><ul class=\"notes\">";
    for (const auto& n : d.job.notes) out += "<li>" + Escape(n) + "</li>";
    out += "</ul>";
  }
  out += "<footer>";
  if (!in.trace_link.empty())
    out += fmt::format(
        "Timeline of the window, every rank on one clock: <a href=\"{}\">{}</a> (open it in "
        "ui.perfetto.dev). ",
        Escape(in.trace_link), Escape(in.trace_link));
  out +=
      "Made by perftracker. The same diagnosis as JSON: diagnosis.json "
      "(perftracker.diagnosis/1).</footer></main></body></html>\n";
  return out;
}

Status WriteHtmlFile(const HtmlInput& input, const std::string& path) {
  const std::string tmp = path + ".tmp";
  PT_RETURN_IF_ERROR(WriteTextFile(tmp, RenderHtml(input)));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Internal(fmt::format("{}: cannot rename: {}", path, ec.message()));
  return Status::Ok();
}

}  // namespace perftracker::report
