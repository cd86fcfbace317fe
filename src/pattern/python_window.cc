#include "pattern/python_window.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <vector>

#include "base/bucket_counts.h"
#include "pattern/names.h"
#include "pattern/summarizer.h"
#include "trace/reader.h"

namespace perftracker::pattern {
namespace {

namespace dom = simdjson::dom;

constexpr std::string_view kSchema = "perftracker.python_window/1";
// A window holds at most the tracer's node cap (64 K by default, ~35 MB of JSON at most); a
// file far beyond that is not one of ours.
constexpr size_t kMaxFileBytes = 512u << 20;
// Node 1 is the tracer's overflow node (worker/call_tree.h: CallTree::kOther).
constexpr size_t kOtherNode = 1;
constexpr char kOtherName[] = "<other: tracer node or depth cap reached>";

// The quarter-octave histogram of worker/call_tree.h: bucket b's lower edge in ns.
double LowerEdgeNs(int b) {
  if (b < 8) return b;
  return std::ldexp(1.0 + (b % 4) / 4.0, b / 4);
}

// Nearest-rank quantile Q, reported as the bucket's geometric middle clamped to the observed
// [lo, hi] (in us).
double Quantile(const BucketCounts& counts, double q, double lo, double hi) {
  const uint64_t n = counts.count();
  if (n == 0) return 0;
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(n))));
  const int b = counts.BucketAtRank(rank);
  const double mid = std::sqrt(std::max(1.0, LowerEdgeNs(b)) * LowerEdgeNs(b + 1)) / 1e3;
  return std::clamp(mid, lo, hi);
}

struct Acc {  // one function (name + stack); several nodes may normalize to the same one
  uint32_t name = 0;
  std::string stack;
  bool gc = false;
  bool top = false;
  uint64_t count = 0;
  double total_ns = 0, self_in_iters_ns = 0, sum_sq = 0;
  double min_ns = std::numeric_limits<double>::infinity(), max_ns = 0;
  uint64_t calls_in_iters = 0;
  BucketCounts hist;  // the quarter-octave buckets of every node merged into this function
  std::vector<double> iter_ns;
};

class Parser {
 public:
  Parser(std::string name, size_t bytes) : name_(std::move(name)), bytes_(bytes) {}

  StatusOr<RankSummary> Parse(dom::element doc) {
    dom::object root;
    if (doc.get_object().get(root) != simdjson::SUCCESS) return Bad("not a JSON object");
    std::string_view schema;
    if (root["schema"].get_string().get(schema) != simdjson::SUCCESS || schema != kSchema)
      return Bad(fmt::format("schema is not \"{}\"", kSchema));
    RankSummary s;
    s.source = name_;
    s.rank = trace::RankFromFileName(name_);
    s.iteration_source = "ProfilerStep";
    s.read_stats.bytes = bytes_;
    int64_t start = 0, end = 0, tid = 0;
    if (root["start_ns"].get_int64().get(start) != simdjson::SUCCESS ||
        root["end_ns"].get_int64().get(end) != simdjson::SUCCESS || end < start)
      return Bad("start_ns / end_ns missing or reversed");
    if (root["tid"].get_int64().get(tid) == simdjson::SUCCESS) s.main_tid = tid;
    s.window_ms = static_cast<double>(end - start) / 1e6;

    PT_RETURN_IF_ERROR(ReadIterations(root, &s));
    const size_t n_iters = s.iteration_ms.size();
    if (n_iters == 0) {  // no iteration completed: the window is one (flagged) iteration
      s.iteration_source = "window";
      s.whole_window = true;
      s.iteration_ms.assign(1, s.window_ms);
    }
    PT_RETURN_IF_ERROR(ReadNames(root));
    PT_RETURN_IF_ERROR(ReadNodes(root, s.whole_window, s.iteration_ms.size(), &s));
    uint64_t calls = 0;
    dom::object stats;
    if (root["stats"].get_object().get(stats) == simdjson::SUCCESS) {
      uint64_t v = 0;
      if (stats["calls"].get_uint64().get(v) == simdjson::SUCCESS) calls = v;
    }
    s.read_stats.events = calls;
    return s;
  }

 private:
  Status Bad(const std::string& what) const {
    return InvalidArgument(fmt::format("{}: bad Python window file: {}", name_, what));
  }

  Status ReadIterations(dom::object root, RankSummary* s) {
    dom::array its;
    if (root["iterations"].get_array().get(its) != simdjson::SUCCESS)
      return Bad("no \"iterations\" array");
    for (dom::element e : its) {
      dom::array a;
      int64_t index = 0, t0 = 0, t1 = 0;
      if (e.get_array().get(a) != simdjson::SUCCESS || a.size() != 3 ||
          a.at(0).get_int64().get(index) != simdjson::SUCCESS ||
          a.at(1).get_int64().get(t0) != simdjson::SUCCESS ||
          a.at(2).get_int64().get(t1) != simdjson::SUCCESS || t1 < t0)
        return Bad(
            fmt::format("iteration {} is not [index, start_ns, end_ns]", s->iteration_ms.size()));
      s->iteration_steps.push_back(index);
      s->iteration_ms.push_back(static_cast<double>(t1 - t0) / 1e6);
    }
    return Status::Ok();
  }

