#include "trace/pickle_writer.h"

#include <gtest/gtest.h>

#include <string>

#include "trace/pickle.h"

namespace perftracker::trace {
namespace {

TEST(PickleWriter, WritesTheHeadersExample) {
  PickleWriter w;
  w.OpenDict();
  w.String("a");
  w.Int(7);
  w.Close();
  auto out = w.Finish();
  ASSERT_TRUE(out.ok()) << out.status().message();
  const char kExpected[] =
      "\x80\x02}(X\x01\x00\x00\x00"
      "aJ\x07\x00\x00\x00u.";
  EXPECT_EQ(*out, std::string(kExpected, sizeof(kExpected) - 1));
}

TEST(PickleWriter, TheReaderReadsBackEveryKindOfValue) {
  PickleWriter w;
  w.OpenDict();
  w.String("entries");
  w.OpenList();
  w.OpenDict();
  w.String("pg");
  w.OpenTuple();
  w.String("0");
  w.String("default_pg");
  w.Close();
  w.String("seq");
  w.Int(-3);
  w.String("t");
  w.Int(1796331917087413857);  // time_created_ns: past 32 bits
  w.String("min");
  w.Int(INT64_MIN);
  w.String("f");
  w.Float(1.5);
  w.String("ok");
  w.Bool(true);
  w.String("no");
  w.Bool(false);
  w.String("none");
  w.None();
  w.String("name");
  w.String("caf\xc3\xa9 \xff");  // a byte no UTF-8 sequence starts
  w.Close();
  w.Close();
  w.String("empty");
  w.OpenList();
  w.Close();
  w.Close();
  auto bytes = w.Finish();
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto p = ParsePickle(*bytes, "w.pkl");
  ASSERT_TRUE(p.ok()) << p.status().message();
  const PickleValue root = p->root();
  ASSERT_TRUE(root.is_dict());
  EXPECT_EQ(root.get("empty").length(), 0u);
  const PickleValue e = root.get("entries").at(0);
  EXPECT_EQ(e.get("pg").type(), PickleNode::Type::kTuple);
  EXPECT_EQ(e.get("pg").at(1).str(), "default_pg");
  EXPECT_EQ(e.get("seq").integer(), -3);
  EXPECT_EQ(e.get("t").integer(), 1796331917087413857);
  EXPECT_EQ(e.get("min").integer(), INT64_MIN);
  EXPECT_DOUBLE_EQ(e.get("f").number(), 1.5);
  EXPECT_EQ(e.get("ok").integer(), 1);
  EXPECT_EQ(e.get("no").integer(), 0);
  EXPECT_TRUE(e.get("none").is_none());
  EXPECT_EQ(e.get("name").str(), "caf\xc3\xa9 \xef\xbf\xbd");
}

TEST(PickleWriter, AnUnbalancedPickleIsAnError) {
  {
    PickleWriter w;
    w.OpenList();
    EXPECT_FALSE(w.Finish().ok());  // left open
  }
  {
    PickleWriter w;
    w.OpenDict();
    w.String("key without a value");
    w.Close();
    EXPECT_FALSE(w.Finish().ok());
  }
  {
    PickleWriter w;
    w.Close();
    w.None();
    EXPECT_FALSE(w.Finish().ok());  // closed what was never opened
  }
  {
    PickleWriter w;
    EXPECT_FALSE(w.Finish().ok());  // nothing
    PickleWriter two;
    two.None();
    two.None();
    EXPECT_FALSE(two.Finish().ok());
  }
}

}  // namespace
}  // namespace perftracker::trace
