#include "sim/emit.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "base/json_writer.h"
#include "base/parallel_for.h"
#include "base/units.h"
#include "pattern/names.h"
#include "pattern/summary_io.h"

namespace perftracker::sim {

namespace fs = std::filesystem;
using pattern::FunctionClass;
using trace::EventKind;

namespace {

// The GPU every simulated rank has.
constexpr char kGpuName[] = "NVIDIA H100 80GB HBM3";
constexpr int kGpuSms = 132;
constexpr int kGpuComputeMajor = 9;

// A rank's summary, function by function. Draws its per-iteration noise from one stream in
// function order, so the order of AddFunction calls is part of the output.
class SummaryBuilder {
 public:
  SummaryBuilder(const Config& config, const Topology& topo, const TimingModel& model, int rank)
      : config_(config),
        topo_(topo),
        model_(model),
        rank_(rank),
        st_(model.Evaluate(rank)),
        rng_(SplitMix(config.seed ^ SplitMix(rank + 0x777))),
        z_(0, 1),
        every_(model.EveryOf(rank)) {}

  pattern::RankSummary Build() {
    FillRank();
    const std::vector<Spec>& specs = model_.Stage(st_.stage);
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      double cv = s.gpu ? 0.03 : 0.12;
      if (s.fclass == FunctionClass::kCollective) cv = 0.25;
      // The fault-free part of the call, for intermittent faults' per-iteration values.
      double free_us = st_.call_us[i];
      if (s.role == Role::kLoader) {
        free_us = s.base_us * st_.noise[i];
      } else if (!IsCollective(s.role)) {
        const double x = model_.Factor(rank_, s, true);
        if (x > 0) free_us = st_.call_us[i] / x;
      }
      AddFunction(s, st_.call_us[i], s.calls, s.fclass, s.name, s.self_frac, cv, free_us);
    }
    if (model_.HasGc(rank_)) {
      Spec gc = MakeSpec("<gc>", EventKind::kPythonFunction, Role::kGc, kGcUs, 1,
                         "train.py(241): <module>;train.py(120): train_step");
      AddFunction(gc, model_.GcUs(rank_) * std::exp(kRankNoise * z_(rng_)), 1, FunctionClass::kGc,
                  gc.name, 1, 0.1, 0);
    }
    std::sort(out_.functions.begin(), out_.functions.end(),
              [](const pattern::FunctionPattern& a, const pattern::FunctionPattern& b) {
                return a.per_iter_us > b.per_iter_us;
              });
    return std::move(out_);
  }

 private:
  // Everything but the functions: place, device, iterations, GPU time split.
  void FillRank() {
    out_.rank = rank_;
    out_.world_size = config_.workers;
    const int node = topo_.Node(rank_);
    out_.host = fmt::format("node-{}", node);
    out_.network_switch = fmt::format("switch-{}", topo_.Switch(rank_));
    out_.source = fmt::format("simulated:rank-{}", rank_);
    out_.has_gpu = true;
    out_.process_groups = topo_.Groups(rank_);
    trace::DeviceInfo dev;
    dev.id = rank_ % config_.gpus_per_node;
    dev.name = kGpuName;
    dev.num_sms = kGpuSms;
    dev.compute_major = kGpuComputeMajor;
    out_.devices.push_back(dev);
    device_ = dev.id;
    out_.iteration_source = "ProfilerStep";
    out_.main_tid = 1;
    double window = 0;
    for (int i = 0; i < config_.iterations; ++i) {
      out_.iteration_ms.push_back(UsToMs(st_.iteration_us * st_.iter_factor[i]));
      out_.iteration_steps.push_back(100 + i);
      window += out_.iteration_ms.back();
    }
    out_.window_ms = window;
    out_.gpu_busy_us = st_.compute_us + st_.comm_us + st_.memcpy_us;
    out_.gpu_idle_us = st_.idle_us;
    out_.compute_us = st_.compute_us;
    out_.comm_us = st_.comm_us;
    out_.memcpy_us = st_.memcpy_us;
    out_.comm_compute_overlap_us = 0;
    out_.cpu_critical_us = st_.cpu_stall_us;
  }

