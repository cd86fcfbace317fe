// Every fault the simulator injects, at 64 ranks, through the real diagnosis: the first finding
// names the fault's category and exactly its ranks (and host or switch), and nothing else is
// reported. The simulator's ground truth (FaultRanks, FaultCategory) is what is asserted.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "diagnose/diagnose.h"
#include "pattern/compact_job.h"
#include "sim/simulator.h"

namespace perftracker::sim {
namespace {

// tp=4 x pp=2 x dp=8 on 8 nodes of 8 GPUs, 2 nodes per switch.
Config Job(const std::vector<std::string>& faults, uint64_t seed = 7) {
  Config c;
  c.workers = 64;
  c.layout = *ParseLayout("tp=4,pp=2", 64);
  c.gpus_per_node = 8;
  c.nodes_per_switch = 2;
  c.seed = seed;
  for (const auto& f : faults) c.faults.push_back(*ParseFault(f));
  return c;
}

diagnose::Diagnosis SimulateAndDiagnose(const Config& c) {
  Simulator sim(c);
  pattern::CompactJob job;
  for (int r = 0; r < c.workers; ++r)
    if (sim.Writes(r)) job.Add(sim.SimulateRank(r));
  job.SortByRank();
  return diagnose::Diagnose(job);
}

std::string Dump(const diagnose::Diagnosis& d) {
  std::string s;
  for (const auto& f : d.findings)
    s += std::string("  [") + diagnose::CategoryName(f.category) + "] " + f.summary + "\n";
  return s;
}

class FaultDiagnosis : public testing::TestWithParam<const char*> {};

TEST_P(FaultDiagnosis, FirstFindingIsTheFaultAndNothingElse) {
  const Config c = Job({GetParam()});
  const diagnose::Diagnosis d = SimulateAndDiagnose(c);
  const Fault& f = c.faults[0];
  ASSERT_EQ(d.findings.size(), 1u) << GetParam() << "\n" << Dump(d);
  const diagnose::Finding& top = d.findings[0];
  EXPECT_EQ(diagnose::CategoryName(top.category), FaultCategory(f.kind)) << Dump(d);
  EXPECT_EQ(top.ranks, FaultRanks(c, f)) << Dump(d);
  EXPECT_EQ(FaultClass(f.kind) == "all", top.finding_class == diagnose::FindingClass::kAll);
  if (f.place_kind == PlaceKind::kNode) {
    EXPECT_EQ(top.hosts, std::vector<std::string>{"node-" + std::to_string(f.index)});
  }
  if (f.place_kind == PlaceKind::kSwitch) {
    ASSERT_TRUE(top.evidence_text.count("switch")) << Dump(d);
    EXPECT_EQ(top.evidence_text.at("switch"), "switch-" + std::to_string(f.index));
  }
  // A rank that wrote nothing has no measured cost (missing_rank says so); the others do.
  if (f.kind != FaultKind::kHang) {
    EXPECT_GT(top.impact_ms, 0) << Dump(d);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryKind, FaultDiagnosis,
                         testing::Values("slow-gpu@rank=13", "slow-nvlink@node=5",
                                         "slow-nic@node=2", "slow-switch@switch=1",
                                         "slow-loader@rank=6", "slow-loader@node=1",
                                         "cpu-contention@rank=21", "gc@rank=40", "tiny-kernels@all",
                                         "sync@all", "hang@rank=9"));

// Link faults at 1,000 workers that an earlier localization got wrong: a switch whose ranks
// arrive late to data parallelism after their slow pipeline transfers (no finding), and with
// expert parallelism (groups spanning 5 nodes) the innocent neighbours of a slow NIC or switch
// (named instead, or as well).
TEST(FaultDiagnosis, LinkFaultsInLargeLayoutsNameOnlyTheLink) {
  struct Case {
    const char* layout;
    const char* fault;
  };
  for (const Case& k :
       {Case{"tp=8,pp=5", "slow-switch@switch=10"}, Case{"tp=8,pp=5,ep=5", "slow-nic@node=117"},
        Case{"tp=8,pp=5,ep=5", "slow-switch@switch=18"}}) {
    Config c;
    c.workers = 1000;
    c.layout = *ParseLayout(k.layout, c.workers);
    c.seed = 1;
    c.faults.push_back(*ParseFault(k.fault));
    const diagnose::Diagnosis d = SimulateAndDiagnose(c);
    ASSERT_EQ(d.findings.size(), 1u) << k.layout << " " << k.fault << "\n" << Dump(d);
    EXPECT_EQ(d.findings[0].category, diagnose::Category::kCommunication);
    EXPECT_EQ(d.findings[0].ranks, FaultRanks(c, c.faults[0])) << Dump(d);
  }
}

TEST(FaultDiagnosis, TwoFaultsAreBothNamedFirst) {
  const Config c = Job({"slow-gpu@rank=45", "gc@rank=3"});
  const diagnose::Diagnosis d = SimulateAndDiagnose(c);
  ASSERT_EQ(d.findings.size(), 2u) << Dump(d);
  std::set<std::vector<int>> got = {d.findings[0].ranks, d.findings[1].ranks};
  EXPECT_EQ(got, (std::set<std::vector<int>>{{45}, {3}})) << Dump(d);
}

TEST(FaultDiagnosis, FaultFreeJobsHaveNoFinding) {
  for (uint64_t seed : {1, 2, 3}) {
    const diagnose::Diagnosis d = SimulateAndDiagnose(Job({}, seed));
    EXPECT_TRUE(d.findings.empty()) << "seed " << seed << "\n" << Dump(d);
  }
}

}  // namespace
}  // namespace perftracker::sim
