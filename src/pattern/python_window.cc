#include "pattern/python_window.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "base/bucket_counts.h"
#include "base/limits.h"
#include "base/units.h"
#include "pattern/memory_sites.h"
#include "pattern/names.h"
#include "pattern/summarizer.h"
#include "trace/reader.h"

namespace perftracker::pattern {
namespace {

namespace dom = simdjson::dom;
namespace pw = python_window;

// Nearest-rank quantile Q, reported as the bucket's geometric middle clamped to the observed
// [lo, hi] (in us).
double Quantile(const BucketCounts& counts, double q, double lo, double hi) {
  const uint64_t n = counts.count();
  if (n == 0) return 0;
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(n))));
  const int b = counts.BucketAtRank(rank);
  const double mid =
      NsToUs(std::sqrt(std::max(1.0, pw::HistogramLowerEdge(b)) * pw::HistogramLowerEdge(b + 1)));
  return std::clamp(mid, lo, hi);
}

// Reads the JSON document into a PythonWindowFile, one record at a time, each checked.
class FileReader {
 public:
  FileReader(const std::string& name, size_t bytes) : name_(name) { f_.bytes = bytes; }

  StatusOr<PythonWindowFile> Read(dom::element doc) {
    dom::object root;
    if (doc.get_object().get(root) != simdjson::SUCCESS) return Bad("not a JSON object");
    std::string_view schema;
    if (root["schema"].get_string().get(schema) != simdjson::SUCCESS || schema != pw::kSchema)
      return Bad(fmt::format("schema is not \"{}\"", pw::kSchema));
    if (root["start_ns"].get_int64().get(f_.start_ns) != simdjson::SUCCESS ||
        root["end_ns"].get_int64().get(f_.end_ns) != simdjson::SUCCESS || f_.end_ns < f_.start_ns)
      return Bad("start_ns / end_ns missing or reversed");
    f_.has_tid = root["tid"].get_int64().get(f_.tid) == simdjson::SUCCESS;
    PT_RETURN_IF_ERROR(ReadIterations(root));
    PT_RETURN_IF_ERROR(ReadNames(root));
    PT_RETURN_IF_ERROR(ReadNodes(root));
    PT_RETURN_IF_ERROR(ReadLongCalls(root));
    PT_RETURN_IF_ERROR(ReadKept(root));
    dom::object stats;
    if (root["stats"].get_object().get(stats) == simdjson::SUCCESS) {
      uint64_t v = 0;
      if (stats["calls"].get_uint64().get(v) == simdjson::SUCCESS) f_.calls = v;
    }
    return std::move(f_);
  }

 private:
  Status Bad(const std::string& what) const {
    return InvalidArgument(fmt::format("{}: bad Python window file: {}", name_, what));
  }

  static bool U64(dom::array a, size_t i, uint64_t* v) {
    return a.at(i).get_uint64().get(*v) == simdjson::SUCCESS;
  }
  static bool I64(dom::array a, size_t i, int64_t* v) {
    return a.at(i).get_int64().get(*v) == simdjson::SUCCESS;
  }

  Status ReadIterations(dom::object root) {
    dom::array its;
    if (root["iterations"].get_array().get(its) != simdjson::SUCCESS)
      return Bad("no \"iterations\" array");
    for (dom::element e : its) {
      dom::array a;
      PythonWindowFile::Iteration it;
      if (e.get_array().get(a) != simdjson::SUCCESS || a.size() != pw::kIterationSlots ||
          !I64(a, pw::kIterationIndex, &it.index) || !I64(a, pw::kIterationStartNs, &it.start_ns) ||
          !I64(a, pw::kIterationEndNs, &it.end_ns) || it.end_ns < it.start_ns)
        return Bad(
            fmt::format("iteration {} is not [index, start_ns, end_ns]", f_.iterations.size()));
      f_.iterations.push_back(it);
    }
    return Status::Ok();
  }

