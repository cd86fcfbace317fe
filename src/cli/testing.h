// Test helpers for the CLI's steps that read the environment (Slurm's variables, PYTHONPATH):
// a variable set or unset for one test's scope, restored after it.
#ifndef PERFTRACKER_CLI_TESTING_H_
#define PERFTRACKER_CLI_TESTING_H_

#include <stdlib.h>

#include <optional>
#include <string>

namespace perftracker::cli::testing {

class ScopedEnv {
 public:
  // VALUE null: NAME is unset for the scope.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace perftracker::cli::testing

#endif  // PERFTRACKER_CLI_TESTING_H_
