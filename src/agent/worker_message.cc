#include "agent/worker_message.h"

#include <algorithm>
#include <cmath>

#include "base/limits.h"

namespace perftracker::agent {
namespace {

namespace dom = simdjson::dom;
using L = WorkerMessageLimits;

// JSON numbers arrive as int64, uint64 or double depending on the writer; null and absent are
// "unknown".
std::optional<double> GetDouble(dom::element obj, std::string_view key) {
  dom::element v;
  double d = 0;
  if (obj[key].get(v) != simdjson::SUCCESS || v.get_double().get(d) != simdjson::SUCCESS ||
      !std::isfinite(d)) {
    return std::nullopt;
  }
  return d;
}

std::optional<int64_t> GetInt(dom::element obj, std::string_view key) {
  dom::element v;
  if (obj[key].get(v) != simdjson::SUCCESS) return std::nullopt;
  int64_t i = 0;
  if (v.get_int64().get(i) == simdjson::SUCCESS) return i;
  double d = 0;
  if (v.get_double().get(d) == simdjson::SUCCESS && std::isfinite(d) && std::fabs(d) < 9e18) {
    return static_cast<int64_t>(std::llround(d));
  }
  return std::nullopt;
}

// A string field, cut to L::kMaxString bytes.
std::optional<std::string> GetString(dom::element obj, std::string_view key) {
  std::string_view s;
  if (obj[key].get_string().get(s) != simdjson::SUCCESS) return std::nullopt;
  return std::string(s.substr(0, L::kMaxString));
}

std::optional<bool> GetBool(dom::element obj, std::string_view key) {
  bool b = false;
  if (obj[key].get_bool().get(b) != simdjson::SUCCESS) return std::nullopt;
  return b;
}

int ToInt(int64_t v) { return static_cast<int>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)); }

void ParseIdentity(dom::element doc, WorkerMessage* m) {
  if (auto v = GetInt(doc, "pid"); v && *v > 0 && *v <= INT32_MAX) m->pid = ToInt(*v);
  if (auto v = GetInt(doc, "rank"); v && limits::ValidRank(*v)) m->rank = ToInt(*v);
  if (auto v = GetInt(doc, "local_rank"); v && limits::ValidRank(*v)) m->local_rank = ToInt(*v);
  if (auto v = GetInt(doc, "world_size"); v && limits::ValidWorldSize(*v))
    m->world_size = ToInt(*v);
  if (auto v = GetString(doc, "host")) m->host = std::move(*v);
  if (auto v = GetInt(doc, "attempt"); v && limits::ValidAttempt(*v)) m->attempt = ToInt(*v);
}

bool ParseIterations(dom::element doc, WorkerMessage* m) {
  dom::array items;
  if (doc["items"].get_array().get(items) != simdjson::SUCCESS) return false;
  for (dom::element item : items) {
    dom::array a;
    int64_t index = 0;
    double start = 0, end = 0;
    if (m->items.size() >= L::kMaxItems || item.get_array().get(a) != simdjson::SUCCESS ||
        a.size() < 3 || a.at(0).get_int64().get(index) != simdjson::SUCCESS ||
        a.at(1).get_double().get(start) != simdjson::SUCCESS ||
        a.at(2).get_double().get(end) != simdjson::SUCCESS || !std::isfinite(start) ||
        !std::isfinite(end)) {
      ++m->skipped_items;
      continue;
    }
    m->items.push_back({index, start, end});
  }
  // "cuda": [allocated, reserved, peak_allocated].
  dom::array cuda;
  if (doc["cuda"].get_array().get(cuda) == simdjson::SUCCESS && cuda.size() == 3) {
    double v[3] = {};
    size_t i = 0;
    for (dom::element e : cuda) {
      if (e.get_double().get(v[i]) != simdjson::SUCCESS || !std::isfinite(v[i]) || v[i] < 0 ||
          v[i] > limits::kMaxMemoryBytes)
        break;
      ++i;
    }
    if (i == 3) m->cuda = pattern::CudaMemory{v[0], v[1], v[2]};
  }
  return true;
}

