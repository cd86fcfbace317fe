#include "report/diagnosis_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>

#include "base/file_source.h"
#include "base/limits.h"
#include "report/report.h"

namespace perftracker::report {
namespace {

namespace dom = simdjson::dom;

// A diagnosis of 100,000 ranks with its run statistics is a few tens of MB.
constexpr size_t kMaxDiagnosisBytes = 256u << 20;

// A member looked up, or the error that it is absent: every accessor below takes either (a
// default-constructed dom::element is no "absent" value: using one crashes).
using Result = simdjson::simdjson_result<dom::element>;

std::string Str(Result e) {
  std::string_view v;
  return e.get(v) == simdjson::SUCCESS ? std::string(v) : std::string();
}
double Num(Result e) {
  double d = 0;
  if (e.get(d) == simdjson::SUCCESS) return d;
  int64_t i = 0;
  if (e.get(i) == simdjson::SUCCESS) return static_cast<double>(i);
  uint64_t u = 0;
  if (e.get(u) == simdjson::SUCCESS) return static_cast<double>(u);
  return 0;
}
Result At(dom::object o, std::string_view key) { return o[key]; }
// A whole number out of whatever the document holds: clamped (a cast of 1e20 to int is
// undefined), 0 for what is no number.
template <typename T>
T Whole(Result e) {
  const double v = Num(std::move(e));
  if (!(v == v)) return 0;
  return static_cast<T>(std::clamp(v, static_cast<double>(std::numeric_limits<T>::min()),
                                   static_cast<double>(std::numeric_limits<T>::max() / 2)));
}
template <typename T>
T Whole(dom::element e) {
  return Whole<T>(Result(std::move(e)));
}
std::string Str(dom::element e) { return Str(Result(std::move(e))); }
double Num(dom::element e) { return Num(Result(std::move(e))); }
bool IntKey(std::string_view key, int* out) {
  auto [p, ec] = std::from_chars(key.data(), key.data() + key.size(), *out);
  return ec == std::errc() && p == key.data() + key.size();
}

diagnose::Cause CauseFrom(const std::string& s) {
  for (auto c : {diagnose::Cause::kHardware, diagnose::Cause::kSoftware,
                 diagnose::Cause::kConfiguration, diagnose::Cause::kUnknown})
    if (s == diagnose::CauseName(c)) return c;
  return diagnose::Cause::kUnknown;
}

// job.attempts (online, at the job's end): each attempt's ranks, processes and how it ended.
void ReadAttempts(dom::object job, diagnose::JobInfo* out) {
  dom::array attempts;
  if (At(job, "attempts").get(attempts) != simdjson::SUCCESS) return;
  for (dom::element e : attempts) {
    dom::object o;
    if (e.get(o) != simdjson::SUCCESS) continue;
    diagnose::AttemptInfo& a = out->attempts.emplace_back();
    a.attempt = Whole<int>(At(o, "attempt"));
    a.restart_count = Whole<int>(At(o, "restart_count"));
    a.last_iteration = Whole<int64_t>(At(o, "last_iteration"));
    a.summary = Str(At(o, "summary"));
    dom::array arr;
    if (At(o, "ranks").get(arr) == simdjson::SUCCESS)
      for (dom::element r : arr) a.ranks.push_back(Whole<int>(r));
    if (At(o, "hosts").get(arr) == simdjson::SUCCESS)
      for (dom::element h : arr) a.hosts.push_back(Str(h));
    dom::object pids;
    if (At(o, "pids").get(pids) == simdjson::SUCCESS)
      for (auto [k, v] : pids)
        if (int r; IntKey(k, &r)) a.pids[r] = Whole<int>(v);
    if (At(o, "ends").get(arr) == simdjson::SUCCESS)
      for (dom::element x : arr) {
        dom::object eo;
        if (x.get(eo) != simdjson::SUCCESS) continue;
        bool clean = false;
        if (At(eo, "clean").get(clean) != simdjson::SUCCESS) clean = false;
        a.ends.push_back({Whole<int>(At(eo, "rank")), Whole<int>(At(eo, "pid")), clean,
                          Whole<int64_t>(At(eo, "last_iteration"))});
      }
  }
}

// job.memory: each rank's memory per device (the traces' records, or an online run's samples).
void ReadMemory(dom::object job, diagnose::JobInfo* out) {
  dom::array rows;
  if (At(job, "memory").get(rows) != simdjson::SUCCESS) return;
  for (dom::element e : rows) {
    dom::object o;
    if (e.get(o) != simdjson::SUCCESS) continue;
    diagnose::RankMemoryUse& m = out->memory.emplace_back();
    m.rank = Whole<int>(At(o, "rank"));
    m.device = Str(At(o, "device"));
    m.peak_allocated_bytes = Num(At(o, "peak_allocated_bytes"));
    if (double v; At(o, "peak_reserved_bytes").get(v) == simdjson::SUCCESS)
      m.peak_reserved_bytes = v;
    m.start_bytes = Num(At(o, "start_bytes"));
    m.end_bytes = Num(At(o, "end_bytes"));
    m.bytes_per_iteration = Num(At(o, "bytes_per_iteration"));
    m.iterations = Whole<int>(At(o, "iterations"));
    m.failed_allocations = Whole<uint64_t>(At(o, "failed_allocations"));
    dom::array arr;
    if (At(o, "iteration_end_bytes").get(arr) == simdjson::SUCCESS)
      for (dom::element v : arr) m.iteration_end_bytes.push_back(Num(v));
    if (At(o, "iteration_peak_bytes").get(arr) == simdjson::SUCCESS)
      for (dom::element v : arr) m.iteration_peak_bytes.push_back(Num(v));
    if (At(o, "iteration_numbers").get(arr) == simdjson::SUCCESS)
      for (dom::element v : arr) m.iteration_numbers.push_back(Whole<int64_t>(v));
    if (At(o, "kept").get(arr) == simdjson::SUCCESS)
      for (dom::element v : arr) {
        dom::object ko;
        if (v.get(ko) != simdjson::SUCCESS) continue;
        diagnose::KeptMemory& k = m.kept.emplace_back();
        k.function = Str(At(ko, "function"));
        dom::array frames;
        if (At(ko, "stack").get(frames) == simdjson::SUCCESS)
          for (dom::element frame : frames) k.stack.push_back(Str(frame));
        k.op = Str(At(ko, "op"));
        k.bytes_per_iteration = Num(At(ko, "bytes_per_iteration"));
        k.kept_iterations = Whole<int>(At(ko, "kept_iterations"));
        k.counted_iterations = Whole<int>(At(ko, "counted_iterations"));
      }
  }
}

void ReadJob(dom::object job, diagnose::JobInfo* out) {
  out->world_size = Whole<int>(At(job, "world_size"));
  out->iterations = Whole<int>(At(job, "iterations"));
  dom::array ranks;
  if (At(job, "ranks").get(ranks) == simdjson::SUCCESS)
    for (dom::element r : ranks) out->ranks.push_back(Whole<int>(r));
  dom::object it;
  if (At(job, "iteration_ms").get(it) == simdjson::SUCCESS) {
    out->iteration_ms_median = Num(At(it, "median"));
    dom::object per;
    if (At(it, "per_rank").get(per) == simdjson::SUCCESS)
      for (auto [k, v] : per)
        if (int r; IntKey(k, &r)) out->iteration_ms_per_rank[r] = Num(v);
  }
  dom::object slack;
  if (At(job, "slack_ms_per_rank").get(slack) == simdjson::SUCCESS)
    for (auto [k, v] : slack)
      if (int r; IntKey(k, &r)) out->slack_ms_per_rank[r] = Num(v);
  dom::array critical;
  if (At(job, "critical_path").get(critical) == simdjson::SUCCESS) {
    for (dom::element e : critical) {
      dom::object o;
      if (e.get(o) != simdjson::SUCCESS) continue;
      diagnose::CriticalIteration it;
      it.iteration = Whole<int>(At(o, "iteration"));
      dom::array ranks;
      if (At(o, "ranks").get(ranks) == simdjson::SUCCESS) {
        for (dom::element r : ranks) {
          dom::object c;
          if (r.get(c) != simdjson::SUCCESS) continue;
          it.ranks.push_back(
              {Whole<int>(At(c, "group")), Whole<int>(At(c, "rank")), Num(At(c, "lead_ms"))});
        }
      }
      out->critical_path.push_back(std::move(it));
    }
  }
  dom::array notes;
  if (At(job, "notes").get(notes) == simdjson::SUCCESS)
    for (dom::element n : notes) out->notes.push_back(Str(n));
  ReadAttempts(job, out);
  ReadMemory(job, out);
  dom::object run;
  if (At(job, "run_iteration_ms").get(run) == simdjson::SUCCESS) {
    dom::object per;
    if (At(run, "per_rank").get(per) == simdjson::SUCCESS)
      for (auto [k, v] : per) {
        int r;
        dom::object s;
        if (!IntKey(k, &r) || v.get(s) != simdjson::SUCCESS) continue;
        diagnose::IterationStats& st = out->run_iterations[r];
        st.count = Whole<int64_t>(At(s, "count"));
        st.mean_ms = Num(At(s, "mean"));
        st.p50_ms = Num(At(s, "p50"));
        st.p99_ms = Num(At(s, "p99"));
        st.min_ms = Num(At(s, "min"));
        st.max_ms = Num(At(s, "max"));
      }
  }
}

std::optional<diagnose::Finding> ReadFinding(dom::object o) {
  diagnose::Finding f;
  f.finding_class =
      Str(At(o, "class")) == "all" ? diagnose::FindingClass::kAll : diagnose::FindingClass::kSubset;
  f.cause = CauseFrom(Str(At(o, "cause")));
  // A category this version does not know (a newer writer's): the caller leaves the finding out.
  const std::optional<diagnose::Category> category =
      diagnose::ParseCategory(Str(At(o, "category")));
  if (!category) return std::nullopt;
  f.category = *category;
  f.confidence = Num(At(o, "confidence"));
  dom::array a;
  if (At(o, "ranks").get(a) == simdjson::SUCCESS)
    for (dom::element r : a) f.ranks.push_back(Whole<int>(r));
  if (At(o, "hosts").get(a) == simdjson::SUCCESS)
    for (dom::element h : a) f.hosts.push_back(Str(h));
  if (At(o, "functions").get(a) == simdjson::SUCCESS) {
    for (dom::element e : a) {
      dom::object fo;
      if (e.get(fo) != simdjson::SUCCESS) continue;
      diagnose::FunctionRef ref{Str(At(fo, "name")), Str(At(fo, "kind")), {}};
      dom::array stack;
      if (At(fo, "stack").get(stack) == simdjson::SUCCESS)
        for (dom::element s : stack) ref.stack.push_back(Str(s));
      f.functions.push_back(std::move(ref));
    }
  }
  dom::object impact;
  if (At(o, "impact").get(impact) == simdjson::SUCCESS) {
    f.impact_ms = Num(At(impact, "ms_per_iteration"));
    f.impact_fraction = Num(At(impact, "fraction_of_iteration"));
    if (impact["what_if_ms_per_iteration"].error() == simdjson::SUCCESS) {
      f.what_if_ms = Num(At(impact, "what_if_ms_per_iteration"));
      if (impact["what_if_iteration_ms"].error() == simdjson::SUCCESS)
        f.what_if_iteration_ms = Num(At(impact, "what_if_iteration_ms"));
    }
  }
  // Numbers and texts share one object (RenderJson): the type tells them apart.
  dom::object ev;
  if (At(o, "evidence").get(ev) == simdjson::SUCCESS)
    for (auto [k, v] : ev) {
      if (v.is_string())
        f.evidence_text[std::string(k)] = Str(v);
      else
        f.evidence[std::string(k)] = Num(v);
    }
  f.summary = Str(At(o, "summary"));
  f.suggestion = Str(At(o, "suggestion"));
  return f;
}

}  // namespace

StatusOr<diagnose::Diagnosis> ParseDiagnosisJson(std::string_view json, const std::string& name) {
  if (json.size() > kMaxDiagnosisBytes)
    return InvalidArgument(fmt::format("{}: {} bytes, over the {} MiB a diagnosis may have", name,
                                       json.size(), kMaxDiagnosisBytes >> 20));
  dom::parser parser;
  simdjson::padded_string padded(json);
  dom::element root;
  if (auto err = parser.parse(padded).get(root); err)
    return InvalidArgument(fmt::format("{}: not JSON: {}", name, simdjson::error_message(err)));
  dom::object o;
  if (root.get(o) != simdjson::SUCCESS || Str(At(o, "schema")) != kDiagnosisSchema)
    return InvalidArgument(fmt::format("{}: not a perftracker diagnosis (schema \"{}\" expected)",
                                       name, kDiagnosisSchema));
  diagnose::Diagnosis d;
  dom::object job;
  if (At(o, "job").get(job) == simdjson::SUCCESS) ReadJob(job, &d.job);
  dom::array findings;
  std::set<std::string> unknown;
  int left_out = 0;
  if (At(o, "findings").get(findings) == simdjson::SUCCESS)
    for (dom::element e : findings) {
      dom::object fo;
      if (e.get(fo) != simdjson::SUCCESS) continue;
      if (std::optional<diagnose::Finding> f = ReadFinding(fo)) {
        d.findings.push_back(std::move(*f));
      } else {
        ++left_out;
        const std::string name = Str(At(fo, "category"));
        if (unknown.size() < limits::kMaxUnknownFindingCategoriesNamed)
          unknown.insert(name.empty() ? "(no category)" : name);
      }
    }
  // Counted and said, not dropped in silence.
  if (left_out > 0)
    d.job.notes.push_back(
        fmt::format("{}: {} finding(s) of categories this version does not know were left out ({})",
                    name, left_out, fmt::join(unknown, ", ")));
  return d;
}

StatusOr<diagnose::Diagnosis> ReadDiagnosisFile(const std::string& path) {
  PT_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxDiagnosisBytes, "a diagnosis"));
  return ParseDiagnosisJson(text, path);
}

}  // namespace perftracker::report
