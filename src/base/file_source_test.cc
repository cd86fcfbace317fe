#include "base/file_source.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace perftracker {
namespace {

// One gzip member of `data` (zlib writes it; the source under test inflates with ISA-L).
std::string Gzip(const std::string& data, int level = 6) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Everything the source yields, read `chunk` bytes at a time; the error message if it fails.
std::string ReadAll(const std::string& path, size_t chunk, std::string* error) {
  auto src = OpenFileSource(path);
  if (!src.ok()) {
    *error = src.status().message();
    return "";
  }
  std::string out, buf(chunk, '\0');
  while (true) {
    StatusOr<size_t> n = (*src)->Read(buf.data(), chunk);
    if (!n.ok()) {
      *error = n.status().message();
      return out;
    }
    if (*n == 0) return out;
    out.append(buf.data(), *n);
  }
}

std::string Text(size_t n) {
  std::string s;
  for (size_t i = 0; s.size() < n; ++i)
    s += "{\"ph\": \"X\", \"name\": \"aten::op_" + std::to_string(i * 7919 % 1000) + "\"},\n";
  s.resize(n);
  return s;
}

TEST(GzipSourceTest, InflatesWhateverTheReadSize) {
  const std::string text = Text(3 << 20);
  const std::string path = Write("one.json.gz", Gzip(text, 1));
  for (size_t chunk : {1u, 7u, 4096u, 1u << 20, 8u << 20}) {
    std::string error;
    EXPECT_EQ(ReadAll(path, chunk, &error), text) << chunk;
    EXPECT_EQ(error, "") << chunk;
  }
}

TEST(GzipSourceTest, ReadsEveryMemberAndIgnoresTrailingGarbage) {
  const std::string a = Text(300000), b = "second member\n";
  const std::string path = Write("two.json.gz", Gzip(a) + Gzip(b) + "trailing junk");
  std::string error;
  EXPECT_EQ(ReadAll(path, 4096, &error), a + b);
  EXPECT_EQ(error, "");
}

TEST(GzipSourceTest, TruncatedAndCorruptDataAreErrors) {
  const std::string gz = Gzip(Text(1 << 20));
  std::string error;
  ReadAll(Write("cut.json.gz", gz.substr(0, gz.size() / 2)), 65536, &error);
  EXPECT_NE(error.find("truncated gzip stream"), std::string::npos) << error;

  std::string bad = gz;
  for (size_t i = bad.size() / 3; i < bad.size() / 3 + 64; ++i) bad[i] = static_cast<char>(~bad[i]);
  error.clear();
  ReadAll(Write("bad.json.gz", bad), 65536, &error);
  EXPECT_NE(error.find("corrupt gzip data near compressed byte"), std::string::npos) << error;

  std::string crc = gz;  // the trailer's CRC no longer matches the data
  crc[crc.size() - 8] = static_cast<char>(~crc[crc.size() - 8]);
  error.clear();
  ReadAll(Write("crc.json.gz", crc), 65536, &error);
  EXPECT_NE(error.find("checksum mismatch"), std::string::npos) << error;
}

TEST(ReadSmallFileTest, ReadsWholeFilesAndRefusesBigOnes) {
  const std::string path = ::testing::TempDir() + "/pt_small_file_" + std::to_string(::getpid());
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string data(3 << 20, 'x');
    std::fwrite(data.data(), 1, data.size(), f);
    std::fclose(f);
  }
  auto ok = ReadSmallFile(path, 4 << 20, "a test file");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), 3u << 20);
  auto big = ReadSmallFile(path, 2 << 20, "a test file");
  EXPECT_EQ(big.status().message(), path + ": over the 2 MiB a test file may have");
  std::remove(path.c_str());
  EXPECT_EQ(ReadSmallFile(path, 1, "x").status().message(),
            path + ": cannot read: No such file or directory");
}

}  // namespace
}  // namespace perftracker