  Status ReadNames(dom::object root) {
    dom::array names;
    if (root["names"].get_array().get(names) != simdjson::SUCCESS) return Bad("no \"names\" array");
    std::string norm;
    for (dom::element e : names) {
      std::string_view v;
      if (e.get_string().get(v) != simdjson::SUCCESS)
        return Bad(fmt::format("name {} is not a string", names_.size()));
      NormalizeNameInto(v, trace::EventKind::kPythonFunction, &norm);
      names_.push_back(norm);
    }
    return Status::Ok();
  }

  static bool U64(dom::array a, size_t i, uint64_t* v) {
    return a.at(i).get_uint64().get(*v) == simdjson::SUCCESS;
  }

  Status ReadNodes(dom::object root, bool whole_window, size_t n_iters, RankSummary* s) {
    dom::array nodes;
    if (root["nodes"].get_array().get(nodes) != simdjson::SUCCESS) return Bad("no \"nodes\" array");
    // Parents come before their children (the tracer creates them in that order), so one pass
    // builds each node's caller stack from its parent's.
    std::vector<std::string> context;  // node -> its stack as seen by its children
    std::vector<uint32_t> acc_of;      // node -> function
    std::map<std::pair<std::string, std::string>, uint32_t> index;  // (name, stack) -> function
    std::vector<Acc> fns;
    size_t i = 0;
    for (dom::element e : nodes) {
      dom::array a;
      uint64_t parent = 0, name = 0, gc = 0, count = 0, total = 0, self = 0, min = 0, max = 0;
      int64_t offset = 0;
      double sum_sq = 0;
      dom::array hist, cells;
      if (e.get_array().get(a) != simdjson::SUCCESS || a.size() != 12 || !U64(a, 0, &parent) ||
          !U64(a, 1, &name) || !U64(a, 2, &gc) || !U64(a, 3, &count) || !U64(a, 4, &total) ||
          !U64(a, 5, &self) || !U64(a, 6, &min) || !U64(a, 7, &max) ||
          a.at(8).get_double().get(sum_sq) != simdjson::SUCCESS ||
          a.at(9).get_int64().get(offset) != simdjson::SUCCESS ||
          a.at(10).get_array().get(hist) != simdjson::SUCCESS ||
          a.at(11).get_array().get(cells) != simdjson::SUCCESS)
        return Bad(
            fmt::format("node {} is not [parent, name, gc, count, total_ns, self_ns, "
                        "min_ns, max_ns, sum_sq, hist_offset, [hist], [cells]]",
                        i));
      if (i > 0 && parent >= i)
        return Bad(fmt::format("node {}: parent {} comes later", i, parent));
      if (name >= names_.size()) return Bad(fmt::format("node {}: name {} out of range", i, name));
      if (offset < 0 || offset > 256) return Bad(fmt::format("node {}: histogram offset", i));
      const std::string& fname = i == kOtherNode ? std::string(kOtherName) : names_[name];
      std::string stack = i == 0 ? "" : context[parent];
      context.push_back(i == 0 ? "" : (stack.empty() ? fname : stack + ";" + fname));
      if (i == 0 || count == 0) {
        acc_of.push_back(0);
        ++i;
        continue;
      }
      auto [it, inserted] = index.try_emplace({fname, stack}, static_cast<uint32_t>(fns.size()));
      if (inserted) {
        Acc& f = fns.emplace_back();
        f.stack = stack;
        f.gc = gc != 0;
        f.top = parent == 0;
        f.iter_ns.assign(n_iters, 0.0);
        names_.push_back(fname);
        f.name = static_cast<uint32_t>(names_.size() - 1);
      }
      Acc& f = fns[it->second];
      f.count += count;
      f.total_ns += static_cast<double>(total);
      f.sum_sq += sum_sq;
      f.min_ns = std::min(f.min_ns, static_cast<double>(min));
      f.max_ns = std::max(f.max_ns, static_cast<double>(max));
      if (offset + hist.size() > 300) return Bad(fmt::format("node {}: histogram size", i));
      int bucket = static_cast<int>(offset);
      for (dom::element h : hist) {
        uint64_t c = 0;
        if (h.get_uint64().get(c) != simdjson::SUCCESS || c > UINT32_MAX)
          return Bad(fmt::format("node {}: histogram count", i));
        if (c > 0) f.hist.Add(bucket, static_cast<uint32_t>(c));
        ++bucket;
      }
      for (dom::element c : cells) {
        dom::array ca;
        int64_t iter = 0;
        uint64_t calls = 0, incl = 0, cself = 0;
        if (c.get_array().get(ca) != simdjson::SUCCESS || ca.size() != 4 ||
            ca.at(0).get_int64().get(iter) != simdjson::SUCCESS || !U64(ca, 1, &calls) ||
            !U64(ca, 2, &incl) || !U64(ca, 3, &cself))
          return Bad(
              fmt::format("node {}: an iteration cell is not [iteration, calls, "
                          "inclusive_ns, self_ns]",
                          i));
        // Whole-window mode: every call counts in the one iteration.
        const int64_t slot = whole_window ? 0 : iter;
        if (slot < 0 || slot >= static_cast<int64_t>(n_iters)) continue;
        f.calls_in_iters += calls;
        f.iter_ns[static_cast<size_t>(slot)] += static_cast<double>(incl);
        f.self_in_iters_ns += static_cast<double>(cself);
      }
      ++i;
    }
    Emit(fns, n_iters, s);
    return Status::Ok();
  }

