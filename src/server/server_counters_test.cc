#include "server/server_counters.h"

#include <gtest/gtest.h>

namespace perftracker::server {
namespace {

TEST(ServerCountersTest, UploadsCountTheBytesOfAcceptedOnesOnly) {
  ServerCounters c;
  c.CountUpload(true, 100);
  c.CountUpload(false, 50);
  c.CountUpload(true, 1);
  EXPECT_EQ(c.uploads_accepted, 2u);
  EXPECT_EQ(c.uploads_refused, 1u);
  EXPECT_EQ(c.upload_bytes_total, 101u);
}

TEST(ServerCountersTest, TriggersOtherThanADetectorsAreAUsers) {
  ServerCounters c;
  for (const char* k : {"hang", "slowdown", "slowdown", "", "manual"}) c.CountTrigger(k);
  EXPECT_EQ(c.triggers_total["hang"], 1u);
  EXPECT_EQ(c.triggers_total["slowdown"], 2u);
  EXPECT_EQ(c.triggers_total["user"], 2u);
  EXPECT_EQ(c.triggers_total.size(), 3u);
}

TEST(ServerCountersTest, AnAmendedHangCountsItsFindingsNotItself) {
  diagnose::Diagnosis d;
  diagnose::Finding f;
  f.category = diagnose::Category::kHang;
  f.cause = diagnose::Cause::kSoftware;
  d.findings = {f, f};
  ServerCounters c;
  c.CountDiagnosis(d, "window");
  c.CountDiagnosis(d, "hang");
  c.CountDiagnosis(d, "amended");
  EXPECT_EQ(c.windows_diagnosed, 1);
  EXPECT_EQ(c.hangs_diagnosed, 1);
  EXPECT_EQ((c.findings_total[{"hang", "software"}]), 6u);
}

}  // namespace
}  // namespace perftracker::server