  // An intermittent fault is at full strength on its active iterations and absent on the
  // others; a function's fault-free part keeps its value on every iteration.
  void AddFunction(const Spec& s, double call_us, int calls, FunctionClass fclass,
                   const std::string& name, double self_frac, double cv, double free_call_us) {
    const int iters = config_.iterations;
    const double mean_iter = st_.iteration_us;
    pattern::FunctionPattern f;
    f.name = name;
    f.kind = s.kind;
    f.fclass = fclass;
    f.stack = s.stack;
    f.device = s.gpu ? device_ : -1;
    f.stream = s.gpu ? s.stream : -1;
    f.main_thread = !s.gpu && s.role != Role::kCpuOp ? true : (!s.gpu && !s.stack.empty());
    f.top_level = s.role == Role::kTrainStep || s.role == Role::kLoader ||
                  s.role == Role::kOptimizer || s.role == Role::kGc || s.gpu;
    f.count = static_cast<uint64_t>(calls) * iters;
    f.calls_per_iter = calls;
    f.mean_us = (call_us);
    f.cv = (cv);
    f.p50_us = (call_us * (1 - 0.2 * cv));
    f.p99_us = (call_us * (1 + 2.33 * cv));
    f.max_us = (call_us * (1 + 3.5 * cv));
    f.min_us = (call_us * std::max(0.1, 1 - 2 * cv));
    f.per_iter_us = (call_us * calls);
    f.total_us = (f.per_iter_us * iters);
    f.share = (f.per_iter_us / mean_iter);
    f.self_per_iter_us = (f.per_iter_us * self_frac);
    f.iter_us.reserve(iters);
    const double free_per_iter = free_call_us * calls;
    const double fault_per_iter = f.per_iter_us - free_per_iter;
    for (int i = 0; i < iters; ++i) {
      const double fault =
          every_ == 1 ? fault_per_iter : (i % every_ == 0 ? fault_per_iter * every_ : 0);
      f.iter_us.push_back(
          static_cast<float>((free_per_iter + fault) * st_.iter_factor[i] *
                             std::max(0.05, 1 + config_.noise * std::clamp(z_(rng_), -3.0, 3.0))));
    }
    if (fclass == FunctionClass::kCollective) FillCollective(s, call_us, &f);
    out_.functions.push_back(std::move(f));
  }

  void FillCollective(const Spec& s, double call_us, pattern::FunctionPattern* f) const {
    f->coll.op = s.op;
    f->coll.msg_bytes = s.msg_bytes;
    f->coll.dtype = "BFloat16";
    const char* g = GroupName(s.role);
    for (const trace::ProcessGroup& pg : out_.process_groups) {
      if (pg.name == g) {
        f->coll.group = pg.desc;
        f->coll.group_size = s.role == Role::kCollPp ? 2 : pg.size;
      }
    }
    f->coll.algbw_gbps = call_us > 0 ? s.msg_bytes / (call_us * 1e3) : 0;
    // The group has at least two members (see TimingModel::TransferUs): pattern's factor is
    // the nccl-tests one there.
    f->coll.busbw_gbps = f->coll.algbw_gbps * pattern::BusFactor(s.op, f->coll.group_size);
  }

  const Config& config_;
  const Topology& topo_;
  const TimingModel& model_;
  const int rank_;
  const RankState st_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> z_;
  const int every_;
  int device_ = 0;
  pattern::RankSummary out_;
};

// "a, b, c"
std::string JoinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t k = 0; k < ranks.size(); ++k) out += fmt::format("{}{}", k ? ", " : "", ranks[k]);
  return out;
}

// A rank's Kineto trace, event by event. Draws each call's duration noise from one stream in
// event order.
class TraceBuilder {
 public:
  TraceBuilder(const Config& config, const Topology& topo, const TimingModel& model, int rank)
      : config_(config),
        model_(model),
        rank_(rank),
        st_(model.Evaluate(rank)),
        device_(rank % config.gpus_per_node),
        pid_(1000 + rank),
        groups_(topo.Groups(rank)),
        rng_(SplitMix(config.seed ^ SplitMix(rank + 0x1234))),
        z_(0, 1) {}

  std::string Build() {
    o_.reserve(1 << 22);
    Header();
    double t = 1.0e6;
    for (int it = 0; it < config_.iterations; ++it) t = Iteration(it, t);
    o_ += "\n],\n\"traceName\": ";
    AppendJsonString(fmt::format("rank-{}.json", rank_), &o_);
    o_ += fmt::format(",\n\"displayTimeUnit\": \"ms\",\n\"baseTimeNanoseconds\": {}\n}}\n",
                      int64_t(1700000000) * 1000000000);
    return std::move(o_);
  }

