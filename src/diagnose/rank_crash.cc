#include "diagnose/rank_crash.h"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "base/units.h"
#include "diagnose/collective_sequence.h"
#include "diagnose/cuda_oom.h"

namespace perftracker::diagnose {
namespace {

// The collective a rank's ring shows it in: its newest one, unless that one completed (by its
// state, or by the group's progress: gloo's Flight Recorder leaves every entry "scheduled").
const pattern::CollectiveCall* InCollective(const pattern::CollectiveLog& log) {
  if (log.calls.empty() || Completed(log, log.calls.back())) return nullptr;
  return &log.calls.back();
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

// What precedes a crash's last error line in its summary.
constexpr std::string_view kErrorOutputText = "; its last error output: ";

std::string Mib(double bytes) { return fmt::format("{:.0f} MiB", BytesToMiB(bytes)); }

// "killed by the kernel's OOM killer ..." for a rank its memory cgroup's OOM killer ended, with
// its limit and last figures as evidence.
std::string OutOfMemory(const RankExit& e, Finding* f) {
  f->cause = Cause::kConfiguration;
  f->evidence["oom_kill"] = 1;
  std::string what =
      fmt::format("out of memory: killed by the kernel's OOM killer ({}, exit code {})",
                  SignalName(e.signal != 0 ? e.signal : SIGKILL), e.exit_code);
  if (e.memory_limit_bytes > 0) {
    f->evidence["memory_limit_bytes"] = e.memory_limit_bytes;
    what += fmt::format(" at its memory cgroup's limit of {}", Mib(e.memory_limit_bytes));
  }
  std::vector<std::string> last;
  if (e.rss_bytes > 0) {
    f->evidence["rss_bytes"] = e.rss_bytes;
    last.push_back(fmt::format("resident {}", Mib(e.rss_bytes)));
  }
  if (e.cgroup_usage_bytes > 0) {
    f->evidence["cgroup_usage_bytes"] = e.cgroup_usage_bytes;
    last.push_back(fmt::format("its cgroup using {}", Mib(e.cgroup_usage_bytes)));
  }
  if (!last.empty()) {
    what += fmt::format(" ({}{}", last[0], last.size() > 1 ? ", " + last[1] : "");
    if (e.last_iteration >= 0) {
      f->evidence["last_iteration"] = static_cast<double>(e.last_iteration);
      what += fmt::format(" at iteration {}", e.last_iteration);
    }
    what += ")";
  }
  return what;
}

std::string Size(double bytes) {
  return bytes >= 0x1p30 ? fmt::format("{:.2f} GiB", bytes / 0x1p30) : Mib(bytes);
}

// "out of GPU memory: ..." for a rank whose last error output is the CUDA caching allocator's
// out-of-memory error, with the allocator's figures as evidence.
std::string OutOfGpuMemory(const CudaOom& o, Finding* f) {
  f->cause = Cause::kConfiguration;
  f->evidence["gpu_oom"] = 1;
  std::string what = "out of GPU memory: CUDA's allocator could not allocate";
  what += o.requested_bytes >= 0 ? " " + Size(o.requested_bytes) : " more";
  if (o.gpu >= 0) {
    f->evidence["gpu"] = o.gpu;
    what += fmt::format(" on GPU {}", o.gpu);
  }
  std::vector<std::string> parts;
  auto add = [&](const char* key, double v, const char* text) {
    if (v < 0) return;
    f->evidence[key] = v;
    parts.push_back(fmt::format("{} {}", Size(v), text));
  };
  if (o.requested_bytes >= 0) f->evidence["requested_bytes"] = o.requested_bytes;
  add("gpu_total_bytes", o.total_bytes, "total");
  add("gpu_free_bytes", o.free_bytes, "free");
  add("torch_allocated_bytes", o.allocated_bytes, "in PyTorch's tensors");
  add("torch_reserved_unallocated_bytes", o.reserved_unallocated_bytes,
      "cached by PyTorch but unallocated");
  if (!parts.empty()) {
    what += " (";
    for (size_t i = 0; i < parts.size(); ++i) what += (i ? ", " : "") + parts[i];
    what += ")";
  }
  return what;
}

// The allocator held, cached but unallocated, at least what it failed to find in one piece.
bool Fragmented(const CudaOom& o) {
  return o.reserved_unallocated_bytes > 0 && o.requested_bytes > 0 &&
         o.reserved_unallocated_bytes >= o.requested_bytes;
}

// What the backends print when the other end of a collective went away. gloo: its pair's
// enforce ("Connection closed by peer [10.0.0.2]:4242", a reset, a broken pipe); NCCL: the
// remote-error text of ncclRemoteError and the abort of a communicator a peer's failure aborted;
// the c10d store a rank's peers reach through rank 0 ("failed to recv, got 0 bytes").
constexpr std::string_view kPeerLossMarks[] = {
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "remote process exited or there was a network error",
    "NCCL communicator was aborted",
    "failed to recv, got 0 bytes",
};

// What the backends print when a collective's peer sent data of another size than the rank
// posted for it: the peer was in another collective. gloo: its pair's enforce on a message longer
// than the buffer ("op.preamble.length <= op.nbytes. 99976 vs 4"); c10d's fingerprint check under
// TORCH_DISTRIBUTED_DEBUG=DETAIL.
constexpr std::string_view kOutOfStepMarks[] = {
    "op.preamble.length <= op.nbytes",
    "Detected mismatch between collectives",
};

// The line of ERROR_TAIL that says its peers were out of step, trimmed from the backend's mark
// on; empty when none does.
std::string_view OutOfStepLine(const std::vector<std::string>& error_tail) {
  for (const std::string& line : error_tail)
    for (std::string_view mark : kOutOfStepMarks)
      if (const size_t at = line.find(mark); at != std::string::npos)
        return std::string_view(line).substr(at);
  return {};
}

// A finding of the first failed rank alone: the job is over (the whole iteration lost), and
// what it says was observed.
Finding OfTheFailedRank(Category category, int rank) {
  Finding f;
  f.category = category;
  f.cause = Cause::kSoftware;
  f.finding_class = FindingClass::kSubset;
  f.ranks = {rank};
  f.impact_fraction = 1.0;
  f.confidence = 1.0;
  return f;
}

// " at train.py:87" for C's user line, named in F's functions too; empty without one.
std::string UserLine(const pattern::CollectiveCall& c, Finding* f) {
  const pattern::StackFrame* u = UserFrame(c);
  if (u == nullptr) return {};
  f->functions.push_back(
      {fmt::format("{}:{} in {}", u->file, u->line, u->function), "collective", {}});
  return fmt::format(" at {}:{}", u->file, u->line);
}

}  // namespace

std::optional<Finding> CrashOutOfStepFinding(const RankExit& first,
                                             const std::vector<pattern::CollectiveLog>& logs,
                                             const std::vector<int>& ranks) {
  const std::string_view said = OutOfStepLine(first.error_tail);
  if (said.empty()) return std::nullopt;
  const pattern::CollectiveCall* c = nullptr;
  for (const pattern::CollectiveLog& log : logs)
    if (log.rank == first.rank) c = InCollective(log);
  if (c == nullptr) return std::nullopt;
  std::vector<int> peers;
  for (int r : ranks)
    if (r != first.rank) peers.push_back(r);
  Finding f = OfTheFailedRank(Category::kCollectiveMismatch, first.rank);  // the backend saw it
  f.evidence["collective_seq"] = static_cast<double>(c->seq);
  const std::string group =
      fmt::format("group {}{}", c->group, c->group_desc.empty() ? "" : " (" + c->group_desc + ")");
  f.evidence_text["group"] = group;
  f.evidence_text["error_output"] = std::string(said);
  const std::string where = UserLine(*c, &f);
  f.summary = fmt::format(
      "collectives out of step: rank {}'s collective #{} on {} is {}{}; {} sent it data of "
      "another size ({}): {} in another collective, one {} record does not hold (the worker's "
      "ring records the collectives made through torch.distributed's Python API, not DDP's "
      "gradient all-reduces)",
      first.rank, c->seq, group, DescribeCollective(*c), where,
      peers.empty() ? "its peers"
                    : fmt::format("rank{} {}", peers.size() == 1 ? "" : "s", RankList(peers)),
      said, peers.size() == 1 ? "it was" : "they were", peers.size() == 1 ? "its" : "their");
  f.suggestion =
      "every rank of a process group must call its collectives in the same order with the same "
      "sizes: look for a collective inside a rank-dependent branch at the named line "
      "(TORCH_DISTRIBUTED_DEBUG=DETAIL checks each call)";
  return f;
}

bool LostAPeer(const std::vector<std::string>& error_tail) {
  for (const std::string& line : error_tail)
    for (std::string_view mark : kPeerLossMarks)
      if (line.find(mark) != std::string::npos) return true;
  return false;
}

size_t FirstToBlame(const std::vector<RankExit>& failed) {
  for (size_t i = 0; i < failed.size(); ++i)
    if (!LostAPeer(failed[i].error_tail)) return i;
  return 0;
}

Finding RankCrashFinding(const RankExit& first, const std::vector<pattern::CollectiveLog>& logs) {
  Finding f = OfTheFailedRank(Category::kRankCrash, first.rank);
  f.evidence["exit_code"] = first.exit_code;
  if (first.signal != 0) f.evidence["signal"] = first.signal;
  std::string how = first.signal != 0 ? fmt::format("killed by {} (exit code {})",
                                                    SignalName(first.signal), first.exit_code)
                                      : fmt::format("exited with code {}", first.exit_code);
  // A plain value and a flag (GCC 12 warns of an optional's members read below).
  CudaOom oom;
  bool gpu_oom = false;
  if (first.oom_killed) {
    how = OutOfMemory(first, &f);
  } else if (std::optional<CudaOom> o = FindCudaOom(first.error_tail)) {
    oom = *o;
    gpu_oom = true;
    how = OutOfGpuMemory(oom, &f);
  }
  if (gpu_oom && !first.memory_snapshot.empty()) {
    f.evidence_text["memory_snapshot"] = first.memory_snapshot;
    how += fmt::format("; the allocator's state then: {} (PyTorch's memory_viz reads it)",
                       first.memory_snapshot);
  }
  f.summary = fmt::format("rank {} failed first: {}", first.rank, how);
  for (const pattern::CollectiveLog& log : logs) {
    if (log.rank != first.rank) continue;
    if (const pattern::CollectiveCall* c = InCollective(log)) {
      const std::string where = UserLine(*c, &f);
      f.summary += fmt::format(" in collective #{} on group {}{}, {}{}", c->seq, c->group,
                               c->group_desc.empty() ? "" : " (" + c->group_desc + ")",
                               DescribeCollective(*c), where);
      f.evidence["collective_seq"] = static_cast<double>(c->seq);
    }
  }
  if (!first.error_tail.empty()) {
    std::string tail;
    for (const std::string& line : first.error_tail) tail += (tail.empty() ? "" : " | ") + line;
    f.evidence_text["error_output"] = tail;
    std::string_view last = first.error_tail.back();
    while (!last.empty() && (last.front() == ' ' || last.front() == '\t')) last.remove_prefix(1);
    f.summary += fmt::format("{}{}", kErrorOutputText, last);
  }
  f.suggestion =
      gpu_oom && Fragmented(oom)
          ? "the caching allocator held enough memory, but not in one piece (fragmentation): set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or free cached blocks between "
            "phases whose tensor sizes differ"
      : gpu_oom
          ? "the rank's tensors outgrew its GPU: a smaller batch or sequence, activation "
            "checkpointing, mixed precision or sharding (FSDP, ZeRO); where memory grew over the "
            "run (a memory_growth finding), tensors kept across iterations (losses kept with "
            "their graphs: store loss.item())"
      : first.oom_killed
          ? "the rank ran out of the memory its cgroup allows: find what grows (a memory_growth "
            "finding names the rank and its rate; tensors kept across iterations, caches without "
            "a bound, a DataLoader's prefetch), or give the job a larger memory limit"
      : first.signal != 0
          ? "a fatal error inside the process (a backend's check that aborts, a native library): "
            "its error output names it; where a collective_mismatch finding names the same rank, "
            "the ranks' collectives out of step are the cause"
          : "the rank's own error ended it (an exception, sys.exit): its error output and the "
            "line named here say where; the other ranks failed or were stopped after it";
  return f;
}

void NameGrowthBeforeOom(const std::vector<Finding>& findings, Finding* crash) {
  const bool host = crash->evidence.count("oom_kill") > 0;
  const bool gpu = crash->evidence.count("gpu_oom") > 0;
  if ((!host && !gpu) || crash->ranks.size() != 1) return;
  const int rank = crash->ranks[0];
  for (const Finding& g : findings) {
    if (g.category != Category::kMemoryGrowth ||
        std::find(g.ranks.begin(), g.ranks.end(), rank) == g.ranks.end())
      continue;
    auto memory = g.evidence_text.find("memory");
    if ((memory != g.evidence_text.end() && memory->second == "gpu") != gpu) continue;
    auto rate = g.evidence.find("bytes_per_iteration");
    auto from = g.evidence.find("first_iteration");
    if (rate == g.evidence.end() || from == g.evidence.end()) continue;
    crash->evidence["memory_growth_bytes_per_iteration"] = rate->second;
    crash->evidence["memory_growth_first_iteration"] = from->second;
    // Before the error output, which ends the summary.
    const std::string grown = fmt::format(
        "; its {}memory had grown +{:.1f} MiB per iteration since iteration {:.0f} "
        "(memory_growth)",
        gpu ? "GPU " : "", BytesToMiB(rate->second), from->second);
    const size_t at = crash->summary.find(kErrorOutputText);
    crash->summary.insert(at == std::string::npos ? crash->summary.size() : at, grown);
    return;
  }
}

}  // namespace perftracker::diagnose
