#include "trace/json_fields.h"

#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <utility>
#include <vector>

namespace perftracker::trace::internal {
namespace {

// Calls fn with the value `text` as simdjson On-Demand sees it (the value of a field).
template <typename Fn>
void WithValue(const std::string& text, Fn fn) {
  simdjson::padded_string json("{\"v\": " + text + "}");
  od::parser parser;
  od::document doc;
  ASSERT_EQ(parser.iterate(json).get(doc), simdjson::SUCCESS) << text;
  od::value v;
  ASSERT_EQ(doc.find_field("v").get(v), simdjson::SUCCESS) << text;
  fn(v);
}

// ReadInt's result for `text`, or "false".
std::string Int(const std::string& text) {
  std::string out = "unread";
  WithValue(text, [&](od::value& v) {
    int64_t i = -7;
    out = ReadInt(v, &i) ? std::to_string(i) : "false";
  });
  return out;
}

TEST(JsonFieldsTest, ReadInt) {
  EXPECT_EQ(Int("12"), "12");
  EXPECT_EQ(Int("-3"), "-3");
  EXPECT_EQ(Int("12.9"), "12");  // doubles truncate
  EXPECT_EQ(Int("-2.5e3"), "-2500");
  EXPECT_EQ(Int("18446744073709551615"), "9223372036854775807");  // past int64: halved
  EXPECT_EQ(Int("1e300"), "false");
  EXPECT_EQ(Int("\"12\""), "false");
  EXPECT_EQ(Int("null"), "false");
}

TEST(JsonFieldsTest, ReadIdHashesStrings) {
  EXPECT_EQ(HashId(""), 1469598103934665603);  // FNV-1a's offset basis
  EXPECT_NE(HashId("stream 7"), HashId("stream 8"));
  EXPECT_GE(HashId("\xff\xff\xff\xff"), 0);
  WithValue("\"stream 7\"", [](od::value& v) {
    int64_t id = 0;
    ASSERT_TRUE(ReadId(v, &id));
    EXPECT_EQ(id, HashId("stream 7"));
  });
  WithValue("42", [](od::value& v) {
    int64_t id = 0;
    ASSERT_TRUE(ReadId(v, &id));
    EXPECT_EQ(id, 42);
  });
  WithValue("[1]", [](od::value& v) {
    int64_t id = 5;
    EXPECT_FALSE(ReadId(v, &id));
    EXPECT_EQ(id, 5);
  });
}

std::string Text(const std::string& text) {
  std::string out = "unread";
  WithValue(text, [&](od::value& v) {
    std::string s = "unset";
    out = ReadText(v, &s) ? s : "false";
  });
  return out;
}

TEST(JsonFieldsTest, ReadText) {
  EXPECT_EQ(Text("\"nccl\""), "nccl");
  EXPECT_EQ(Text("\"a\\\"b\""), "a\"b");  // unescaped
  EXPECT_EQ(Text("0"), "0");              // pg_name as a number: its text
  EXPECT_EQ(Text("17 \n\t"), "17");       // without the whitespace after it
  EXPECT_EQ(Text("true"), "true");
}

std::vector<int> Ranks(const std::string& text) {
  std::vector<int> out = {-9};
  WithValue(text, [&](od::value& v) { ReadRanks(v, &out); });
  return out;
}

TEST(JsonFieldsTest, ReadRanks) {
  EXPECT_EQ(Ranks("[0, 1, 2]"), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(Ranks("[4, \"x\", 5.0]"), (std::vector<int>{4, 5}));
  EXPECT_EQ(Ranks("\"[3, 12]\""), (std::vector<int>{3, 12}));
  EXPECT_EQ(Ranks("\"99999999999\""), (std::vector<int>{INT_MAX}));
  EXPECT_EQ(Ranks("\"\""), (std::vector<int>{}));
  EXPECT_EQ(Ranks("7"), (std::vector<int>{}));  // cleared, nothing read
}

TEST(JsonFieldsTest, KeyIsMatchesRawKeys) {
  EXPECT_TRUE(KeyIs("name\": 1", "name"));
  EXPECT_FALSE(KeyIs("names\": 1", "name"));
  EXPECT_FALSE(KeyIs("nam\"e\": 1", "name"));
  EXPECT_TRUE(KeyIs("External id\"", "External id"));
}

TEST(JsonFieldsTest, IsValueError) {
  EXPECT_TRUE(IsValueError(simdjson::INCORRECT_TYPE));
  EXPECT_TRUE(IsValueError(simdjson::NUMBER_OUT_OF_RANGE));
  EXPECT_TRUE(IsValueError(simdjson::NO_SUCH_FIELD));
  EXPECT_FALSE(IsValueError(simdjson::TAPE_ERROR));
  EXPECT_FALSE(IsValueError(simdjson::T_ATOM_ERROR));
  EXPECT_FALSE(IsValueError(simdjson::SUCCESS));
}

// RepairUnescapedQuotes' result for `text`, and how many quotes it turned.
std::pair<std::string, size_t> Repaired(std::string text) {
  const size_t n = RepairUnescapedQuotes(text.data(), text.size());
  return {text, n};
}

TEST(JsonFieldsTest, RepairUnescapedQuotes) {
  using R = std::pair<std::string, size_t>;
  // torch 2.13's writer: a name with quotes, pretty-printed as Kineto writes it.
  EXPECT_EQ(Repaired("{\n  \"name\": \"say \"hi\" / back\",\n  \"ph\": \"X\"\n}"),
            R("{\n  \"name\": \"say 'hi' / back\",\n  \"ph\": \"X\"\n}", 2));
  // An odd number, a quote at either end of the name, and one right before the closing quote.
  EXPECT_EQ(Repaired(R"({"name": "say "hi", "a": ""x", "b": "x"""})"),
            R(R"({"name": "say 'hi", "a": "'x", "b": "x''"})", 4));
  // Valid JSON stays as it is: escaped quotes and backslashes, quotes before whitespace and the
  // end, strings as keys and in arrays, brackets and commas inside strings.
  for (const std::string& ok :
       {std::string(R"({"a\"b": "c\\", "d": ["e\"", "f]", "g,"] , "h" : "x\\\"y"})"),
        std::string("[\"a\" ,\t\"b\"\r\n]"), std::string(R"("text")"),
        std::string(R"({"name": "tail)")}) {
    EXPECT_EQ(Repaired(ok), R(ok, 0)) << ok;
  }
  // What it cannot tell from a closing quote: a quote followed by , : } or ] ends the string
  // (the name a", b): left as it is, still broken.
  EXPECT_EQ(Repaired(R"({"name": "a", b"})"), R(R"({"name": "a", b"})", 0));
}

}  // namespace
}  // namespace perftracker::trace::internal
