// A temporary folder for one test, removed with everything in it when the test ends. Short and
// under /tmp on purpose: a Unix socket path inside it must stay under 107 bytes.
//   TempDir dir("pt-sink");  // /tmp/pt-sink-XXXXXX
#ifndef PERFTRACKER_TESTS_SUPPORT_TEMP_DIR_H_
#define PERFTRACKER_TESTS_SUPPORT_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace perftracker::testing_support {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Empty when the folder could not be made.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace perftracker::testing_support

#endif  // PERFTRACKER_TESTS_SUPPORT_TEMP_DIR_H_
