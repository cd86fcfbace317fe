#include "trace/block_classifier.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "trace/reader_internal.h"

namespace perftracker::trace::internal {
namespace {

// `text` in a buffer of whole blocks plus kPad, the rest spaces: the classifiers read all of it.
std::vector<unsigned char> Blocks(const std::string& text, size_t blocks) {
  std::vector<unsigned char> buf(64 * blocks + kPad, ' ');
  std::memcpy(buf.data(), text.data(), text.size());
  return buf;
}

// The masks of one block, byte by byte.
BlockMasks Reference(const unsigned char* p) {
  BlockMasks m;
  bool in_string = false;
  for (int i = 0; i < 64; ++i) {
    const uint64_t bit = uint64_t{1} << i;
    if (p[i] == '"') {
      m.quote |= bit;
      in_string = !in_string;
    }
    if (p[i] == '\\') m.backslash |= bit;
    if (p[i] == '{' || p[i] == '}' || p[i] == '[' || p[i] == ']') m.bracket |= bit;
    if (p[i] == '#') m.hash |= bit;
    if (in_string) m.quote_prefix |= bit;
  }
  return m;
}

std::vector<int> SupportedLevels() {
  std::vector<int> levels;
  for (int level = 0; level <= 2; ++level) {
    if (ClassifierSupported(level)) levels.push_back(level);
  }
  return levels;
}

TEST(BlockClassifierTest, HeaderExample) {
  const auto buf = Blocks(R"({"n":"a#b"})", 1);
  for (int level : SupportedLevels()) {
    BlockMasks m;
    Classifier(level)(buf.data(), 1, &m);
    EXPECT_EQ(m.quote, 0x22au) << level;
    EXPECT_EQ(m.bracket, 0x401u) << level;
    EXPECT_EQ(m.hash, 0x80u) << level;
    EXPECT_EQ(m.backslash, 0u) << level;
    EXPECT_EQ(m.quote_prefix, 0x1e6u) << level;
  }
}

// Every classifier this CPU runs agrees with the byte-by-byte reference on runs of blocks made
// of the bytes that matter, bytes with the 0x20 bit that folds '[' onto '{', and others.
TEST(BlockClassifierTest, EveryClassifierMatchesTheReference) {
  const std::string alphabet = "\"\\{}[]#a :,{[;=\x7b\x5b\xdb\xfb\x1b";
  std::mt19937 rng(17);
  constexpr size_t kBlocks = 8;
  for (int round = 0; round < 50; ++round) {
    std::string text(64 * kBlocks, ' ');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    const auto buf = Blocks(text, kBlocks);
    for (int level : SupportedLevels()) {
      BlockMasks got[kBlocks];
      Classifier(level)(buf.data(), kBlocks, got);
      for (size_t b = 0; b < kBlocks; ++b) {
        const BlockMasks want = Reference(buf.data() + 64 * b);
        ASSERT_EQ(got[b].quote, want.quote) << level << "/" << b;
        ASSERT_EQ(got[b].backslash, want.backslash) << level << "/" << b;
        ASSERT_EQ(got[b].bracket, want.bracket) << level << "/" << b;
        ASSERT_EQ(got[b].hash, want.hash) << level << "/" << b;
        ASSERT_EQ(got[b].quote_prefix, want.quote_prefix) << level << "/" << b;
      }
    }
  }
}

TEST(BlockClassifierTest, Selection) {
  EXPECT_NE(Classifier(0), nullptr);  // the portable one runs everywhere
  EXPECT_TRUE(ClassifierSupported(0));
  EXPECT_EQ(Classifier(3), BestClassifier());  // a level past the known ones: the best
  EXPECT_EQ(BestClassifier(), Classifier(-1));
  ASSERT_NE(BestClassifier(), nullptr);
  // The best is the widest this CPU runs.
  const std::vector<int> levels = SupportedLevels();
  EXPECT_EQ(BestClassifier(), Classifier(levels.back()));
}

TEST(BlockClassifierTest, PrefixXor) {
  EXPECT_EQ(PrefixXor(0), 0u);
  EXPECT_EQ(PrefixXor(0b1001), 0b0111u);
  EXPECT_EQ(PrefixXor(0b100010), 0b011110u);
  EXPECT_EQ(PrefixXor(1), ~uint64_t{0});  // an unclosed quote runs to the end of the block
  EXPECT_EQ(PrefixXor(uint64_t{1} << 63), uint64_t{1} << 63);
}

// The bytes escaped in `text`, split into blocks of 64 as the scanner sees them.
std::string EscapedByBlocks(const std::string& text) {
  std::string out(text.size(), '.');
  uint64_t carry = 0;
  for (size_t at = 0; at < text.size(); at += 64) {
    const size_t avail = std::min<size_t>(64, text.size() - at);
    uint64_t backslash = 0;
    for (size_t i = 0; i < avail; ++i) {
      if (text[at + i] == '\\') backslash |= uint64_t{1} << i;
    }
    uint64_t next = 0;
    const uint64_t escaped = EscapedBytes(backslash, carry, avail, &next);
    for (size_t i = 0; i < avail; ++i) {
      if ((escaped >> i) & 1) out[at + i] = 'e';
    }
    carry = next;
  }
  return out;
}

std::string EscapedByBytes(const std::string& text) {
  std::string out(text.size(), '.');
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (escaped) {
      out[i] = 'e';
      escaped = false;
    } else if (text[i] == '\\') {
      escaped = true;
    }
  }
  return out;
}

TEST(BlockClassifierTest, EscapedBytes) {
  uint64_t next = 7;
  // `\\\x`: the first backslash escapes the second, the third escapes the x.
  EXPECT_EQ(EscapedBytes(0b0111, 0, 4, &next), 0b1010u);
  EXPECT_EQ(next, 0u);
  // A backslash escaped by the block before escapes nothing.
  EXPECT_EQ(EscapedBytes(0b1, 1, 64, &next), 0b1u);
  EXPECT_EQ(next, 0u);
  // A backslash in the last byte escapes the next block's first.
  EXPECT_EQ(EscapedBytes(uint64_t{1} << 63, 0, 64, &next), 0u);
  EXPECT_EQ(next, 1u);
  // ... and in the last valid byte of a short block, the byte after it.
  EXPECT_EQ(EscapedBytes(0b100, 0, 3, &next), 0b1000u);
  EXPECT_EQ(next, 1u);

  std::mt19937 rng(3);
  for (int round = 0; round < 200; ++round) {
    std::string text(1 + rng() % 300, 'a');
    for (char& c : text) {
      if (rng() % 3 != 0) c = '\\';
    }
    ASSERT_EQ(EscapedByBlocks(text), EscapedByBytes(text)) << text.size();
  }
}

TEST(BlockClassifierTest, ByteSkips) {
  const std::string text = "abc,def#gh\\ij\"k{lmnopqrstuvwxyz";
  std::vector<unsigned char> buf(text.size() + kPad, ' ');
  std::memcpy(buf.data(), text.data(), text.size());
  const unsigned char* p = buf.data();
  const unsigned char* end = p + text.size();
  EXPECT_EQ(SkipInString(p, end) - p, 7);        // '#'
  EXPECT_EQ(SkipInString(p + 8, end) - p, 10);   // '\\'
  EXPECT_EQ(SkipInString(p + 11, end) - p, 13);  // '"'
  EXPECT_EQ(SkipOrdinary(p, end) - p, 13);       // '"' before '{'
  EXPECT_EQ(SkipOrdinary(p + 14, end) - p, 15);  // '{'
  EXPECT_EQ(SkipInString(p, p + 5), p + 5);      // nothing before the end, past it not seen
  EXPECT_EQ(SkipOrdinary(p + 16, end), end);
}

TEST(BlockClassifierTest, ByteTables) {
  EXPECT_EQ(kTables.cls[' '], kWs);
  EXPECT_EQ(kTables.cls['\n'], kWs);
  EXPECT_EQ(kTables.cls['['], kOpen);
  EXPECT_EQ(kTables.cls['}'], kClose);
  EXPECT_EQ(kTables.cls[','], kComma);
  EXPECT_EQ(kTables.cls[':'], kColon);
  EXPECT_EQ(kTables.cls['"'], kQuote);
  EXPECT_EQ(kTables.cls['a'], kOrd);
  EXPECT_EQ(kTables.fast[','], kOrd);  // inside a value only quotes and brackets stop
  EXPECT_EQ(kTables.fast[']'], kClose);
  EXPECT_EQ(kTables.str['#'], 1);
  EXPECT_EQ(kTables.str['{'], 0);
}

}  // namespace
}  // namespace perftracker::trace::internal
