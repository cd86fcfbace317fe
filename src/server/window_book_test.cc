#include "server/window_book.h"

#include <gtest/gtest.h>

#include <memory>

namespace perftracker::server {
namespace {

std::unique_ptr<Window> NewWindow(int64_t id) {
  WindowSpec spec;
  spec.id = id;
  spec.iterations = 10;
  return std::make_unique<Window>(spec, std::set<int>{0, 1}, Window::Clock::now());
}

TEST(WindowBookTest, WindowsAndHangsShareOneNumberingThatARestartContinues) {
  WindowBook book;
  EXPECT_EQ(book.NextId(), 1);
  EXPECT_EQ(book.NextId(), 2);  // a hang's
  book.UsedId(9);               // DIR/windows/9 from before a restart
  book.UsedId(4);
  EXPECT_EQ(book.NextId(), 10);
  EXPECT_EQ(book.last_id(), 10);
}

TEST(WindowBookTest, FindsWhatItHolds) {
  WindowBook book;
  Window& w = book.Add(NewWindow(book.NextId()));
  EXPECT_EQ(book.Find(1), &w);
  EXPECT_EQ(book.Find(2), nullptr);
  EXPECT_EQ(book.windows().size(), 1u);
}

TEST(WindowBookTest, KeepsTheNewestClosedWindowsAndTheOneAskedFor) {
  WindowBook book;
  const int64_t n = static_cast<int64_t>(WindowBook::kKeptClosedWindows) + 5;
  for (int64_t k = 1; k <= n; ++k) book.Add(NewWindow(book.NextId()));
  for (int64_t k = 1; k < n; ++k) book.Find(k)->Seal();  // the newest stays open
  book.ForgetOldClosed(/*keep=*/2);
  // Open: n. Closed, newest first: n-1 .. n-16 kept; 2 kept as asked; the rest forgotten.
  EXPECT_NE(book.Find(n), nullptr);
  EXPECT_NE(book.Find(n - static_cast<int64_t>(WindowBook::kKeptClosedWindows)), nullptr);
  EXPECT_EQ(book.Find(n - static_cast<int64_t>(WindowBook::kKeptClosedWindows) - 1), nullptr);
  EXPECT_NE(book.Find(2), nullptr);
  EXPECT_EQ(book.Find(1), nullptr);
  EXPECT_EQ(book.windows().size(), WindowBook::kKeptClosedWindows + 2);
}

TEST(WindowBookTest, MarksKeepTheNewest) {
  WindowBook book;
  for (size_t k = 0; k < WindowBook::kMaxMarks + 3; ++k)
    book.AddMark({static_cast<int64_t>(k), 0, 1, "periodic"});
  ASSERT_EQ(book.marks().size(), WindowBook::kMaxMarks);
  EXPECT_EQ(book.marks().front().id, 3);
  EXPECT_EQ(book.marks().back().id, static_cast<int64_t>(WindowBook::kMaxMarks + 2));
}

}  // namespace
}  // namespace perftracker::server
