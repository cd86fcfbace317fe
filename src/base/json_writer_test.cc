#include "base/json_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace perftracker {
namespace {

std::string Quote(std::string_view s) {
  std::string out;
  AppendJsonString(s, &out);
  return out;
}

TEST(JsonWriterTest, NestedCompact) {
  JsonWriter w;
  w.BeginObject().Key("a").Int(1).Key("b").BeginArray().String("x").Bool(true).Null().EndArray();
  w.Key("c").BeginObject().EndObject().Key("d").BeginArray().EndArray().EndObject();
  EXPECT_EQ(w.str(), R"({"a":1,"b":["x",true,null],"c":{},"d":[]})");
}

TEST(JsonWriterTest, Pretty) {
  JsonWriter w(2);
  w.BeginObject().Key("a").BeginArray().Int(1).Int(2).EndArray().Key("e").BeginObject().EndObject();
  w.EndObject();
  EXPECT_EQ(w.str(), "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"e\": {}\n}");
}

TEST(JsonWriterTest, EscapesQuotesBackslashAndControls) {
  EXPECT_EQ(Quote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(Quote("\n\t\r\b\f"), R"("\n\t\r\b\f")");
  EXPECT_EQ(Quote(std::string_view("\x01\x1f\x7f\0", 4)), R"("\u0001\u001f\u007f\u0000")");
}

TEST(JsonWriterTest, KeepsValidUtf8ReplacesInvalid) {
  EXPECT_EQ(Quote("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "\"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\"");
  EXPECT_EQ(Quote("a\xFF"
                  "b"),
            "\"a\xEF\xBF\xBD"
            "b\"");
  EXPECT_EQ(Quote("\xC3"), "\"\xEF\xBF\xBD\"");                                  // truncated
  EXPECT_EQ(Quote("\xC0\xAF"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");                  // overlong
  EXPECT_EQ(Quote("\xED\xA0\x80"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");  // surrogate
}

TEST(JsonWriterTest, Numbers) {
  EXPECT_EQ(FormatJsonNumber(0), "0");
  EXPECT_EQ(FormatJsonNumber(-0.0), "0");
  EXPECT_EQ(FormatJsonNumber(42), "42");
  EXPECT_EQ(FormatJsonNumber(1048576), "1048576");
  EXPECT_EQ(FormatJsonNumber(30.900000000000002), "30.9");
  EXPECT_EQ(FormatJsonNumber(0.125), "0.125");
  EXPECT_EQ(FormatJsonNumber(1e-7), "1e-07");
  EXPECT_EQ(FormatJsonNumber(1e300), "1e+300");
  EXPECT_EQ(FormatJsonNumber(std::nan("")), "null");
  EXPECT_EQ(FormatJsonNumber(std::numeric_limits<double>::infinity()), "null");
  JsonWriter w;
  w.BeginArray().Number(-std::numeric_limits<double>::infinity()).Number(2.5).EndArray();
  EXPECT_EQ(w.str(), "[null,2.5]");
}

}  // namespace
}  // namespace perftracker