 private:
  // distributedInfo (process groups) and deviceProperties, then the event array's opening.
  void Header() {
    o_ += "{\n\"schemaVersion\": 1,\n\"distributedInfo\": {\"backend\": \"nccl\", ";
    o_ += fmt::format("\"rank\": {}, \"world_size\": {}, \"pg_count\": {}, \"pg_config\": [", rank_,
                      config_.workers, groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      o_ += fmt::format(
          "{}{{\"pg_name\": \"{}\", \"pg_desc\": \"{}\", \"backend_config\": \"cuda:nccl\", "
          "\"pg_size\": {}, \"ranks\": [{}]}}",
          g ? ", " : "", groups_[g].name, groups_[g].desc, groups_[g].size,
          JoinRanks(groups_[g].ranks));
    }
    o_ += "], \"nccl_version\": \"2.21.5\"},\n";
    o_ += fmt::format(
        "\"deviceProperties\": [{{\"id\": {}, \"name\": \"{}\", "
        "\"computeMajor\": {}, \"computeMinor\": 0, \"numSms\": {}}}],\n",
        device_, kGpuName, kGpuComputeMajor, kGpuSms);
    o_ += "\"traceEvents\": [\n";
  }

  void Event(const char* cat, std::string_view name, int p, int tid, double ts, double dur,
             const std::string& args) {
    if (!first_event_) o_ += ",\n";
    first_event_ = false;
    o_ += fmt::format("{{\"ph\": \"X\", \"cat\": \"{}\", \"name\": ", cat);
    AppendJsonString(name, &o_);
    o_ += fmt::format(
        ", \"pid\": {}, \"tid\": {}, \"ts\": {:.3f}, \"dur\": {:.3f}, \"args\": {{{}}}}}", p, tid,
        ts, dur, args);
  }

  // One iteration starting at T; returns where the next starts.
  double Iteration(int it, double t) {
    const std::vector<Spec>& specs = model_.Stage(st_.stage);
    const double f = st_.iter_factor[it];
    const double t0 = t;
    double cpu = t0 + 5;
    // The GPU starts once the CPU-side stalls (loader, GC, contention) are over.
    double gpu = t0 + st_.idle_us * f;
    std::string step_args = fmt::format("\"External id\": {}", ext_++);
    const int64_t step_py = pyid_++;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      if (s.role == Role::kTrainStep || s.role == Role::kLaunch) continue;  // launches: below
      for (int c = 0; c < s.calls; ++c) {
        double dur = st_.call_us[i] * f * (1 + 0.02 * std::clamp(z_(rng_), -3.0, 3.0));
        if (s.gpu) {
          GpuCall(s, dur, &cpu, &gpu);
        } else {
          CpuCall(s, dur, step_py, &cpu, &gpu);
        }
      }
    }
    if (model_.HasGc(rank_)) {
      Event("python_function", "<gc>", pid_, 1, cpu, model_.GcUs(rank_) * f,
            fmt::format("\"Python id\": {}, \"Python parent id\": {}", pyid_++, step_py));
      cpu += model_.GcUs(rank_) * f;
    }
    const double end = std::max({t0 + st_.iteration_us * f, cpu + 10, gpu + 10});
    Event("python_function", "train.py(120): train_step", pid_, 1, t0 + 1, end - t0 - 2,
          fmt::format("\"Python id\": {}, \"Python parent id\": 0", step_py));
    Event("user_annotation", fmt::format("ProfilerStep#{}", 100 + it), pid_, 1, t0, end - t0,
          step_args);
    return end + 1;
  }

  // A kernel or memcpy: its launch on the main thread, then the GPU work once the stream is
  // free, linked by correlation id.
  void GpuCall(const Spec& s, double dur, double* cpu, double* gpu) {
    const double launch = kLaunchUs;
    Event("cuda_runtime", "cudaLaunchKernel", pid_, 1, *cpu, launch,
          fmt::format("\"External id\": {}, \"correlation\": {}", ext_, corr_));
    double start = std::max(*gpu, *cpu + launch);
    std::string args =
        fmt::format("\"External id\": {}, \"device\": {}, \"stream\": {}, \"correlation\": {}",
                    ext_, device_, s.stream, corr_);
    if (s.fclass == FunctionClass::kCollective) args += CollectiveArgs(s);
    Event(s.kind == EventKind::kMemcpy ? "gpu_memcpy" : "kernel", s.raw, device_, s.stream, start,
          dur, args);
    *gpu = start + dur;
    *cpu += launch + 1;
    ++corr_;
    ++ext_;
  }

  // The collective args torch 2.x records on an NCCL kernel.
  std::string CollectiveArgs(const Spec& s) const {
    std::string args;
    const char* g = GroupName(s.role);
    for (const trace::ProcessGroup& pg : groups_) {
      if (pg.name != g) continue;
      const int64_t nelems = static_cast<int64_t>(s.msg_bytes / 2);
      args += fmt::format(
          ", \"Collective name\": \"{}\", \"In msg nelems\": {}, \"Out msg nelems\": {}, "
          "\"Group size\": {}, \"dtype\": \"BFloat16\", \"Process Group Name\": \"{}\", "
          "\"Process Group Description\": \"{}\", \"Process Group Ranks\": \"[{}]\"",
          s.op == "send_recv" ? "send" : s.op.c_str(), nelems, nelems,
          s.role == Role::kCollPp ? 2 : pg.size, pg.name, pg.desc, JoinRanks(pg.ranks));
    }
    return args;
  }

  // A CPU-side function on the main thread.
  void CpuCall(const Spec& s, double dur, int64_t step_py, double* cpu, double* gpu) {
    const char* cat = s.kind == EventKind::kPythonFunction   ? "python_function"
                      : s.kind == EventKind::kUserAnnotation ? "user_annotation"
                      : s.kind == EventKind::kCudaRuntime    ? "cuda_runtime"
                                                             : "cpu_op";
    std::string args;
    if (s.kind == EventKind::kPythonFunction) {
      args = fmt::format("\"Python id\": {}, \"Python parent id\": {}", pyid_++, step_py);
    } else {
      args = fmt::format("\"External id\": {}", ext_++);
    }
    if (s.role == Role::kSync) {
      // Waits for the GPU to drain, which then sits idle until the CPU moves on.
      double until = std::max(*cpu, *gpu);
      dur = std::max(dur, until - *cpu + 5);
    }
    Event(cat, s.raw, pid_, 1, *cpu, dur, args);
    // Python functions and annotations enclose other work; they do not hold the CPU.
    if (s.kind != EventKind::kPythonFunction) *cpu += dur;
    if (s.role == Role::kSync) *gpu = std::max(*gpu, *cpu);
  }

  const Config& config_;
  const TimingModel& model_;
  const int rank_;
  const RankState st_;
  const int device_;
  const int pid_;
  const std::vector<trace::ProcessGroup> groups_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> z_;
  int64_t corr_ = 1, ext_ = 1, pyid_ = 1;
  bool first_event_ = true;
  std::string o_;
};

}  // namespace

