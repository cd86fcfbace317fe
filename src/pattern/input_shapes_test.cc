#include "pattern/input_shapes.h"

#include <gtest/gtest.h>

#include <string>

namespace perftracker::pattern {
namespace {

struct Parsed {
  bool ok = false;
  std::string text;
  double elements = -1;
};

Parsed Parse(std::string_view raw) {
  Parsed p;
  p.ok = ParseInputDims(raw, &p.text, &p.elements);
  return p;
}

TEST(InputShapesTest, CanonicalTextAndElements) {
  Parsed p = Parse("[[8, 96,128], [], [96, 128]]");
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.text, "[8, 96, 128], [], [96, 128]");
  EXPECT_EQ(p.elements, 8 * 96 * 128 + 96 * 128);
  // Kineto's own spacing and a 1.13 export's newlines read alike.
  EXPECT_EQ(Parse("[\n[64, 256],\n[256, 256]\n]").text, "[64, 256], [256, 256]");
}

TEST(InputShapesTest, PerInputElementsAndTheLargestRatio) {
  std::string text;
  double total = 0;
  std::vector<double> per_input;
  std::vector<int> ndims;
  ASSERT_TRUE(
      ParseInputDims("[[8, 96,128], [], [[2, 3], [4]]]", &text, &total, &per_input, &ndims));
  EXPECT_EQ(per_input, (std::vector<double>{8 * 96 * 128, 0, 10}));
  EXPECT_EQ(ndims, (std::vector<int>{3, 0, 3}));
  // A 4x larger activation beside the same weight: 1.4x the total, 4x the data.
  EXPECT_DOUBLE_EQ(DataInputRatio("[256, 512], [512, 512], [512]", "[64, 512], [512, 512], [512]"),
                   4.0);
  EXPECT_DOUBLE_EQ(DataInputRatio("[64, 512]", "[64, 512]"), 1.0);
  EXPECT_EQ(DataInputRatio("[64, 512], [512]", "[64, 512]"), 0);          // other inputs
  EXPECT_EQ(DataInputRatio("[64, 512], [51...", "[64, 512], [512]"), 0);  // a cut text
  EXPECT_EQ(DataInputRatio("[], [3]", "[], [0]"), 0);                     // nothing to divide by
  // Recorded: other call sites of one op, not the same call on more data.
  EXPECT_EQ(DataInputRatio("[262144], []", "[1, 256], []"), 0);  // a leak's fill vs small fills
  EXPECT_EQ(DataInputRatio("[256, 512], [512, 512]", "[512, 64], [64, 512]"), 0);  // mm fwd / bwd
}

TEST(InputShapesTest, ScalarsAndNoInputs) {
  Parsed p = Parse("[[], []]");
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.text, "[], []");
  EXPECT_EQ(p.elements, 0);
  p = Parse("[]");
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.text, "");
  EXPECT_EQ(p.elements, 0);
}

TEST(InputShapesTest, TensorListsCountEveryMember) {
  Parsed p = Parse("[[[2, 3], [4]], [5]]");
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.text, "[[2, 3], [4]], [5]");
  EXPECT_EQ(p.elements, 6 + 4 + 5);
}

TEST(InputShapesTest, LongListsAreCutButCounted) {
  std::string raw = "[";
  for (int i = 0; i < 100; ++i) raw += (i ? ", " : "") + std::string("[1000, 10]");
  raw += "]";
  Parsed p = Parse(raw);
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.text.size(), kMaxInputDimsText + 3);
  EXPECT_EQ(p.text.substr(p.text.size() - 3), "...");
  EXPECT_EQ(p.elements, 100 * 10000);
}

TEST(InputShapesTest, RejectsWhatIsNoShapeList) {
  for (const char* raw :
       {"[[1, 2]", "[[1, 2]]]", "[1, 2]", "[[\"a\"]]", "[[-1]]", "[[[[[1]]]]]", "[[1.5]]", "7"}) {
    std::string text = "kept";
    double elements = 3;
    EXPECT_FALSE(ParseInputDims(raw, &text, &elements)) << raw;
    EXPECT_EQ(text, "kept");
    EXPECT_EQ(elements, 3);
  }
}

TEST(InputShapesTest, TheCacheParsesEachRawTextOnceAndIsBounded) {
  InputDimsCache cache(2);
  const InputDimsCache::Parsed* a = cache.Find("[[64, 256], [256, 256]]");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(cache.Text(a->text), "[64, 256], [256, 256]");
  EXPECT_EQ(a->elements, 64 * 256 + 256 * 256);
  // Another spelling of the same shapes: the same text id.
  const InputDimsCache::Parsed* b = cache.Find("[[64,256],[256,256]]");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->text, a->text);
  EXPECT_EQ(cache.Find("[[64, 256], [256, 256]]"), a);
  EXPECT_EQ(cache.Find("[[1]]"), nullptr);  // a third raw text: past the bound
  InputDimsCache bad(4);
  EXPECT_EQ(bad.Find("[[\"x\"]]"), nullptr);  // no shape list
}

TEST(InputShapesTest, TheTallyKeepsTheCostliestShapeAndTheMeanElements) {
  ShapeTally t;
  EXPECT_EQ(t.Costliest(), 0u);
  t.Add(1, 100, 10);
  t.Add(1, 100, 10);
  t.Add(2, 400, 30);
  EXPECT_EQ(t.calls(), 3u);
  EXPECT_EQ(t.Costliest(), 2u);
  EXPECT_DOUBLE_EQ(t.MeanElements(), 200);
  for (uint32_t id = 3; id < 40; ++id) t.Add(id, 0, 1000);  // past kMaxShapes: counted, not kept
  EXPECT_EQ(t.calls(), 40u);
  EXPECT_GE(t.Costliest(), 3u);
  EXPECT_LT(t.Costliest(), 3u + ShapeTally::kMaxShapes);
}

}  // namespace
}  // namespace perftracker::pattern