  Status ReadNames(dom::object root) {
    dom::array names;
    if (root["names"].get_array().get(names) != simdjson::SUCCESS) return Bad("no \"names\" array");
    for (dom::element e : names) {
      std::string_view v;
      if (e.get_string().get(v) != simdjson::SUCCESS)
        return Bad(fmt::format("name {} is not a string", f_.names.size()));
      f_.names.emplace_back(v);
    }
    return Status::Ok();
  }

  Status ReadNodes(dom::object root) {
    dom::array nodes;
    if (root["nodes"].get_array().get(nodes) != simdjson::SUCCESS) return Bad("no \"nodes\" array");
    for (dom::element e : nodes) {
      const size_t i = f_.nodes.size();
      dom::array a, hist, cells;
      PythonWindowFile::Node n;
      uint64_t gc = 0;
      if (e.get_array().get(a) != simdjson::SUCCESS || a.size() != pw::kNodeSlots ||
          !U64(a, pw::kParent, &n.parent) || !U64(a, pw::kName, &n.name) || !U64(a, pw::kGc, &gc) ||
          !U64(a, pw::kCount, &n.count) || !U64(a, pw::kTotalNs, &n.total_ns) ||
          !U64(a, pw::kSelfNs, &n.self_ns) || !U64(a, pw::kMinNs, &n.min_ns) ||
          !U64(a, pw::kMaxNs, &n.max_ns) ||
          a.at(pw::kSumSqNs).get_double().get(n.sum_sq_ns) != simdjson::SUCCESS ||
          !I64(a, pw::kHistOffset, &n.hist_offset) ||
          a.at(pw::kHist).get_array().get(hist) != simdjson::SUCCESS ||
          a.at(pw::kCells).get_array().get(cells) != simdjson::SUCCESS)
        return Bad(
            fmt::format("node {} is not [parent, name, gc, count, total_ns, self_ns, "
                        "min_ns, max_ns, sum_sq, hist_offset, [hist], [cells]]",
                        i));
      n.gc = gc != 0;
      // Parents come before their children (the tracer creates them in that order).
      if (i > 0 && n.parent >= i)
        return Bad(fmt::format("node {}: parent {} comes later", i, n.parent));
      if (n.name >= f_.names.size())
        return Bad(fmt::format("node {}: name {} out of range", i, n.name));
      if (n.hist_offset < 0 || n.hist_offset > pw::kMaxHistogramOffset)
        return Bad(fmt::format("node {}: histogram offset", i));
      if (static_cast<size_t>(n.hist_offset) + hist.size() > pw::kMaxHistogramEnd)
        return Bad(fmt::format("node {}: histogram size", i));
      for (dom::element h : hist) {
        uint64_t c = 0;
        if (h.get_uint64().get(c) != simdjson::SUCCESS || c > UINT32_MAX)
          return Bad(fmt::format("node {}: histogram count", i));
        n.hist.push_back(static_cast<uint32_t>(c));
      }
      for (dom::element c : cells) {
        dom::array ca;
        PythonWindowFile::Cell cell;
        if (c.get_array().get(ca) != simdjson::SUCCESS || ca.size() != pw::kCellSlots ||
            !I64(ca, pw::kCellIteration, &cell.iteration) ||
            !U64(ca, pw::kCellCalls, &cell.calls) ||
            !U64(ca, pw::kCellInclusiveNs, &cell.inclusive_ns) ||
            !U64(ca, pw::kCellSelfNs, &cell.self_ns))
          return Bad(
              fmt::format("node {}: an iteration cell is not [iteration, calls, "
                          "inclusive_ns, self_ns]",
                          i));
        n.cells.push_back(cell);
      }
      f_.nodes.push_back(std::move(n));
    }
    return Status::Ok();
  }

