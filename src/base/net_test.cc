#include "base/net.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

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

TEST(NetTest, ListenUnixSocketReplacesOnlyAStaleSocket) {
  char tmpl[] = "/tmp/pt_net_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, path = dir + "/s.sock";
  StatusOr<int> first = ListenUnixSocket(path, "test");
  ASSERT_TRUE(first.ok()) << first.status().message();
  // A live listener is not replaced.
  StatusOr<int> second = ListenUnixSocket(path, "test");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(), "test: another process listens on " + path);
  // Once it is gone, its file is stale: replaced.
  close(*first);
  StatusOr<int> third = ListenUnixSocket(path, "test");
  ASSERT_TRUE(third.ok()) << third.status().message();
  close(*third);
  // Not a socket, or a path sockaddr_un cannot hold: refused, the file left alone.
  const std::string file = dir + "/plain";
  std::ofstream(file) << "keep";
  EXPECT_EQ(ListenUnixSocket(file, "test").status().message(),
            "test: " + file + " exists and is not a socket; not replacing it");
  EXPECT_TRUE(std::filesystem::is_regular_file(file));
  EXPECT_FALSE(ListenUnixSocket(dir + "/" + std::string(120, 'x'), "test").ok());
  EXPECT_FALSE(ListenUnixSocket("", "test").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace perftracker