bool ParseStacks(dom::element doc, WorkerMessage* m) {
  std::optional<int64_t> request_id = GetInt(doc, "request_id");
  if (!request_id) return false;
  m->request_id = *request_id;
  pattern::RankStacks& s = m->stacks;
  s.iteration = GetInt(doc, "iteration").value_or(-1);
  dom::array threads;
  if (doc["threads"].get_array().get(threads) == simdjson::SUCCESS) {
    for (dom::element t : threads) {
      if (s.threads.size() >= L::kMaxThreads) break;
      if (!t.is_object()) continue;
      pattern::ThreadStack& ts = s.threads.emplace_back();
      ts.tid = GetInt(t, "tid").value_or(0);
      ts.name = GetString(t, "name").value_or("");
      ts.main = GetBool(t, "main").value_or(false);
      dom::array frames;
      if (t["frames"].get_array().get(frames) != simdjson::SUCCESS) continue;
      // Outermost first: a runaway stack keeps its innermost frames, where it is stuck.
      const size_t n = frames.size();
      size_t skip = n > L::kMaxFrames ? n - L::kMaxFrames : 0;
      for (dom::element f : frames) {
        if (skip > 0) {
          --skip;
          continue;
        }
        if (!f.is_object()) continue;
        ts.frames.push_back({GetString(f, "file").value_or(""),
                             ToInt(GetInt(f, "line").value_or(0)),
                             GetString(f, "function").value_or("")});
      }
    }
  }
  dom::element lc;
  if (doc["last_collective"].get(lc) == simdjson::SUCCESS && lc.is_object()) {
    pattern::LastCollective& l = s.last_collective;
    l.op = GetString(lc, "op").value_or("");
    l.count = GetInt(lc, "count").value_or(0);
    l.file = GetString(lc, "file").value_or("");
    l.line = ToInt(GetInt(lc, "line").value_or(0));
    l.in_progress = GetBool(lc, "in_progress").value_or(false);
    l.seconds = GetDouble(lc, "seconds").value_or(0);
  }
  return true;
}

}  // namespace

void ParseWorkerMessage(std::string_view line, dom::parser& parser, WorkerMessage* out) {
  *out = WorkerMessage();
  WorkerMessage& m = *out;
  dom::element doc;
  if (parser.parse(line.data(), line.size()).get(doc) != simdjson::SUCCESS || !doc.is_object())
    return;  // kMalformed
  std::string_view type;
  if (doc["type"].get_string().get(type) != simdjson::SUCCESS) return;
  ParseIdentity(doc, &m);
  using T = WorkerMessageType;
  if (type == "hello") {
    m.type = T::kHello;
    m.version = GetInt(doc, "v").value_or(0);
    m.clock_offset_ns = GetInt(doc, "clock_offset_ns").value_or(0);
  } else if (type == "iterations") {
    m.type = ParseIterations(doc, &m) ? T::kIterations : T::kMalformed;
  } else if (type == "trigger") {
    m.kind = GetString(doc, "kind").value_or("");
    m.iteration = GetInt(doc, "iteration").value_or(0);
    m.mean_ns = GetDouble(doc, "mean_ns").value_or(0);
    m.best_ns = GetDouble(doc, "best_ns").value_or(0);
    m.type = m.kind == "slowdown" || m.kind == "hang" ? T::kTrigger : T::kUnknown;
  } else if (type == "python_trace" || type == "torch_trace") {
    m.path = GetString(doc, "path").value_or("");
    m.window = GetInt(doc, "window");
    m.torch = GetBool(doc, "torch");
    m.error = GetString(doc, "error");
    if (type == "python_trace")
      m.type = m.path.empty() ? T::kMalformed : T::kPythonTrace;
    else
      m.type = m.path.empty() && !m.error ? T::kMalformed : T::kTorchTrace;
  } else if (type == "stacks") {
    m.type = ParseStacks(doc, &m) ? T::kStacks : T::kMalformed;
  } else if (type == "learned") {
    m.type = T::kLearned;
    m.pattern = GetString(doc, "pattern").value_or("?");
  } else if (type == "relearn") {
    m.type = T::kRelearn;
  } else if (type == "stats") {
    m.type = T::kStats;
    m.reference_ns = GetDouble(doc, "reference_ns").value_or(0);
    m.threshold_ns = GetDouble(doc, "threshold_ns").value_or(0);
    m.recent_ns = GetDouble(doc, "recent_ns").value_or(0);
    m.iterations = GetInt(doc, "iterations").value_or(0);
    m.slowdowns = GetInt(doc, "slowdowns").value_or(0);
    m.hangs = GetInt(doc, "hangs").value_or(0);
  } else if (type == "profile_ack") {
    m.type = T::kProfileAck;
    m.accepted = GetBool(doc, "accepted").value_or(false);
    m.path = GetString(doc, "path").value_or("?");
    m.window = GetInt(doc, "window");
  } else {
    m.type = T::kUnknown;
  }
}

}  // namespace perftracker::agent
