// Diagnosis at scale: a simulated job of N workers (src/sim, the same ranks `perftracker
// simulate` writes) is generated rank by rank on --threads threads (default 2) straight into the
// compact job form (no files), then diagnosed. Prints the time to build the job, the time to
// diagnose it, peak memory, and whether the top findings name the injected faults.
//   build/diagnose_scale --workers 100000 --layout tp=8,pp=4 --fault slow-gpu@rank=77
// Several sizes in one run show how the diagnosis grows (linear: time per worker stays level;
// a quadratic term doubles it with each doubling of the job):
//   build/diagnose_scale --workers 10240,40960,100000 --layout tp=8,pp=5 --layers 22
// A fault whose place is outside a size is left out at that size (and said so).
// A program that prints its figures, not a timing-gated test.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "base/parallel_for.h"
#include "base/phase_times.h"
#include "diagnose/diagnose.h"
#include "pattern/compact_job.h"
#include "sim/simulator.h"

namespace {

namespace pt = perftracker;

double PeakRssGb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1048576.0;
  return 0;
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int Usage(const char* msg) {
  std::fprintf(
      stderr,
      "diagnose_scale: %s\nusage: diagnose_scale [--workers N[,N...]] [--layout tp=T,pp=P] "
      "[--layers L] [--fault KIND@PLACE ...] [--seed S] [--threads T]\n",
      msg);
  return 2;
}

struct SizeResult {
  int workers = 0;
  double build_s = 0, diagnose_s = 0, peak_gb = 0;
  int missed = 0;
  bool clean_with_findings = false;
};

// Builds and diagnoses one job of CONFIG.workers; prints its lines.
SizeResult RunSize(pt::sim::Config config, const std::string& layout) {
  SizeResult res;
  res.workers = config.workers;
  auto parsed = pt::sim::ParseLayout(layout, config.workers);
  if (!parsed.ok()) {
    std::fprintf(stderr, "diagnose_scale: %s\n", parsed.status().message().c_str());
    std::exit(2);
  }
  config.layout = *parsed;
  std::vector<pt::sim::Fault> all = std::move(config.faults);
  config.faults.clear();
  for (const auto& f : all) {
    pt::sim::Config one = config;
    one.faults = {f};
    if (pt::sim::Validate(one).ok()) {
      config.faults.push_back(f);
    } else {
      std::printf("fault %s@%s: outside %d workers, left out\n", pt::sim::FaultKindName(f.kind),
                  f.place.c_str(), config.workers);
    }
  }
  if (pt::Status st = pt::sim::Validate(config); !st.ok()) {
    std::fprintf(stderr, "diagnose_scale: %s\n", st.message().c_str());
    std::exit(2);
  }

  auto t0 = std::chrono::steady_clock::now();
  pt::sim::Simulator sim(config);
  pt::pattern::CompactJob job;
  std::atomic<uint64_t> functions{0};
  pt::ParallelFor(config.workers, std::max(config.threads, 1), [&](size_t i) {
    const int r = static_cast<int>(i);
    if (!sim.Writes(r)) return;
    pt::pattern::RankSummary s = sim.SimulateRank(r);
    functions += s.functions.size();
    job.Add(std::move(s));  // CompactJob::Add takes its own lock
  });
  job.SortByRank();
  res.build_s = Since(t0);
  double build_gb = PeakRssGb();

  auto t1 = std::chrono::steady_clock::now();
  pt::PhaseTimes phases;
  pt::diagnose::DiagnoseOptions options;
  options.phases = &phases;
  pt::diagnose::Diagnosis d = pt::diagnose::Diagnose(job, options);
  res.diagnose_s = Since(t1);
  res.peak_gb = PeakRssGb();

  const size_t n = job.ranks().size();
  std::printf(
      "workers %d (%zu with summaries), %.0f functions per rank, %zu distinct\n"
      "build (simulate + compact) %.2f s, peak RSS %.2f GB\n"
      "diagnose %.2f s, peak RSS %.2f GB, %zu findings\n",
      config.workers, n, n ? static_cast<double>(functions) / n : 0.0, job.function_count(),
      res.build_s, build_gb, res.diagnose_s, res.peak_gb, d.findings.size());
  std::printf("  phases: %s\n", phases.Format().c_str());
  for (size_t k = 0; k < d.findings.size() && k < 5; ++k)
    std::printf("  %zu. [%s] %s\n", k + 1, pt::diagnose::CategoryName(d.findings[k].category),
                d.findings[k].summary.substr(0, 160).c_str());
  // The faults in order: is each named, with its ranks, by one of the first findings?
  for (const auto& f : config.faults) {
    std::vector<int> want = pt::sim::FaultRanks(config, f);
    std::set<int> want_set(want.begin(), want.end());
    bool found = false;
    for (size_t k = 0; k < d.findings.size() && k < config.faults.size(); ++k) {
      std::set<int> got(d.findings[k].ranks.begin(), d.findings[k].ranks.end());
      found |= got == want_set &&
               pt::diagnose::CategoryName(d.findings[k].category) == pt::sim::FaultCategory(f.kind);
    }
    std::printf("fault %s@%s: %s\n", pt::sim::FaultKindName(f.kind), f.place.c_str(),
                found ? "named first" : "NOT among the first findings");
    res.missed += !found;
  }
  if (config.faults.empty() && !d.findings.empty()) {
    std::printf("fault-free job: %zu findings (expected none)\n", d.findings.size());
    res.clean_with_findings = true;
  }
  std::fflush(stdout);
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  pt::sim::Config config;
  config.seed = 1;
  std::vector<int> sizes = {1000};
  std::string layout = "tp=8,pp=4";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return Usage(("missing value after " + a).c_str());
    std::string v = argv[++i];
    if (a == "--workers") {
      sizes.clear();
      for (size_t at = 0; at <= v.size();) {
        size_t comma = std::min(v.find(',', at), v.size());
        const int n = std::atoi(v.substr(at, comma - at).c_str());
        if (n < 1) return Usage(("--workers: not a size list: " + v).c_str());
        sizes.push_back(n);
        at = comma + 1;
      }
    } else if (a == "--layout") {
      layout = v;
    } else if (a == "--layers") {
      config.layers = std::atoi(v.c_str());
    } else if (a == "--seed") {
      config.seed = std::strtoull(v.c_str(), nullptr, 10);
    } else if (a == "--threads") {
      config.threads = std::atoi(v.c_str());
    } else if (a == "--fault") {
      auto f = pt::sim::ParseFault(v);
      if (!f.ok()) return Usage(f.status().message().c_str());
      config.faults.push_back(*f);
    } else {
      return Usage(("unknown flag " + a).c_str());
    }
  }
  std::vector<SizeResult> results;
  for (int n : sizes) {
    if (results.size()) std::printf("\n");
    config.workers = n;
    results.push_back(RunSize(config, layout));
  }
  if (results.size() > 1) {
    // Peak RSS is the process's: it only grows, so each size's figure includes the larger of
    // the earlier ones; sizes in increasing order give each its own.
    std::printf("\nscaling (diagnosis only):\n%10s %12s %16s %14s %12s\n", "workers", "diagnose s",
                "us per worker", "size ratio", "time ratio");
    for (size_t k = 0; k < results.size(); ++k) {
      const SizeResult& r = results[k];
      const double per = r.diagnose_s * 1e6 / r.workers;
      if (k == 0) {
        std::printf("%10d %12.2f %16.1f %14s %12s\n", r.workers, r.diagnose_s, per, "-", "-");
      } else {
        const SizeResult& f = results[0];
        std::printf("%10d %12.2f %16.1f %14.2f %12.2f\n", r.workers, r.diagnose_s, per,
                    static_cast<double>(r.workers) / f.workers, r.diagnose_s / f.diagnose_s);
      }
    }
  }
  int missed = 0;
  bool clean_bad = false;
  for (const auto& r : results) missed += r.missed, clean_bad |= r.clean_with_findings;
  return missed || clean_bad ? 1 : 0;
}