pattern::RankSummary BuildSummary(const Config& config, const Topology& topo,
                                  const TimingModel& model, int rank) {
  return SummaryBuilder(config, topo, model, rank).Build();
}

std::string BuildTraceJson(const Config& config, const Topology& topo, const TimingModel& model,
                           int rank) {
  return TraceBuilder(config, topo, model, rank).Build();
}

StatusOr<uint64_t> WriteRank(const Simulator& sim, const std::string& dir, int r) {
  uint64_t bytes = 0;
  pattern::RankSummary s = sim.SimulateRank(r);
  std::string path = (fs::path(dir) / "summaries" / fmt::format("rank-{}.summary", r)).string();
  PT_RETURN_IF_ERROR(pattern::WriteSummaryFile(s, path));
  if (sim.config().traces) {
    std::string json = sim.TraceJson(r);
    std::string tpath = (fs::path(dir) / "traces" / fmt::format("rank-{}.json", r)).string();
    std::ofstream out(tpath, std::ios::binary);
    out << json;
    if (!out) return InvalidArgument(fmt::format("{}: cannot write", tpath));
    bytes += json.size();
  }
  std::error_code ec;
  bytes += fs::file_size(path, ec);
  return bytes;
}

Status WriteRanks(const Simulator& sim, const std::string& dir, RunStats* stats) {
  const Config& config = sim.config();
  std::atomic<uint64_t> bytes{0};
  std::atomic<int> written{0};
  std::mutex mu;
  Status error;
  const int threads = std::clamp(config.threads, 1, kMaxWriterThreads);
  ParallelFor(config.workers, threads, [&](size_t i) {
    const int r = static_cast<int>(i);
    if (!sim.Writes(r)) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!error.ok()) return;
    }
    StatusOr<uint64_t> n = WriteRank(sim, dir, r);
    if (!n.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (error.ok()) error = n.status();
      return;
    }
    bytes += *n;
    ++written;
  });
  if (!error.ok()) return error;
  stats->ranks_written = written;
  stats->bytes = bytes;
  return Status::Ok();
}

}  // namespace perftracker::sim
