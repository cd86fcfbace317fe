#include "trace/scanned_values.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace perftracker::trace::internal {
namespace {

TEST(ScannedValueParserTest, DistributedInfo) {
  ScanResult out;
  ScannedValueParser p("t.json", &out);
  ASSERT_TRUE(p.Metadata("distributedInfo",
                         R"({"backend": "nccl", "rank": 3, "world_size": 8, "pg_config": [
                              {"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2]}]})",
                         40)
                  .ok());
  EXPECT_EQ(out.meta.rank, 3);
  EXPECT_TRUE(out.rank_from_trace);
  EXPECT_EQ(out.meta.world_size, 8);
  EXPECT_EQ(out.meta.backend, "nccl");
  ASSERT_EQ(out.meta.process_groups.size(), 1u);
  EXPECT_EQ(out.meta.process_groups[0].desc, "default_pg");
  EXPECT_EQ(out.meta.process_groups[0].size, 3);  // no pg_size: its ranks
  EXPECT_EQ(out.bad_metadata, 0u);
}

TEST(ScannedValueParserTest, AValueOutOfRangeIsCountedAndLeftUnset) {
  ScanResult out;
  ScannedValueParser p("t.json", &out);
  ASSERT_TRUE(p.Metadata("distributedInfo", R"({"rank": -4, "world_size": 0})", 40).ok());
  EXPECT_FALSE(out.rank_from_trace);
  EXPECT_EQ(out.bad_metadata, 2u);
  EXPECT_EQ(out.first_bad_metadata_byte, 40u);
  EXPECT_STREQ(out.first_bad_metadata, "a distributedInfo.rank from 0 to 1048575");
}

TEST(ScannedValueParserTest, BrokenJsonNamesTheTraceTheByteAndTheKey) {
  ScanResult out;
  ScannedValueParser p("t.json", &out);
  const Status s = p.Metadata("distributedInfo", R"({"rank": 3,, })", 12);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("t.json: malformed JSON at byte 12: in distributedInfo: ", 0), 0u)
      << s.message();
}

TEST(ScannedValueParserTest, TimeHostAndDevices) {
  ScanResult out;
  ScannedValueParser p("t.json", &out);
  ASSERT_TRUE(p.Metadata("baseTimeNanoseconds", "1700000000000000000", 0).ok());
  ASSERT_TRUE(p.Metadata("hostname", R"("node-7")", 0).ok());
  ASSERT_TRUE(p.Metadata("deviceProperties",
                         R"([{"id": 0, "name": "H100", "numSms": 132, "computeMajor": 9}])", 0)
                  .ok());
  EXPECT_EQ(out.meta.base_time_ns, 1700000000000000000);
  EXPECT_EQ(out.meta.host, "node-7");
  ASSERT_EQ(out.meta.devices.size(), 1u);
  EXPECT_EQ(out.meta.devices[0].name, "H100");
  EXPECT_EQ(out.meta.devices[0].num_sms, 132);
  EXPECT_EQ(out.meta.devices[0].compute_major, 9);
  EXPECT_TRUE(ScannedValueParser::IsMetadataKey("host_name"));
  EXPECT_FALSE(ScannedValueParser::IsMetadataKey("traceEvents"));
}

TEST(ScannedValueParserTest, StepMarkersOnTheCpuSideOnly) {
  ScanResult out;
  ScannedValueParser p("t.json", &out);
  p.StepCandidate(
      R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 10, "dur": 5,
          "tid": 3})");
  p.StepCandidate(
      R"({"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#7", "ts": 11, "dur": 5})");
  p.StepCandidate(R"({"ph": "B", "name": "ProfilerStep#8", "ts": 20})");            // not a span
  p.StepCandidate(R"({"ph": "X", "name": "ProfilerStep#x", "ts": 20, "dur": 1})");  // no number
  p.StepCandidate(R"({"ph": "X", "name": "ProfilerStep#9", "ts": )");  // broken: pass 2's
  p.StepCandidate(R"({"ph": "X", "name": "Optimizer.step#SGD.step", "ts": 30, "dur": 2})");
  p.StepCandidate(R"({"ph": "X", "name": "issue #12", "ts": 30, "dur": 2})");
  ASSERT_EQ(out.meta.profiler_steps.size(), 1u);
  EXPECT_EQ(out.meta.profiler_steps[0].step, 7);
  EXPECT_DOUBLE_EQ(out.meta.profiler_steps[0].ts_us, 10);
  EXPECT_DOUBLE_EQ(out.meta.profiler_steps[0].dur_us, 5);
  EXPECT_EQ(out.meta.profiler_steps[0].tid, 3);
  ASSERT_EQ(out.meta.optimizer_steps.size(), 1u);
  EXPECT_DOUBLE_EQ(out.meta.optimizer_steps[0].ts_us, 30);
}

}  // namespace
}  // namespace perftracker::trace::internal
