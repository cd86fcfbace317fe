#include "server/publisher.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "file_text.h"
#include "report/report.h"
#include "server/testing.h"

namespace perftracker::server {
namespace {

namespace fs = std::filesystem;

using testing_support::ReadText;

diagnose::Diagnosis WithFinding(int rank) {
  diagnose::Diagnosis d;
  d.job.ranks = {0, 1, 2, 3};
  diagnose::Finding f;
  f.category = diagnose::Category::kStraggler;
  f.ranks = {rank};
  f.summary = "rank " + std::to_string(rank) + " is slow";
  d.findings.push_back(f);
  return d;
}

TEST(Publisher, WritesTheWindowAndTheJobsReportRenderingTheJsonOnce) {
  const std::string dir = testing::TempDir("publisher");
  Publisher p(dir);
  const diagnose::Diagnosis d = WithFinding(2);
  auto job = std::make_shared<const pattern::CompactJob>();
  Publisher::Result r = p.Publish(3, d, false, job, "<html>3</html>");
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.json, report::RenderJson(d));
  EXPECT_EQ(ReadText(fs::path(dir) / "windows" / "3" / "diagnosis.json"), r.json);
  EXPECT_EQ(ReadText(fs::path(dir) / "diagnosis.json"), r.json);
  EXPECT_EQ(ReadText(fs::path(dir) / "windows" / "3" / "report.html"), "<html>3</html>");
  EXPECT_EQ(ReadText(fs::path(dir) / "report.html"), "<html>3</html>");
  EXPECT_EQ(p.latest().root_id, 3);
  ASSERT_TRUE(p.latest().diagnosis.has_value());
  EXPECT_EQ(p.latest().diagnosis->findings[0].summary, "rank 2 is slow");
  EXPECT_EQ(p.latest().job, job);
  EXPECT_EQ(p.latest().window_id, 3);
  // A hang: no patterns; the last window's stay for its page's views.
  p.latest().waits = {report::WaitGroup{}};
  ASSERT_TRUE(p.Publish(4, WithFinding(1), false, nullptr, "<html>4</html>").status.ok());
  EXPECT_EQ(p.latest().root_id, 4);
  EXPECT_EQ(p.latest().window_id, 3);
  EXPECT_EQ(p.latest().waits.size(), 1u);
  EXPECT_EQ(ReadText(fs::path(dir) / "report.html"), "<html>4</html>");
}

TEST(Publisher, AnAmendmentOfAnOlderReportOrAWindowThatProfiledNothingLeavesTheJobsReport) {
  const std::string dir = testing::TempDir("publisher_keep");
  Publisher p(dir);
  ASSERT_TRUE(p.Publish(1, WithFinding(1), false, nullptr, "one").status.ok());
  ASSERT_TRUE(p.Publish(2, WithFinding(2), false, nullptr, "two").status.ok());
  // Window 1 rewritten (a hang that was not one): its own folder only.
  ASSERT_TRUE(p.Publish(1, WithFinding(3), true, nullptr, "one again").status.ok());
  EXPECT_EQ(ReadText(fs::path(dir) / "windows" / "1" / "report.html"), "one again");
  EXPECT_EQ(ReadText(fs::path(dir) / "report.html"), "two");
  EXPECT_EQ(p.latest().root_id, 2);
  // Window 2 rewritten while it is the job's report: both.
  ASSERT_TRUE(p.Publish(2, WithFinding(0), true, nullptr, "two again").status.ok());
  EXPECT_EQ(ReadText(fs::path(dir) / "report.html"), "two again");
  EXPECT_EQ(p.latest().diagnosis->findings[0].summary, "rank 0 is slow");
  // A window no rank reported and nothing found: the report before it stays the job's.
  ASSERT_TRUE(p.Publish(5, diagnose::Diagnosis{}, false, nullptr, "empty").status.ok());
  EXPECT_EQ(ReadText(fs::path(dir) / "windows" / "5" / "report.html"), "empty");
  EXPECT_EQ(ReadText(fs::path(dir) / "report.html"), "two again");
  EXPECT_EQ(p.latest().root_id, 2);
}

TEST(Publisher, AFileThatCannotBeWrittenIsTheError) {
  const std::string dir = testing::TempDir("publisher_error");
  // A folder where the window's report file goes.
  fs::create_directories(fs::path(dir) / "windows" / "1" / "diagnosis.json.tmp");
  Publisher p(dir);
  Publisher::Result r = p.Publish(1, WithFinding(1), false, nullptr, "x");
  EXPECT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find("diagnosis.json"), std::string::npos) << r.status.message();
  EXPECT_FALSE(r.json.empty());  // still handed back for the store
}

TEST(Publisher, APageLinksItsWindowsTimelineWhereOneWasExported) {
  const std::string dir = testing::TempDir("publisher_page");
  Publisher p(dir);
  const diagnose::Diagnosis d = WithFinding(2);
  const std::string plain = p.RenderPage(d, nullptr, {}, {}, 5);
  EXPECT_NE(plain.find("perftracker: window 5 of " + dir), std::string::npos);
  EXPECT_EQ(plain.find("trace.json.gz"), std::string::npos);
  fs::create_directories(fs::path(dir) / "windows" / "5");
  std::ofstream(fs::path(dir) / "windows" / "5" / "trace.json.gz") << "x";
  EXPECT_NE(p.RenderPage(d, nullptr, {}, {}, 5).find("trace.json.gz"), std::string::npos);
  // The run's page (id 0) links the latest window's, by its path from the report folder.
  ASSERT_TRUE(
      p.Publish(5, d, false, std::make_shared<const pattern::CompactJob>(), "x").status.ok());
  EXPECT_NE(p.RenderPage(d, nullptr, {}, {}, 0).find("windows/5/trace.json.gz"), std::string::npos);
}

}  // namespace
}  // namespace perftracker::server