  void Emit(const std::vector<Acc>& fns, size_t n_iters, RankSummary* s) const {
    const double dn = n_iters ? static_cast<double>(n_iters) : 1.0;
    const double mean_iter_us = s->MeanIterationMs() * 1000.0;
    uint64_t outside = 0;
    for (const Acc& f : fns) {
      FunctionPattern& p = s->functions.emplace_back();
      p.name = names_[f.name];
      p.kind = trace::EventKind::kPythonFunction;
      p.fclass = f.gc ? FunctionClass::kGc : ClassifyPythonFunction(p.name, f.stack);
      p.stack = f.stack;
      p.main_thread = true;  // the tracer follows the training thread only
      p.top_level = f.top;
      p.count = f.count;
      p.total_us = f.total_ns / 1e3;
      p.mean_us = p.total_us / static_cast<double>(f.count);
      p.min_us = f.min_ns / 1e3;
      p.max_us = f.max_ns / 1e3;
      const double mean_ns = f.total_ns / static_cast<double>(f.count);
      const double var = std::max(0.0, f.sum_sq / static_cast<double>(f.count) - mean_ns * mean_ns);
      p.cv = mean_ns > 0 ? std::sqrt(var) / mean_ns : 0;
      p.p50_us = Quantile(f.hist, 0.50, p.min_us, p.max_us);
      p.p99_us = Quantile(f.hist, 0.99, p.min_us, p.max_us);
      p.calls_per_iter = static_cast<double>(f.calls_in_iters) / dn;
      double in_iters = 0;
      p.iter_us.assign(n_iters, 0.0f);
      for (size_t k = 0; k < n_iters; ++k) {
        in_iters += f.iter_ns[k];
        p.iter_us[k] = static_cast<float>(f.iter_ns[k] / 1e3);
      }
      p.per_iter_us = in_iters / 1e3 / dn;
      p.share = mean_iter_us > 0 ? p.per_iter_us / mean_iter_us : 0;
      p.self_per_iter_us = f.self_in_iters_ns / 1e3 / dn;
      outside += f.count - f.calls_in_iters;
    }
    s->events_outside_iterations = outside;
    std::sort(s->functions.begin(), s->functions.end(),
              [](const FunctionPattern& a, const FunctionPattern& b) {
                if (a.per_iter_us != b.per_iter_us) return a.per_iter_us > b.per_iter_us;
                if (a.total_us != b.total_us) return a.total_us > b.total_us;
                return a.Key() < b.Key();
              });
  }

  std::string name_;
  size_t bytes_;
  std::vector<std::string> names_;
};

}  // namespace

bool LooksLikePythonWindow(std::string_view head) {
  size_t i = 0;
  while (i < head.size() && (head[i] == ' ' || head[i] == '\n' || head[i] == '\t')) ++i;
  head.remove_prefix(i);
  return head.substr(0, 10) == "{\"schema\":" &&
         head.find("perftracker.python_window/") != std::string_view::npos;
}

StatusOr<RankSummary> SummarizePythonWindowBuffer(std::string_view json, const std::string& name) {
  simdjson::padded_string padded(json);
  dom::parser parser;
  dom::element doc;
  if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS)
    return InvalidArgument(
        fmt::format("{}: bad Python window file: {}", name, simdjson::error_message(err)));
  return Parser(name, json.size()).Parse(doc);
}

StatusOr<RankSummary> SummarizePythonWindow(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("{}: cannot open", path));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<size_t>(size) > kMaxFileBytes)
    return InvalidArgument(fmt::format("{}: Python window file of {} bytes is over the {} MB limit",
                                       path, size, kMaxFileBytes >> 20));
  std::string data(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(data.data(), size);
  if (!in) return DataLoss(fmt::format("{}: read failed", path));
  return SummarizePythonWindowBuffer(data, path);
}

}  // namespace perftracker::pattern
