// The whole of a file as text, for tests that check what the code wrote (empty when it cannot be
// read).
//   EXPECT_EQ(testing_support::ReadText(path), "hello");
#ifndef PERFTRACKER_TESTS_SUPPORT_FILE_TEXT_H_
#define PERFTRACKER_TESTS_SUPPORT_FILE_TEXT_H_

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace perftracker::testing_support {

inline std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace perftracker::testing_support

#endif  // PERFTRACKER_TESTS_SUPPORT_FILE_TEXT_H_
