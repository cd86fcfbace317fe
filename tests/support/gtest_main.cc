// main() of every unit test binary: GoogleTest's, plus the project's rule that no test skips
// silently. A test that skips (GTEST_SKIP: a file or tool it needs is missing) makes the binary
// exit with kSkipReturnCode, which CMake declares as SKIP_RETURN_CODE, so ctest's summary counts
// it as skipped instead of passed; under CI=true a skip is a failure.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// ctest's conventional "skipped" exit status (automake uses the same number).
constexpr int kSkipReturnCode = 77;

bool InCi() {
  const char* ci = std::getenv("CI");
  if (ci == nullptr || *ci == '\0') return false;
  return std::strcmp(ci, "0") != 0 && strcasecmp(ci, "false") != 0 && strcasecmp(ci, "no") != 0;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  if (rc != 0) return rc;
  int skipped = testing::UnitTest::GetInstance()->skipped_test_count();
  if (skipped == 0) return 0;
  if (InCi()) {
    std::fprintf(stderr, "%d test(s) skipped under CI=true: a required part is missing\n", skipped);
    return 1;
  }
  std::fprintf(stderr, "%d test(s) skipped\n", skipped);
  return kSkipReturnCode;
}
