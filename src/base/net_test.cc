#include "base/net.h"

#include <gtest/gtest.h>

namespace perftracker {
namespace {

// Off loopback a token needs TLS: the test of what counts as this machine.
TEST(NetTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:0"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:80"));
  EXPECT_TRUE(IsLoopbackAddress("localhost"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:80"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.2:80"));
  EXPECT_FALSE(IsLoopbackAddress("head:50551"));
}

}  // namespace
}  // namespace perftracker
