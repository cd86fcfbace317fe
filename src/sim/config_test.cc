// Unit tests of the simulator's configuration: --layout and --fault parsing and the whole
// configuration check, each bad input refused with one line that names its flag.
#include "sim/config.h"

#include <gtest/gtest.h>

#include <string>

namespace perftracker::sim {
namespace {

// One line, starting with the flag.
void ExpectFlagError(const Status& st, const std::string& flag) {
  ASSERT_FALSE(st.ok()) << flag;
  EXPECT_EQ(st.message().rfind(flag + ": ", 0), 0u) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
}

Config Valid() {
  Config c;
  c.workers = 64;
  c.layout = ParseLayout("tp=8,pp=2", 64).value();
  return c;
}

TEST(ParseLayout, AllDimensions) {
  auto l = ParseLayout("pp=2,tp=4,dp=2,ep=2", 16);
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->tp, 4);
  EXPECT_EQ(l->pp, 2);
  EXPECT_EQ(l->dp, 2);
  EXPECT_EQ(l->ep, 2);
}

TEST(ParseLayout, NamesTheProblem) {
  EXPECT_EQ(ParseLayout("tp=3,pp=2", 16).status().message(),
            "--layout: 16 workers do not split into tp=3 x pp=2 x dp (not a multiple of 6)");
  EXPECT_EQ(ParseLayout("tp=2,pp=2,dp=2", 16).status().message(),
            "--layout: tp=2 x pp=2 x dp=2 is 8 ranks, not 16 workers");
  EXPECT_EQ(ParseLayout("tp=2,pp=1,dp=8,ep=3", 16).status().message(),
            "--layout: ep=3 does not divide dp=8");
  EXPECT_EQ(ParseLayout("tp=0,pp=1", 16).status().message(),
            "--layout: 'tp=0' is not NAME=N with N >= 1 (expected tp=T,pp=P[,dp=D][,ep=E])");
  for (const char* bad : {"tp=2", "pp=2", "tp=2,pp=1,xp=2", "tp=2,,pp=1", "tp=2,pp=1,"}) {
    ExpectFlagError(ParseLayout(bad, 16).status(), "--layout");
  }
}

TEST(ParseFault, PlacesSizeAndPeriod) {
  auto f = ParseFault("slow-gpu@rank=3,size=0.5,every=4");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->kind, FaultKind::kSlowGpu);
  EXPECT_EQ(f->place_kind, PlaceKind::kRank);
  EXPECT_EQ(f->index, 3);
  EXPECT_EQ(f->place, "rank=3");
  EXPECT_DOUBLE_EQ(f->Strength(), 0.125);
  auto s = ParseFault("slow-switch@switch=2");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->place_kind, PlaceKind::kSwitch);
  auto all = ParseFault("sync@all");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->place_kind, PlaceKind::kAll);
  EXPECT_EQ(all->index, -1);
  auto loader = ParseFault("slow-loader@node=1");
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ(loader->place_kind, PlaceKind::kNode);
}

TEST(ParseFault, KindNamesRoundTrip) {
  for (const char* name : {"slow-gpu", "slow-nvlink", "slow-nic", "slow-switch", "slow-loader",
                           "cpu-contention", "gc", "tiny-kernels", "sync", "hang"}) {
    bool parsed = false;
    for (const char* place : {"@rank=0", "@node=0", "@switch=0", "@all"}) {
      auto f = ParseFault(std::string(name) + place);
      if (!f.ok()) continue;
      parsed = true;
      EXPECT_STREQ(FaultKindName(f->kind), name);
    }
    EXPECT_TRUE(parsed) << name;
  }
}

TEST(ParseFault, RejectsWithOneLine) {
  EXPECT_EQ(ParseFault("slow-gpu@rank=1,size=0").status().message(),
            "--fault: 'slow-gpu@rank=1,size=0': size must be a number in (0, 100]");
  EXPECT_EQ(ParseFault("slow-gpu@rank=1,every=0").status().message(),
            "--fault: 'slow-gpu@rank=1,every=0': every must be in [1, 1000]");
  EXPECT_EQ(ParseFault("tiny-kernels@all,size=2").status().message(),
            "--fault: 'tiny-kernels@all,size=2': tiny-kernels takes no size or every");
  EXPECT_EQ(ParseFault("slow-loader@all").status().message(),
            "--fault: 'slow-loader@all': slow-loader takes rank=R or node=N");
  for (const char* bad :
       {"slow-gpu@rank=1,size=abc", "slow-gpu@rank=1,size=101", "slow-gpu@rank=1,every=1001",
        "slow-gpu@rank=1,color=red", "slow-gpu@rank=x", "slow-gpu@rank", "slow-nic@rank=1",
        "hang@all", "sync@rank=1", "gc@node=1", "@rank=1", "slow-gpu@"}) {
    ExpectFlagError(ParseFault(bad).status(), "--fault");
  }
}

TEST(Validate, AcceptsAValidJob) { EXPECT_TRUE(Validate(Valid()).ok()); }

TEST(Validate, RejectsBadSizesNamingTheFlag) {
  Config c = Valid();
  c.workers = 0;
  ExpectFlagError(Validate(c), "--workers");
  c = Valid();
  c.workers = 32;
  ExpectFlagError(Validate(c), "--workers");
  c = Valid();
  c.gpus_per_node = 0;
  ExpectFlagError(Validate(c), "--gpus-per-node");
  c = Valid();
  c.nodes_per_switch = 0;
  ExpectFlagError(Validate(c), "--nodes-per-switch");
  c = Valid();
  c.iterations = 1;
  ExpectFlagError(Validate(c), "--iterations");
  c = Valid();
  c.layers = 257;
  ExpectFlagError(Validate(c), "--layers");
  c = Valid();
  c.workers = 128;
  c.layout.dp = 8;
  c.traces = true;
  ExpectFlagError(Validate(c), "--traces");
}

TEST(Validate, RejectsFaultsOutsideTheCluster) {
  // 64 workers: 8 nodes of 8 GPUs, 2 switches of 4 nodes.
  Config c = Valid();
  c.faults = {ParseFault("slow-gpu@rank=64").value()};
  EXPECT_EQ(Validate(c).message(), "--fault: 'slow-gpu@rank=64': rank 64 is not below 64 workers");
  c.faults = {ParseFault("slow-nic@node=8").value()};
  EXPECT_EQ(Validate(c).message(), "--fault: 'slow-nic@node=8': node 8 does not exist (8 nodes)");
  c.faults = {ParseFault("slow-switch@switch=2").value()};
  EXPECT_EQ(Validate(c).message(),
            "--fault: 'slow-switch@switch=2': switch 2 does not exist (2 switches)");
  // Node 4 holds ranks 32..39: all in pipeline stage 1, where no data loader runs.
  c.faults = {ParseFault("slow-loader@node=4").value()};
  ExpectFlagError(Validate(c), "--fault");
  c.faults = {ParseFault("slow-loader@node=3").value(), ParseFault("slow-nic@node=7").value(),
              ParseFault("slow-switch@switch=1").value()};
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).message();
}

}  // namespace
}  // namespace perftracker::sim
