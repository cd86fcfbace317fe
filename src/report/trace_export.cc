#include "report/trace_export.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "base/json_writer.h"
#include "base/units.h"
#include "pattern/python_window.h"
#include "trace/reader.h"

namespace perftracker::report {
namespace {

// Output is flushed in chunks of this size: one buffer reused for every event.
constexpr size_t kFlushBytes = 1 << 20;
// Ranks whose first files' clocks differ by more than this are on different clocks (another
// machine's steady clock): they are aligned on their first common iteration instead.
constexpr double kSameClockUs = 60e6;
// Track ids of the merged trace: GPU streams and a rank's second file get tids of their own, so
// their spans never interleave with another file's on one track.
constexpr int64_t kGpuTidBase = 1'000'000'000;
constexpr int64_t kFileTidStride = 100'000'000;
// A pid for a trace whose rank is unknown: after any real rank.
constexpr int64_t kUnknownRankPid = 10'000'000;
// The track of a rank's iterations as the what-if replay predicts them (after every file's and
// stream's track).
constexpr int64_t kWhatIfTid = 2'000'000'000;

// gzip or plain output through one buffer.
class Output {
 public:
  ~Output() { (void)Close(); }
  Status Open(const std::string& path) {
    path_ = path;
    gz_ = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
    if (gz_) {
      gzf_ = gzopen(path.c_str(), "wb1e");  // e: close-on-exec, as every file here
      if (!gzf_)
        return InvalidArgument(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
    } else {
      f_ = std::fopen(path.c_str(), "wbe");
      if (!f_)
        return InvalidArgument(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
    }
    buf_.reserve(kFlushBytes + (64 << 10));
    return Status::Ok();
  }
  std::string& buf() { return buf_; }
  // The buffer, with the separator before the next element of traceEvents.
  std::string& Next() {
    buf_ += first_ ? "\n" : ",\n";
    first_ = false;
    return buf_;
  }
  Status MaybeFlush() { return buf_.size() >= kFlushBytes ? Flush() : Status::Ok(); }
  Status Flush() {
    if (buf_.empty()) return Status::Ok();
    written_ += buf_.size();
    bool ok = gz_ ? gzwrite(gzf_, buf_.data(), static_cast<unsigned>(buf_.size())) ==
                        static_cast<int>(buf_.size())
                  : std::fwrite(buf_.data(), 1, buf_.size(), f_) == buf_.size();
    buf_.clear();
    if (!ok) return Internal(fmt::format("{}: write failed", path_));
    return Status::Ok();
  }
  Status Close() {
    Status st = Flush();
    if (gzf_ && gzclose(gzf_) != Z_OK && st.ok())
      st = Internal(fmt::format("{}: write failed", path_));
    if (f_ && std::fclose(f_) != 0 && st.ok())
      st = Internal(fmt::format("{}: write failed", path_));
    gzf_ = nullptr;
    f_ = nullptr;
    return st;
  }
  uint64_t written() const { return written_ + buf_.size(); }

 private:
  std::string path_;
  bool gz_ = false;
  gzFile gzf_ = nullptr;
  std::FILE* f_ = nullptr;
  std::string buf_;
  bool first_ = true;
  uint64_t written_ = 0;
};

struct RankClock {
  std::vector<trace::Span> steps;  // of the rank's first file, on the output clock
  double first_ts = NAN;           // its first event, on the output clock
  std::string host;
  int files = 0;
};

// The offset that puts a file whose steps are THEIRS on the clock of OURS (their step N at our
// step N), or nothing when they share no step.
std::optional<double> StepOffset(const std::vector<trace::Span>& ours,
                                 const std::vector<trace::Span>& theirs) {
  for (const trace::Span& t : theirs) {
    if (t.step < 0) continue;
    for (const trace::Span& o : ours)
      if (o.step == t.step) return o.ts_us - t.ts_us;
  }
  return std::nullopt;
}

class Exporter : public trace::EventSink {
 public:
  Exporter(Output* out, ExportStats* stats) : out_(out), stats_(stats) {}

  void StartFile(const std::string& path, int index) {
    path_ = path;
    index_ = index;
    status_ = Status::Ok();
  }
  const Status& status() const { return status_; }

  void OnBegin(const trace::TraceMeta& meta) override {
    pid_ = meta.rank >= 0 ? meta.rank : kUnknownRankPid + index_;
    RankClock& rc = ranks_[pid_];
    file_in_rank_ = rc.files++;
    offset_ = 0;
    align_first_event_ = false;
    const std::string what =
        path_.find("torch") != std::string::npos ? "torch.profiler" : "Python tracer";
    file_label_ = what;
    if (file_in_rank_ == 0) {
      // A rank's first file: its clock is the rank's, unless another rank's first file is on a
      // clock far away (another machine's steady clock).
      if (reference_ && !meta.profiler_steps.empty()) {
        if (auto off = StepOffset(reference_->steps, meta.profiler_steps);
            off && std::fabs(*off) > kSameClockUs) {
          offset_ = *off;
          stats_->notes.push_back(fmt::format(
              "{}: on another clock than the first rank's; aligned on a common iteration", path_));
        }
      }
      rc.host = meta.host;
      rc.steps = meta.profiler_steps;
      for (trace::Span& s : rc.steps) s.ts_us += offset_;
      if (!reference_) reference_ = rc;
      std::string& b = out_->Next();
      b += fmt::format("{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"args\":{{\"name\":",
                       pid_);
      AppendJsonString(meta.rank >= 0 ? fmt::format("rank {}{}", meta.rank,
                                                    meta.host.empty() ? "" : " (" + meta.host + ")")
                                      : fmt::format("{} (rank unknown)", path_),
                       &b);
      b += "}}";
      out_->Next() += fmt::format(
          "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},"
          "\"args\":{{\"sort_index\":{}}}}}",
          pid_, pid_);
      for (const trace::Span& s : rc.steps)
        if (s.step >= 0)
          out_->Next() += fmt::format(
              "{{\"ph\":\"i\",\"s\":\"p\",\"name\":\"iteration {}\",\"pid\":{},\"tid\":0,"
              "\"ts\":{:.3f}}}",
              s.step, pid_, s.ts_us);
      ++stats_->ranks;
    } else if (auto off = StepOffset(rc.steps, meta.profiler_steps)) {
      offset_ = *off;
    } else {
      align_first_event_ = true;  // no common step: their first events are put together
      stats_->notes.push_back(fmt::format(
          "{}: no iteration in common with rank {}'s first file; aligned on its first event", path_,
          pid_));
    }
  }

  // Names the current file's track TID (before its first event).
  void NameTrack(int64_t tid, const std::string& name) {
    ThreadName((tid % kFileTidStride) + file_in_rank_ * kFileTidStride, name);
  }

  // The thread_name metadata of output track TID, once.
  void ThreadName(int64_t tid, const std::string& name) {
    if (!named_.insert({pid_, tid}).second) return;
    std::string& b = out_->Next();
    b += fmt::format(
        "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},"
        "\"args\":{{\"name\":",
        pid_, tid);
    AppendJsonString(name, &b);
    b += "}}";
  }

  void OnEvent(const trace::Event& e) override {
    if (!status_.ok()) return;
    RankClock& rc = ranks_[pid_];
    if (align_first_event_) {
      offset_ = std::isnan(rc.first_ts) ? 0 : rc.first_ts - e.ts_us;
      align_first_event_ = false;
    }
    const double ts = e.ts_us + offset_;
    if (std::isnan(rc.first_ts) || (file_in_rank_ == 0 && ts < rc.first_ts)) rc.first_ts = ts;
    int64_t tid;
    if (trace::IsGpuKind(e.kind)) {
      tid = kGpuTidBase + std::max(0, e.device) * 1000 + std::max(0, e.stream);
      if (!named_.count({pid_, tid}))
        ThreadName(tid,
                   fmt::format("GPU {} stream {}", std::max(0, e.device), std::max(0, e.stream)));
    } else {
      tid = (e.tid % kFileTidStride) + file_in_rank_ * kFileTidStride;
      if (!named_.count({pid_, tid}))
        ThreadName(tid, fmt::format("{}: thread {}", file_label_, e.tid));
    }
    std::string& b = out_->Next();
    b += "{\"ph\":\"X\",\"name\":";
    AppendJsonString(e.name, &b);
    b += fmt::format(",\"cat\":\"{}\",\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":{},\"tid\":{}}}",
                     trace::EventKindName(e.kind), ts, std::max(0.0, e.dur_us), pid_, tid);
    ++stats_->events;
    if (Status st = out_->MaybeFlush(); !st.ok()) status_ = st;
  }

  // The findings of D as instant events: on each culprit rank (a finding about every rank: on
  // the whole trace), at the rank's first iteration.
  void Findings(const diagnose::Diagnosis& d) {
    for (const diagnose::Finding& f : d.findings) {
      auto event = [&](const char* scope, int64_t pid, double ts) {
        std::string& b = out_->Next();
        b += fmt::format("{{\"ph\":\"i\",\"s\":\"{}\",\"name\":", scope);
        AppendJsonString(fmt::format("finding: {} ({:.1f} ms/iter)",
                                     diagnose::CategoryName(f.category), f.impact_ms),
                         &b);
        b += fmt::format(",\"pid\":{},\"tid\":0,\"ts\":{:.3f},\"args\":{{\"summary\":", pid, ts);
        AppendJsonString(f.summary, &b);
        b += ",\"suggestion\":";
        AppendJsonString(f.suggestion, &b);
        b += "}}";
      };
      if (f.finding_class == diagnose::FindingClass::kSubset) {
        for (int r : f.ranks) {
          auto it = ranks_.find(r);
          if (it == ranks_.end()) continue;
          const RankClock& rc = it->second;
          event("p", r,
                rc.steps.empty() ? (std::isnan(rc.first_ts) ? 0 : rc.first_ts)
                                 : rc.steps.front().ts_us);
        }
      } else if (!ranks_.empty()) {
        const RankClock& rc = ranks_.begin()->second;
        event("g", ranks_.begin()->first, std::isnan(rc.first_ts) ? 0 : rc.first_ts);
      }
    }
    WhatIf(d);
  }

  // The replayed timeline beside the recorded one: on each rank, a track of its iterations as
  // the what-if replay predicts them without D's first replayed finding (the one fixing gives
  // the most: diagnose/what_if.h). The replay works on the window's means, so each iteration is
  // shortened by the finding's saving per iteration (never below zero) and the iterations follow
  // one another from the first one's start: where the window would have ended.
  void WhatIf(const diagnose::Diagnosis& d) {
    const diagnose::Finding* best = nullptr;
    for (const diagnose::Finding& f : d.findings)
      if (f.what_if_ms >= 0 && (best == nullptr || f.what_if_ms > best->what_if_ms)) best = &f;
    if (best == nullptr) return;
    const std::string track =
        fmt::format("what if {} {} were fixed: saves {:.1f} ms an iteration (replayed)",
                    diagnose::CategoryName(best->category),
                    best->ranks.size() == 1 ? fmt::format("on rank {}", best->ranks[0])
                                            : fmt::format("on {} ranks", best->ranks.size()),
                    best->what_if_ms);
    for (const auto& [rank, rc] : ranks_) {
      if (rc.steps.empty()) continue;
      pid_ = rank;
      ThreadName(kWhatIfTid, track);
      double ts = rc.steps.front().ts_us;
      for (const trace::Span& s : rc.steps) {
        const double dur = std::max(0.0, s.dur_us - MsToUs(best->what_if_ms));
        std::string& b = out_->Next();
        b += fmt::format(
            "{{\"ph\":\"X\",\"name\":\"iteration {} (replayed)\",\"cat\":\"what_if\","
            "\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":{},\"tid\":{}}}",
            s.step, ts, dur, rank, kWhatIfTid);
        ts += dur;
      }
    }
  }

 private:
  Output* out_;
  ExportStats* stats_;
  std::string path_;
  int index_ = 0;
  Status status_;
  int64_t pid_ = 0;
  int file_in_rank_ = 0;
  double offset_ = 0;
  bool align_first_event_ = false;
  std::string file_label_;
  std::map<int64_t, RankClock> ranks_;
  std::optional<RankClock> reference_;
  std::set<std::pair<int64_t, int64_t>> named_;
};

// The Python tracer's window file (pattern/python_window.h) has no event per call, only its
// call-stack aggregate: its timeline is the window's iterations and the calls of 1 ms or more
// it keeps with their times ("long_calls"), on the tracer's clock.
Status ExportPythonWindow(const std::string& path, Exporter* ex) {
  PT_ASSIGN_OR_RETURN(const pattern::PythonWindowFile file, pattern::ReadPythonWindow(path));
  trace::TraceMeta meta;
  meta.path = path;
  meta.rank = trace::RankFromFileName(path);
  const int64_t tid = file.has_tid ? file.tid : 0;
  for (const pattern::PythonWindowFile::Iteration& it : file.iterations)
    meta.profiler_steps.push_back(
        {NsToUs(it.start_ns), NsToUs(it.end_ns - it.start_ns), tid, it.index});
  ex->OnBegin(meta);
  ex->NameTrack(0, "iterations");
  ex->NameTrack(tid, fmt::format("Python tracer: calls of 1 ms or more, thread {}", tid));
  trace::Event ev;
  ev.tid = 0;
  ev.kind = trace::EventKind::kUserAnnotation;
  std::vector<std::string> iteration_names;
  iteration_names.reserve(meta.profiler_steps.size());
  for (const trace::Span& sp : meta.profiler_steps) {
    iteration_names.push_back(fmt::format("iteration {}", sp.step));
    ev.name = iteration_names.back();
    ev.ts_us = sp.ts_us;
    ev.dur_us = sp.dur_us;
    ex->OnEvent(ev);
  }
  ev.tid = tid;
  for (const pattern::PythonWindowFile::LongCall& c : file.long_calls) {
    const pattern::PythonWindowFile::Node& node = file.nodes[c.node];
    ev.kind = node.gc ? trace::EventKind::kOther : trace::EventKind::kPythonFunction;
    ev.name = file.names[node.name];
    ev.ts_us = NsToUs(c.start_ns);
    ev.dur_us = NsToUs(c.end_ns - c.start_ns);
    ex->OnEvent(ev);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ExportStats> ExportTrace(const std::vector<std::string>& files, const std::string& out,
                                  const ExportOptions& options) {
  if (files.empty()) return InvalidArgument("export-trace: no trace files");
  ExportStats stats;
  Output o;
  PT_RETURN_IF_ERROR(o.Open(out));
  o.buf() +=
      "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"perftracker export-trace\"},"
      "\"traceEvents\":[";
  Exporter ex(&o, &stats);
  for (size_t i = 0; i < files.size(); ++i) {
    ex.StartFile(files[i], static_cast<int>(i));
    Status st = Status::Ok();
    if (pattern::IsPythonWindowFile(files[i])) {
      st = ExportPythonWindow(files[i], &ex);
    } else if (auto read = trace::ReadTrace(files[i], &ex); !read.ok()) {
      st = read.status();
    }
    if (st.ok()) st = ex.status();
    if (!st.ok()) {
      (void)o.Close();
      std::error_code ec;
      std::filesystem::remove(out, ec);  // no half-written trace
      return st;
    }
    ++stats.files;
  }
  if (options.diagnosis) ex.Findings(*options.diagnosis);
  o.buf() += "\n]}\n";
  stats.bytes_written = o.written();
  PT_RETURN_IF_ERROR(o.Close());
  return stats;
}

}  // namespace perftracker::report
