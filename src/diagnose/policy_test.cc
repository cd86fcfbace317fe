#include "diagnose/policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "diagnose/diagnose.h"
#include "diagnose/testing.h"

namespace perftracker::diagnose::policy {
namespace {

std::string Doc() { return testing::SourceFile("docs/diagnosis.md"); }

TEST(PolicyTest, EveryNumberIsDocumentedWithItsValue) {
  const std::string doc = Doc();
  ASSERT_FALSE(doc.empty()) << "docs/diagnosis.md not found";
  for (const Entry& e : kTable) {
    const std::string row = std::string("| `") + e.name + "` | ";
    const size_t at = doc.find(row);
    ASSERT_NE(at, std::string::npos) << e.name << " is not in docs/diagnosis.md";
    // The row's value is the table's (a changed number needs its documentation changed too).
    const size_t end = doc.find('|', at + row.size());
    const double documented = std::stod(doc.substr(at + row.size(), end - at - row.size()));
    EXPECT_DOUBLE_EQ(documented, e.value) << e.name;
  }
}

TEST(PolicyTest, NamesAreUniqueAndEveryEntryHasAReason) {
  std::set<std::string> names;
  for (const Entry& e : kTable) {
    EXPECT_TRUE(names.insert(e.name).second) << e.name;
    EXPECT_GT(std::string(e.reason).size(), 20u) << e.name;
    EXPECT_TRUE(std::isfinite(e.value)) << e.name;
  }
  EXPECT_EQ(names.size(), kTableSize);
}

TEST(PolicyTest, UserOptionsDefaultToThePolicy) {
  DiagnoseOptions o;
  EXPECT_EQ(o.min_fraction, kMinFraction);
  EXPECT_EQ(o.expected_busbw_gbps, kExpectedBusbwGbps);
  EXPECT_EQ(o.mad_k, kMadK);
  EXPECT_LT(kConfidenceLateArrival, kConfident);
  EXPECT_GE(kConfidenceTimingOnly, kConfident);
}

}  // namespace
}  // namespace perftracker::diagnose::policy
