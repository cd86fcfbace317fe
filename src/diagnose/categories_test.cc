#include "diagnose/categories.h"

#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "diagnose/testing.h"

namespace perftracker::diagnose {
namespace {

std::string Doc() { return testing::SourceFile("docs/diagnosis-schema.md"); }

std::vector<std::string> Words(const char* s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The doc's row of one category: "| `name` | meaning | keys |".
std::string DocRow(const std::string& doc, const std::string& name) {
  const size_t at = doc.find("\n| `" + name + "` | ");
  if (at == std::string::npos) return "";
  return doc.substr(at + 1, doc.find('\n', at + 1) - at - 1);
}

TEST(CategoriesTest, NamesAreUniqueAndParseBack) {
  std::set<std::string> names;
  for (const CategoryInfo& c : kCategories) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
    EXPECT_EQ(ParseCategory(c.name), c.category) << c.name;
    EXPECT_STREQ(CategoryName(c.category), c.name);
    EXPECT_GT(std::string(c.meaning).size(), 10u) << c.name;
    for (char ch : std::string(c.name)) EXPECT_TRUE(islower(ch) || ch == '_') << c.name;
  }
  EXPECT_FALSE(ParseCategory("Straggler"));
  EXPECT_FALSE(ParseCategory(""));
  EXPECT_EQ(fmt::format("{}", Category::kDataLoader), "data_loader");
}

TEST(CategoriesTest, TheSchemaDocumentsEveryCategoryWithItsKeys) {
  const std::string doc = Doc();
  ASSERT_FALSE(doc.empty()) << "docs/diagnosis-schema.md not found";
  const size_t section = doc.find("## Categories");
  ASSERT_NE(section, std::string::npos);
  const std::string table = doc.substr(section);
  for (const CategoryInfo& c : kCategories) {
    const std::string row = DocRow(table, c.name);
    ASSERT_FALSE(row.empty()) << c.name << " has no row in docs/diagnosis-schema.md";
    EXPECT_NE(row.find(c.meaning), std::string::npos) << c.name << ": the meaning differs";
    for (const std::string& k : Words(c.evidence))
      EXPECT_NE(row.find("`" + k + "`"), std::string::npos) << c.name << ": key " << k;
  }
  // No row for a category the code does not have.
  size_t rows = 0;
  for (size_t at = table.find("\n| `"); at != std::string::npos; at = table.find("\n| `", at + 1))
    ++rows;
  EXPECT_EQ(rows, std::size(kCategories));
  const std::string common = table.substr(0, table.find("| category |"));
  for (const std::string& k : Words(kCommonEvidence))
    EXPECT_NE(common.find("`" + k + "`"), std::string::npos) << "common key " << k;
}

}  // namespace
}  // namespace perftracker::diagnose