  // Optional: a file without them has no timeline of long calls.
  Status ReadLongCalls(dom::object root) {
    dom::array calls;
    if (root["long_calls"].get_array().get(calls) != simdjson::SUCCESS) return Status::Ok();
    for (dom::element e : calls) {
      dom::array a;
      PythonWindowFile::LongCall c;
      if (e.get_array().get(a) != simdjson::SUCCESS || a.size() != pw::kLongCallSlots ||
          !U64(a, pw::kLongCallNode, &c.node) || !I64(a, pw::kLongCallStartNs, &c.start_ns) ||
          !I64(a, pw::kLongCallEndNs, &c.end_ns) || c.node >= f_.nodes.size())
        return Bad(
            fmt::format("long call {} is not [node, start_ns, end_ns]", f_.long_calls.size()));
      f_.long_calls.push_back(c);
    }
    return Status::Ok();
  }

  // Optional: only a window that sampled the heap has it.
  Status ReadKept(dom::object root) {
    dom::object kept;
    if (root["kept_memory"].get_object().get(kept) != simdjson::SUCCESS) return Status::Ok();
    dom::array cells;
    if (kept["sample_bytes"].get_int64().get(f_.kept_sample_bytes) != simdjson::SUCCESS ||
        f_.kept_sample_bytes <= 0 || kept["cells"].get_array().get(cells) != simdjson::SUCCESS)
      return Bad("kept_memory has no sample_bytes > 0 or no cells");
    // Counts for the record only: a file without them reads as none.
    if (kept["samples"].get_uint64().get(f_.kept_samples) != simdjson::SUCCESS) f_.kept_samples = 0;
    if (kept["dropped"].get_uint64().get(f_.kept_dropped) != simdjson::SUCCESS) f_.kept_dropped = 0;
    for (dom::element e : cells) {
      dom::array a;
      PythonWindowFile::KeptCell c;
      const bool is_array = e.get_array().get(a) == simdjson::SUCCESS;
      const bool with_op = is_array && a.size() == pw::kKeptOp + 1;
      if (!is_array || (a.size() != pw::kKeptCellSlots && !with_op) ||
          !U64(a, pw::kKeptNode, &c.node) || !I64(a, pw::kKeptIteration, &c.iteration) ||
          !U64(a, pw::kKeptBytes, &c.bytes) || !U64(a, pw::kKeptSamples, &c.samples) ||
          (with_op && !U64(a, pw::kKeptOp, &c.op)) || c.node >= f_.nodes.size() ||
          c.iteration < -1 || c.iteration >= static_cast<int64_t>(f_.iterations.size()) ||
          c.op >= f_.names.size())
        return Bad(fmt::format(
            "kept_memory cell {} is not [node, iteration, bytes, samples] or with an op name",
            f_.kept.size()));
      f_.kept.push_back(c);
    }
    return Status::Ok();
  }

  std::string name_;
  PythonWindowFile f_;
};

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

// The window's behaviour patterns from the file's call-stack aggregate.
class Parser {
 public:
  explicit Parser(std::string name) : name_(std::move(name)) {}

  RankSummary Summarize(const PythonWindowFile& file) {
    RankSummary s;
    s.source = name_;
    s.rank = trace::RankFromFileName(name_);
    s.iteration_source = "ProfilerStep";
    s.read_stats.bytes = file.bytes;
    if (file.has_tid) s.main_tid = file.tid;
    s.window_ms = NsToMs(static_cast<double>(file.end_ns - file.start_ns));
    for (const PythonWindowFile::Iteration& it : file.iterations) {
      s.iteration_steps.push_back(it.index);
      s.iteration_ms.push_back(NsToMs(static_cast<double>(it.end_ns - it.start_ns)));
    }
    if (s.iteration_ms.empty()) {  // no iteration completed: the window is one (flagged) iteration
      s.iteration_source = "window";
      s.whole_window = true;
      s.iteration_ms.assign(1, s.window_ms);
    }
    std::string norm;
    for (const std::string& v : file.names) {
      NormalizeNameInto(v, trace::EventKind::kPythonFunction, &norm);
      names_.push_back(norm);
    }
    Aggregate(file, s.whole_window, s.iteration_ms.size(), &s);
    if (!s.whole_window) PlaceKeptHeap(file, s.iteration_ms.size(), &s);
    s.read_stats.events = file.calls;
    return s;
  }

