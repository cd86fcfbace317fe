#include "diagnose/peer_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace perftracker::diagnose::internal {
namespace {

using pattern::FunctionClass;
using pattern::FunctionPattern;
using pattern::RankSummary;

FunctionPattern TableFn(const std::string& name, FunctionClass c, trace::EventKind kind,
                        double us) {
  FunctionPattern f;
  f.name = name;
  f.kind = kind;
  f.fclass = c;
  f.per_iter_us = f.self_per_iter_us = us;
  f.calls_per_iter = 1;
  f.mean_us = us;
  f.iter_us.assign(20, static_cast<float>(us));
  return f;
}

// Four ranks of one role: 30 ms of matmul and 10 ms of all-reduce each, rank 2 60 ms of
// matmul; rank 3 lost its torch.profiler trace (only its Python part is there).
pattern::CompactJob TableJob() {
  pattern::CompactJob job;
  for (int r = 0; r < 4; ++r) {
    RankSummary s;
    s.rank = r;
    s.world_size = 4;
    s.host = "node";
    s.iteration_ms.assign(20, 100);
    s.functions.push_back(TableFn("aten::mm", FunctionClass::kCompute, trace::EventKind::kCpuOp,
                                  r == 2 ? 60000 : 30000));
    s.functions.push_back(TableFn("allreduce", FunctionClass::kCollective, trace::EventKind::kCpuOp,
                                  r == 2 ? 1000 : 10000));
    s.functions.push_back(
        TableFn("train_step", FunctionClass::kOther, trace::EventKind::kPythonFunction, 500));
    if (r == 3) s.missing_part = "torch";
    job.Add(std::move(s));
  }
  job.SortByRank();
  return job;
}

TEST(PeerTableTest, RowsTotalsAndComparisonsOfOneGroup) {
  const pattern::CompactJob job = TableJob();
  JobInfo info;
  info.iteration_ms_median = 100;
  const DiagnoseOptions o;
  const PeerTable t(job, {0, 1, 2, 3}, info, o);
  ASSERT_EQ(t.n(), 4u);
  ASSERT_EQ(t.rows().size(), 3u);
  const Row& mm = t.rows()[0];
  EXPECT_EQ(mm.proto->name, "aten::mm");
  EXPECT_EQ(mm.v[2], 60000);
  EXPECT_EQ(mm.v[0], 30000);
  // The member without its trace has no value for the trace's functions, nor totals: NaN,
  // which every comparison skips; its Python function still counts.
  EXPECT_TRUE(std::isnan(mm.v[3]));
  EXPECT_TRUE(std::isnan(t.own_cpu()[3]));
  EXPECT_TRUE(std::isnan(t.coll()[3]));
  EXPECT_EQ(t.rows()[2].v[3], 500);
  // Own CPU work holds the matmul and the Python function; collectives are apart.
  EXPECT_EQ(t.own_cpu()[2], 60500);
  EXPECT_EQ(t.own_cpu()[0], 30500);
  EXPECT_EQ(t.coll()[2], 1000);
  // Rank 2 does more own work while it waits least: above its peers on the matmul, the only
  // candidate; its peers are above on nothing of their own.
  ASSERT_EQ(t.members()[2].high_own.size(), 1u);
  EXPECT_EQ(t.members()[2].high_own[0].row, &mm);
  EXPECT_TRUE(t.members()[2].own_cpu.high);
  EXPECT_GT(t.members()[2].excess, 0);
  EXPECT_TRUE(t.members()[0].high_own.empty());
  // It arrives first at the all-reduce: its collective is below its peers'.
  ASSERT_EQ(t.members()[2].low_coll.size(), 1u);
  EXPECT_EQ(t.members()[2].low_coll[0].row, &t.rows()[1]);
  EXPECT_TRUE(t.members()[0].low_coll.empty());
  EXPECT_EQ(t.Candidates(), std::vector<size_t>{2});
  // No iteration-to-iteration noise: any excess is far beyond it.
  EXPECT_GT(t.RowZ(mm, 2, 30000), 10);
}

}  // namespace
}  // namespace perftracker::diagnose::internal
