#include "base/background.h"

#include <gtest/gtest.h>

#include <thread>

namespace perftracker {
namespace {

TEST(BackgroundTest, LowersOnlyTheCallingThread) {
  const int before = ThisThreadNice();
  int in_thread = -100;
  std::thread t([&] {
    ASSERT_TRUE(BecomeBackgroundThread("pt-test").ok());
    in_thread = ThisThreadNice();
  });
  t.join();
  EXPECT_EQ(in_thread, kBackgroundNice);
  EXPECT_EQ(ThisThreadNice(), before);  // the caller keeps its priority
  // A thread started after: the process's priority, not the lowered one.
  int later = -100;
  std::thread([&] { later = ThisThreadNice(); }).join();
  EXPECT_EQ(later, before);
}

}  // namespace
}  // namespace perftracker