 private:
  void Aggregate(const PythonWindowFile& file, bool whole_window, size_t n_iters, RankSummary* s) {
    // Parents come before their children, so one pass builds each node's caller stack from its
    // parent's (kept: PlaceKeptHeap names places by it).
    std::vector<std::string>& context = node_stacks_;  // node -> its stack as seen by its children
    context.clear();
    std::map<std::pair<std::string, std::string>, uint32_t> index;  // (name, stack) -> function
    std::vector<Acc> fns;
    for (size_t i = 0; i < file.nodes.size(); ++i) {
      const PythonWindowFile::Node& n = file.nodes[i];
      const std::string& fname = i == pw::kOtherNode ? std::string(pw::kOtherName) : names_[n.name];
      std::string stack = i == pw::kRootNode ? "" : context[n.parent];
      context.push_back(i == pw::kRootNode ? "" : (stack.empty() ? fname : stack + ";" + fname));
      if (i == pw::kRootNode || n.count == 0) continue;
      auto [it, inserted] = index.try_emplace({fname, stack}, static_cast<uint32_t>(fns.size()));
      if (inserted) {
        Acc& f = fns.emplace_back();
        f.stack = stack;
        f.gc = n.gc;
        f.top = n.parent == pw::kRootNode;
        f.iter_ns.assign(n_iters, 0.0);
        names_.push_back(fname);
        f.name = static_cast<uint32_t>(names_.size() - 1);
      }
      Acc& f = fns[it->second];
      f.count += n.count;
      f.total_ns += static_cast<double>(n.total_ns);
      f.sum_sq += n.sum_sq_ns;
      f.min_ns = std::min(f.min_ns, static_cast<double>(n.min_ns));
      f.max_ns = std::max(f.max_ns, static_cast<double>(n.max_ns));
      int bucket = static_cast<int>(n.hist_offset);
      for (uint32_t c : n.hist) {
        if (c > 0) f.hist.Add(bucket, c);
        ++bucket;
      }
      for (const PythonWindowFile::Cell& cell : n.cells) {
        // Whole-window mode: every call counts in the one iteration.
        const int64_t slot = whole_window ? 0 : cell.iteration;
        if (slot < 0 || slot >= static_cast<int64_t>(n_iters)) continue;
        f.calls_in_iters += cell.calls;
        f.iter_ns[static_cast<size_t>(slot)] += static_cast<double>(cell.inclusive_ns);
        f.self_in_iters_ns += static_cast<double>(cell.self_ns);
      }
    }
    Emit(fns, n_iters, s);
  }

  // The sampled heap kept past the iteration that allocated it, in every iteration but the last
  // (whose objects the next one may still free), by the program's innermost function around
  // the allocation: a builtin it called, torch's own Python, the collector's tensor recorder or
  // a comprehension is walked up from (IsProgramFrame), as profile_memory's records are placed.
  // Tensors followed whole (a cell with an op) stay apart from the Python objects made there.
  void PlaceKeptHeap(const PythonWindowFile& file, size_t n_iters, RankSummary* s) const {
    if (file.kept.empty() || n_iters < 2) return;
    const int64_t counted = static_cast<int64_t>(n_iters) - 1;
    struct Place {
      double bytes = 0;
      uint64_t samples = 0;
      std::vector<bool> kept_in;
    };
    // (function, stack, op)
    std::map<std::tuple<std::string, std::string, std::string>, Place> places;
    for (const PythonWindowFile::KeptCell& c : file.kept) {
      if (c.iteration < 0 || c.iteration >= counted) continue;
      size_t at = c.node;
      while (at != pw::kRootNode &&
             (file.nodes[at].gc || at == pw::kOtherNode || !IsProgramFrame(NodeName(file, at))))
        at = file.nodes[at].parent;
      if (at == pw::kRootNode) continue;  // allocated outside every program function
      Place& p = places[{NodeName(file, at), node_stacks_[file.nodes[at].parent],
                         c.op != 0 ? file.names[c.op] : std::string(kPythonHeapOp)}];
      if (p.kept_in.empty()) p.kept_in.assign(static_cast<size_t>(counted), false);
      p.bytes += static_cast<double>(c.bytes);
      p.samples += c.samples;
      p.kept_in[static_cast<size_t>(c.iteration)] = true;
    }
    std::vector<MemorySite> sites;
    for (const auto& [key, p] : places) {
      MemorySite& m = sites.emplace_back();
      m.device = "cpu";
      m.function = std::get<0>(key);
      m.stack = std::get<1>(key);
      m.op = std::get<2>(key);
      m.kept_bytes = p.bytes;
      m.kept_iterations =
          static_cast<uint32_t>(std::count(p.kept_in.begin(), p.kept_in.end(), true));
      m.counted_iterations = static_cast<uint32_t>(counted);
      m.allocations = p.samples;
    }
    std::stable_sort(sites.begin(), sites.end(), [](const MemorySite& a, const MemorySite& b) {
      return a.kept_bytes > b.kept_bytes;
    });
    if (sites.size() > RankSummary::kMaxMemorySites) sites.resize(RankSummary::kMaxMemorySites);
    s->memory_sites = std::move(sites);
  }

