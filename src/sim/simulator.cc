// The simulator's orchestration: a Simulator holds the job's timing model; Run validates the
// configuration, lays out the job folder, writes the ground truth and streams the ranks out.
#include "sim/simulator.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <utility>

#include "sim/emit.h"
#include "sim/timing.h"

namespace perftracker::sim {

namespace fs = std::filesystem;

struct Simulator::Impl {
  Impl(const Config& c, const Topology& t) : model(c, t) {}
  TimingModel model;
};

Simulator::Simulator(Config config)
    : config_(std::move(config)), topo_(config_), impl_(new Impl(config_, topo_)) {}

Simulator::~Simulator() { delete impl_; }

bool Simulator::Writes(int rank) const { return rank != impl_->model.hang_rank(); }

pattern::RankSummary Simulator::SimulateRank(int rank) const {
  return BuildSummary(config_, topo_, impl_->model, rank);
}

std::string Simulator::TraceJson(int rank) const {
  return BuildTraceJson(config_, topo_, impl_->model, rank);
}

StatusOr<RunStats> Run(const Config& config, const std::string& dir) {
  PT_RETURN_IF_ERROR(Validate(config));
  auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "summaries", ec);
  if (ec) return InvalidArgument(fmt::format("{}: cannot create: {}", dir, ec.message()));
  if (config.traces) fs::create_directories(fs::path(dir) / "traces", ec);
  if (ec) return InvalidArgument(fmt::format("{}: cannot create: {}", dir, ec.message()));
  {
    std::string truth = TruthJson(config);
    std::string path = (fs::path(dir) / "truth.json").string();
    std::ofstream out(path, std::ios::binary);
    out << truth;
    if (!out) return InvalidArgument(fmt::format("{}: cannot write", path));
  }
  Simulator sim(config);
  RunStats stats;
  PT_RETURN_IF_ERROR(WriteRanks(sim, dir, &stats));
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

}  // namespace perftracker::sim
