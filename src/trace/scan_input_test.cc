#include "trace/scan_input.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace perftracker::trace::internal {
namespace {

std::string Bytes(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + i % 26));
  return s;
}

TEST(ScanInputTest, AShortStreamIsOneScan) {
  const std::string text = Bytes(100);
  auto src = OpenMemorySource(text);
  ReaderTuning tuning;
  ScanInput in("t.json", tuning);
  std::vector<size_t> froms;
  ASSERT_TRUE(in.Feed(src.get(), nullptr, 0, [&](size_t from) {
                  froms.push_back(from);
                  EXPECT_EQ(in.View(0, 100), text);
                  return Status::Ok();
                }).ok());
  EXPECT_EQ(froms, std::vector<size_t>{0});
  EXPECT_EQ(in.total(), 100u);
}

TEST(ScanInputTest, AStreamIsSeenOnceInOrderAndKeptBytesStay) {
  const std::string text = Bytes(100);
  auto src = OpenMemorySource(text);
  ReaderTuning tuning;
  tuning.read_bytes = 16;
  ScanInput in("t.json", tuning);
  std::string seen;
  int calls = 0;
  bool kept = true;
  ASSERT_TRUE(in.Feed(src.get(), nullptr, 0, [&](size_t from) {
                  seen.append(in.data() + from, in.len() - from);
                  if (calls++ == 0) in.Keep(5);  // a value starts at byte 5
                  // What is kept is still there, however far the stream went, until dropped.
                  if (kept) {
                    EXPECT_EQ(in.View(5, in.total()), text.substr(5, in.total() - 5));
                  }
                  if (in.total() >= 60) {
                    in.Drop();
                    kept = false;
                  }
                  return Status::Ok();
                }).ok());
  EXPECT_EQ(seen, text);
  EXPECT_EQ(calls, 7);  // 100 bytes, 16 at a time
}

TEST(ScanInputTest, AKeptValueOverTheBoundIsAnError) {
  auto src = OpenMemorySource(Bytes(200));
  ReaderTuning tuning;
  tuning.read_bytes = 16;
  tuning.max_value_bytes = 20;
  ScanInput in("t.json", tuning);
  const Status s = in.Feed(src.get(), nullptr, 0, [&](size_t from) {
    if (from == 0) in.Keep(3);
    return Status::Ok();
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "t.json: malformed JSON at byte 3: a single value is larger than 0 MiB");
}

TEST(ScanInputTest, AMappedFileIsWalkedAReadAtATime) {
  const std::string text = Bytes(100) + std::string(64, ' ');  // the padding after the map
  auto src = OpenMemorySource(text);
  ReaderTuning tuning;
  tuning.read_bytes = 16;
  ScanInput in("t.json", tuning);
  std::vector<size_t> froms;
  ASSERT_TRUE(in.Feed(src.get(), text.data(), 100, [&](size_t from) {
                  froms.push_back(from);
                  EXPECT_EQ(in.base(), 0u);  // the whole map stays at hand
                  return Status::Ok();
                }).ok());
  EXPECT_EQ(froms, (std::vector<size_t>{0, 16, 32, 48, 64, 80, 96}));
  EXPECT_EQ(in.total(), 100u);
}

TEST(ScanInputTest, TheScansErrorEndsTheFeed) {
  auto src = OpenMemorySource(Bytes(100));
  ReaderTuning tuning;
  tuning.read_bytes = 16;
  ScanInput in("t.json", tuning);
  int calls = 0;
  const Status s = in.Feed(src.get(), nullptr, 0, [&](size_t) {
    return ++calls == 2 ? InvalidArgument("stop") : Status::Ok();
  });
  EXPECT_EQ(s.message(), "stop");
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace perftracker::trace::internal
