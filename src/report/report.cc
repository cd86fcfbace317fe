#include "report/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "base/json_writer.h"
#include "diagnose/memory_growth.h"
#include "diagnose/what_if.h"

namespace perftracker::report {
namespace {

using diagnose::Diagnosis;
using diagnose::Finding;

void WriteFinding(const Finding& f, JsonWriter* w) {
  w->BeginObject();
  w->Key("class").String(diagnose::FindingClassName(f.finding_class));
  w->Key("cause").String(diagnose::CauseName(f.cause));
  w->Key("category").String(diagnose::CategoryName(f.category));
  w->Key("confidence").Number(f.confidence);
  w->Key("ranks").BeginArray();
  std::vector<int> ranks = f.ranks;
  std::sort(ranks.begin(), ranks.end());
  for (int r : ranks) w->Int(r);
  w->EndArray();
  w->Key("hosts").BeginArray();
  for (const auto& h : f.hosts) w->String(h);
  w->EndArray();
  w->Key("functions").BeginArray();
  for (const auto& fn : f.functions) {
    w->BeginObject().Key("name").String(fn.name).Key("kind").String(fn.kind);
    w->Key("stack").BeginArray();
    for (const auto& s : fn.stack) w->String(s);
    w->EndArray().EndObject();
  }
  w->EndArray();
  w->Key("impact").BeginObject();
  w->Key("ms_per_iteration").Number(f.impact_ms);
  w->Key("fraction_of_iteration").Number(f.impact_fraction);
  if (f.what_if_ms >= 0) {
    w->Key("what_if_ms_per_iteration").Number(f.what_if_ms);
    if (f.what_if_iteration_ms >= 0) w->Key("what_if_iteration_ms").Number(f.what_if_iteration_ms);
  }
  w->EndObject();
  // Numbers and texts share one object; a key in both keeps the number (texts are commentary).
  w->Key("evidence").BeginObject();
  for (const auto& [k, v] : f.evidence) w->Key(k).Number(v);
  for (const auto& [k, v] : f.evidence_text)
    if (!f.evidence.count(k)) w->Key(k).String(v);
  w->EndObject();
  w->Key("summary").String(f.summary);
  w->Key("suggestion").String(f.suggestion);
  w->EndObject();
}

std::string Num(double v, int precision = 1) { return fmt::format("{:.{}f}", v, precision); }

// The last frames matter most (they are nearest the function); keep the outermost for context.
std::string AbbreviateStack(const std::vector<std::string>& stack) {
  constexpr size_t kMaxFrames = 4;
  std::vector<std::string> frames;
  if (stack.size() <= kMaxFrames) {
    frames = stack;
  } else {
    frames.push_back(stack.front());
    frames.push_back(fmt::format("... {} frames ...", stack.size() - kMaxFrames));
    frames.insert(frames.end(), stack.end() - (kMaxFrames - 1), stack.end());
  }
  std::string out;
  for (const auto& f : frames) {
    if (!out.empty()) out += " > ";
    out += f.size() > 80 ? f.substr(0, 77) + "..." : f;
  }
  return out;
}

void IterationTable(const diagnose::JobInfo& job, std::string* out) {
  const auto& per = job.iteration_ms_per_rank;
  if (per.empty()) return;
  if (per.size() <= 32) {
    *out += "iteration time per rank (mean, ms):\n";
    int col = 0;
    for (const auto& [rank, ms] : per) {
      if (col == 0) *out += " ";
      *out += fmt::format(" {:>5}:{:>8}", rank, Num(ms));
      if (++col == 8) {
        *out += "\n";
        col = 0;
      }
    }
    if (col != 0) *out += "\n";
    return;
  }
  std::vector<std::pair<double, int>> v;
  for (const auto& [rank, ms] : per) v.push_back({ms, rank});
  std::sort(v.begin(), v.end());
  const auto& med = v[v.size() / 2];
  *out += fmt::format(
      "iteration time per rank (mean, ms): min {} (rank {}), median {}, max {} (rank {})\n",
      Num(v.front().first), v.front().second, Num(med.first), Num(v.back().first), v.back().second);
  *out += "  slowest:";
  for (size_t i = 0; i < 5 && i < v.size(); ++i) {
    const auto& [ms, rank] = v[v.size() - 1 - i];
    *out += fmt::format(" rank {} {}{}", rank, Num(ms), i + 1 < 5 && i + 1 < v.size() ? "," : "");
  }
  *out += "\n";
}

// Which ranks each iteration waited for (diagnose/what_if.h CriticalPath), one line.
void CriticalRanks(const diagnose::JobInfo& job, std::string* out) {
  const std::string phrase = diagnose::CriticalPathPhrase(job.critical_path);
  if (!phrase.empty())
    *out +=
        "last to arrive at the collectives (the critical path), per iteration: " + phrase + "\n";
}

// Who the others wait for at the collectives (diagnose/what_if.h LateRanks), one line.
void LateArrivals(const diagnose::JobInfo& job, std::string* out) {
  const std::vector<std::pair<int, double>> late = diagnose::LateRanks(job.slack_ms_per_rank);
  if (late.empty()) return;
  std::vector<std::string> parts;
  for (size_t i = 0; i < late.size() && i < 5; ++i)
    parts.push_back(fmt::format("rank {} ({} ms)", late[i].first, Num(late[i].second)));
  *out += fmt::format(
      "the others wait at the collectives for: {}{} (an iteration, the typical "
      "rank's wait)\n",
      fmt::join(parts, ", "), late.size() > 5 ? fmt::format(" and {} more", late.size() - 5) : "");
}

// Rows of the memory table the terminal shows; the JSON report has them all.
constexpr size_t kMaxMemoryRows = 16;

void MemoryJson(const std::vector<diagnose::RankMemoryUse>& memory, JsonWriter* w) {
  w->Key("memory").BeginArray();
  for (const auto& m : memory) {
    w->BeginObject().Key("rank").Int(m.rank).Key("device").String(m.device);
    w->Key("peak_allocated_bytes").Number(m.peak_allocated_bytes);
    if (m.peak_reserved_bytes >= 0) w->Key("peak_reserved_bytes").Number(m.peak_reserved_bytes);
    w->Key("start_bytes").Number(m.start_bytes).Key("end_bytes").Number(m.end_bytes);
    w->Key("bytes_per_iteration").Number(m.bytes_per_iteration);
    w->Key("iterations").Int(m.iterations);
    w->Key("failed_allocations").Int(static_cast<int64_t>(m.failed_allocations));
    w->Key("iteration_end_bytes").BeginArray();
    for (double v : m.iteration_end_bytes) w->Number(v);
    w->EndArray().Key("iteration_peak_bytes").BeginArray();
    for (double v : m.iteration_peak_bytes) w->Number(v);
    w->EndArray().Key("iteration_numbers").BeginArray();
    for (int64_t v : m.iteration_numbers) w->Int(v);
    w->EndArray();
    if (!m.kept.empty()) {
      w->Key("kept").BeginArray();
      for (const diagnose::KeptMemory& k : m.kept) {
        w->BeginObject().Key("function").String(k.function).Key("stack").BeginArray();
        for (const std::string& frame : k.stack) w->String(frame);
        w->EndArray();
        if (!k.op.empty()) w->Key("op").String(k.op);
        w->Key("bytes_per_iteration").Number(k.bytes_per_iteration);
        w->Key("kept_iterations").Int(k.kept_iterations);
        w->Key("counted_iterations").Int(k.counted_iterations).EndObject();
      }
      w->EndArray();
    }
    w->EndObject();
  }
  w->EndArray();
}

// The traces' memory records per rank and device (profile_memory), one line each. An online
// run's samples (RankMemoryUse::online) are left to the JSON and HTML reports: a window's
// terminal output stays short.
void MemoryTable(const std::vector<diagnose::RankMemoryUse>& all, std::string* out) {
  std::vector<const diagnose::RankMemoryUse*> memory;
  for (const auto& m : all)
    if (!m.online()) memory.push_back(&m);
  if (memory.empty()) return;
  *out +=
      "memory (the traces' memory records, allocated): peak, and the level at the first and "
      "last steady iteration's end\n";
  for (size_t i = 0; i < memory.size() && i < kMaxMemoryRows; ++i) {
    const auto& m = *memory[i];
    if (m.iterations == 0 && m.peak_allocated_bytes == 0 && !m.kept.empty()) {
      // No allocator records, only the Python heap the window sampled (a torch without Kineto).
      *out += fmt::format("  rank {:>4} {:<8} no allocator records", m.rank, m.device);
    } else {
      *out += fmt::format("  rank {:>4} {:<8} peak {:>10}", m.rank, m.device,
                          diagnose::MemoryBytes(m.peak_allocated_bytes));
    }
    if (m.peak_reserved_bytes >= 0)
      *out += fmt::format(" ({} reserved)", diagnose::MemoryBytes(m.peak_reserved_bytes));
    if (!m.iteration_end_bytes.empty())
      *out += fmt::format(", {} -> {} over {} iterations ({}{}/iteration)",
                          diagnose::MemoryBytes(m.iteration_end_bytes.front()),
                          diagnose::MemoryBytes(m.iteration_end_bytes.back()), m.iterations,
                          m.bytes_per_iteration >= 0 ? "+" : "",
                          diagnose::MemoryBytes(m.bytes_per_iteration));
    if (m.failed_allocations > 0)
      *out += fmt::format(", {} failed allocation{}", m.failed_allocations,
                          m.failed_allocations == 1 ? "" : "s");
    *out += "\n";
    // Where it kept memory past an iteration, the place that kept most (memory_sites).
    if (!m.kept.empty()) {
      const diagnose::KeptMemory& k = m.kept.front();
      *out += fmt::format(
          "    kept past its iteration most at {}{}: {} per iteration, in {} of {}\n", k.function,
          k.op.empty() ? "" : " (" + k.op + ")", diagnose::MemoryBytes(k.bytes_per_iteration),
          k.kept_iterations, k.counted_iterations);
    }
  }
  if (memory.size() > kMaxMemoryRows)
    *out += fmt::format("  ... {} more in the JSON report (job.memory)\n",
                        memory.size() - kMaxMemoryRows);
}

}  // namespace

std::string RenderJson(const Diagnosis& d) {
  JsonWriter w(2);
  w.BeginObject();
  w.Key("schema").String(kDiagnosisSchema);
  w.Key("job").BeginObject();
  w.Key("world_size").Int(d.job.world_size);
  w.Key("ranks").BeginArray();
  for (int r : d.job.ranks) w.Int(r);
  w.EndArray();
  w.Key("iterations").Int(d.job.iterations);
  w.Key("iteration_ms").BeginObject();
  w.Key("median").Number(d.job.iteration_ms_median);
  w.Key("per_rank").BeginObject();
  for (const auto& [rank, ms] : d.job.iteration_ms_per_rank) w.Key(std::to_string(rank)).Number(ms);
  w.EndObject().EndObject();
  if (!d.job.slack_ms_per_rank.empty()) {
    w.Key("slack_ms_per_rank").BeginObject();
    for (const auto& [rank, ms] : d.job.slack_ms_per_rank) w.Key(std::to_string(rank)).Number(ms);
    w.EndObject();
  }
  if (!d.job.critical_path.empty()) {
    w.Key("critical_path").BeginArray();
    for (const diagnose::CriticalIteration& it : d.job.critical_path) {
      w.BeginObject().Key("iteration").Int(it.iteration).Key("ranks").BeginArray();
      for (const diagnose::CriticalRank& c : it.ranks) {
        w.BeginObject().Key("group").Int(c.group).Key("rank").Int(c.rank);
        w.Key("lead_ms").Number(c.lead_ms).EndObject();
      }
      w.EndArray().EndObject();
    }
    w.EndArray();
  }
  w.Key("notes").BeginArray();
  for (const auto& n : d.job.notes) w.String(n);
  w.EndArray();
  if (!d.job.run_iterations.empty()) {
    w.Key("run_iteration_ms").BeginObject().Key("per_rank").BeginObject();
    for (const auto& [rank, s] : d.job.run_iterations) {
      w.Key(std::to_string(rank)).BeginObject();
      w.Key("count").Int(s.count).Key("mean").Number(s.mean_ms).Key("p50").Number(s.p50_ms);
      w.Key("p99").Number(s.p99_ms).Key("min").Number(s.min_ms).Key("max").Number(s.max_ms);
      w.EndObject();
    }
    w.EndObject().EndObject();
  }
  if (!d.job.attempts.empty()) {
    w.Key("attempts").BeginArray();
    for (const auto& a : d.job.attempts) {
      w.BeginObject();
      w.Key("attempt").Int(a.attempt).Key("restart_count").Int(a.restart_count);
      w.Key("ranks").BeginArray();
      for (int r : a.ranks) w.Int(r);
      w.EndArray();
      w.Key("pids").BeginObject();
      for (const auto& [r, pid] : a.pids) w.Key(std::to_string(r)).Int(pid);
      w.EndObject();
      w.Key("hosts").BeginArray();
      for (const auto& h : a.hosts) w.String(h);
      w.EndArray();
      w.Key("last_iteration").Int(a.last_iteration);
      w.Key("ends").BeginArray();
      for (const auto& e : a.ends) {
        w.BeginObject().Key("rank").Int(e.rank).Key("pid").Int(e.pid);
        w.Key("clean").Bool(e.clean).Key("last_iteration").Int(e.last_iteration).EndObject();
      }
      w.EndArray();
      w.Key("summary").String(a.summary);
      w.EndObject();
    }
    w.EndArray();
  }
  if (!d.job.memory.empty()) MemoryJson(d.job.memory, &w);
  w.EndObject();
  w.Key("findings").BeginArray();
  for (const auto& f : d.findings) WriteFinding(f, &w);
  w.EndArray();
  w.EndObject();
  std::string out = w.Take();
  out.push_back('\n');
  return out;
}

std::string RenderText(const Diagnosis& d) {
  std::string out;
  const auto& job = d.job;
  out += fmt::format("job: {} rank{} (world size {})", job.ranks.size(),
                     job.ranks.size() == 1 ? "" : "s", job.world_size);
  // A diagnosis of Flight Recorder dumps alone has no iterations to speak of.
  if (job.iterations > 0 || job.iteration_ms_median > 0)
    out += fmt::format(", {} iterations, median iteration {} ms", job.iterations,
                       Num(job.iteration_ms_median, 2));
  out += '\n';
  IterationTable(job, &out);
  LateArrivals(job, &out);
  CriticalRanks(job, &out);
  if (!job.run_iterations.empty()) {
    out += "whole run, iteration time per rank (ms): count mean p50 p99 max\n";
    for (const auto& [rank, s] : job.run_iterations)
      out += fmt::format("  rank {:>4}: {:>6} {:>8} {:>8} {:>8} {:>8}\n", rank, s.count,
                         Num(s.mean_ms), Num(s.p50_ms), Num(s.p99_ms), Num(s.max_ms));
  }
  MemoryTable(job.memory, &out);
  if (job.attempts.size() > 1)
    for (const auto& a : job.attempts) out += a.summary + "\n";
  for (const auto& n : job.notes) out += fmt::format("note: {}\n", n);
  out += "\n";
  if (d.findings.empty()) {
    out += "no findings: nothing costs more than the thresholds\n";
    return out;
  }
  out += fmt::format("{} finding{}, confident ones first, biggest first:\n", d.findings.size(),
                     d.findings.size() == 1 ? "" : "s");
  int i = 0;
  for (const auto& f : d.findings) {
    out += fmt::format("\n{}. {} ({}, {} cause, confidence {}): {} ms/iter, {}% of an iteration\n",
                       ++i, diagnose::CategoryName(f.category),
                       diagnose::FindingClassName(f.finding_class), diagnose::CauseName(f.cause),
                       Num(f.confidence, 1), Num(f.impact_ms, 2), Num(f.impact_fraction * 100));
    out += fmt::format("   ranks: {}", diagnose::RankList(f.ranks));
    if (!f.hosts.empty()) out += fmt::format("   hosts: {}", fmt::join(f.hosts, ", "));
    out += "\n";
    if (f.what_if_ms >= 0)
      out += f.what_if_iteration_ms >= 0
                 ? fmt::format("   what if fixed: saves {} ms/iter (the iteration {} -> {} ms)\n",
                               Num(f.what_if_ms, 2), Num(f.what_if_iteration_ms + f.what_if_ms),
                               Num(f.what_if_iteration_ms))
                 : fmt::format("   what if fixed: saves {} ms/iter\n", Num(f.what_if_ms, 2));
    out += fmt::format("   {}\n", f.summary);
    for (const auto& fn : f.functions) {
      out += fmt::format("   - {} [{}]\n", fn.name, fn.kind);
      if (!fn.stack.empty()) out += fmt::format("       at {}\n", AbbreviateStack(fn.stack));
    }
    if (auto it = f.evidence_text.find("reasoning"); it != f.evidence_text.end())
      out += fmt::format("   why: {}\n", it->second);
    if (!f.evidence.empty()) {
      std::vector<std::string> parts;
      for (const auto& [k, v] : f.evidence) parts.push_back(fmt::format("{}={:.4g}", k, v));
      out += fmt::format("   evidence: {}\n", fmt::join(parts, " "));
    }
    for (const auto& [k, v] : f.evidence_text)
      if (k != "reasoning") out += fmt::format("   {}: {}\n", k, v);
    if (!f.suggestion.empty()) out += fmt::format("   suggestion: {}\n", f.suggestion);
  }
  return out;
}

Status WriteTextFile(const std::string& path, std::string_view text) {
  std::FILE* f = std::fopen(path.c_str(), "wbe");
  if (!f) return InvalidArgument(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  size_t n = std::fwrite(text.data(), 1, text.size(), f);
  bool ok = n == text.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return Internal(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
  return Status::Ok();
}

Status WriteJsonFile(const Diagnosis& d, const std::string& path) {
  return WriteTextFile(path, RenderJson(d));
}

}  // namespace perftracker::report