  const std::string& NodeName(const PythonWindowFile& file, size_t node) const {
    static const std::string other = pw::kOtherName;
    return node == pw::kOtherNode ? other : names_[file.nodes[node].name];
  }

  void Emit(const std::vector<Acc>& fns, size_t n_iters, RankSummary* s) const {
    const double dn = n_iters ? static_cast<double>(n_iters) : 1.0;
    const double mean_iter_us = MsToUs(s->MeanIterationMs());
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
      p.total_us = NsToUs(f.total_ns);
      p.mean_us = p.total_us / static_cast<double>(f.count);
      p.min_us = NsToUs(f.min_ns);
      p.max_us = NsToUs(f.max_ns);
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
        p.iter_us[k] = static_cast<float>(NsToUs(f.iter_ns[k]));
      }
      p.per_iter_us = NsToUs(in_iters) / dn;
      p.share = mean_iter_us > 0 ? p.per_iter_us / mean_iter_us : 0;
      p.self_per_iter_us = NsToUs(f.self_in_iters_ns) / dn;
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
  std::vector<std::string> names_;
  std::vector<std::string> node_stacks_;  // Aggregate's: node -> its stack, itself included
};

}  // namespace

StatusOr<PythonWindowFile> ParsePythonWindow(std::string_view json, const std::string& name) {
  simdjson::padded_string padded(json);
  dom::parser parser;
  dom::element doc;
  if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS)
    return InvalidArgument(
        fmt::format("{}: bad Python window file: {}", name, simdjson::error_message(err)));
  return FileReader(name, json.size()).Read(doc);
}

StatusOr<PythonWindowFile> ReadPythonWindow(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("{}: cannot open", path));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<size_t>(size) > limits::kMaxPythonWindowFile)
    return InvalidArgument(fmt::format("{}: Python window file of {} bytes is over the {} MB limit",
                                       path, size, limits::kMaxPythonWindowFile >> 20));
  std::string data(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(data.data(), size);
  if (!in) return DataLoss(fmt::format("{}: read failed", path));
  return ParsePythonWindow(data, path);
}

StatusOr<RankSummary> SummarizePythonWindowBuffer(std::string_view json, const std::string& name) {
  PT_ASSIGN_OR_RETURN(PythonWindowFile file, ParsePythonWindow(json, name));
  return Parser(name).Summarize(file);
}

StatusOr<RankSummary> SummarizePythonWindow(const std::string& path) {
  PT_ASSIGN_OR_RETURN(PythonWindowFile file, ReadPythonWindow(path));
  return Parser(path).Summarize(file);
}

bool IsPythonWindowFile(const std::string& path) {
  char head[96] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(head, sizeof head);
  return python_window::LooksLikePythonWindow(
      std::string_view(head, static_cast<size_t>(in.gcount())));
}

}  // namespace perftracker::pattern
