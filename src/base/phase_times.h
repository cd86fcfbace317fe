// Wall time of a command's named phases, in the order they first ran, for `--stats`:
//
//   PhaseTimes t;
//   { ScopedPhase p(&t, "peer groups"); Group(); }
//   t.Add("read (thread-seconds)", 3.5);
//   t.Format()  // -> "peer groups 0.41 s, read (thread-seconds) 3.50 s"
//
// A phase timed twice adds up. Phases are timed on the calling thread around whatever parallel
// work they start; a parallel part's own split (read against decode) is added by name in
// thread-seconds. Not thread-safe: one thread owns it. A null PhaseTimes times nothing, so a
// caller that does not ask pays one branch.
#ifndef PERFTRACKER_BASE_PHASE_TIMES_H_
#define PERFTRACKER_BASE_PHASE_TIMES_H_

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace perftracker {

class PhaseTimes {
 public:
  void Add(std::string_view name, double seconds);
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }
  double Seconds(std::string_view name) const;  // 0 for a phase that never ran
  std::string Format() const;

 private:
  std::vector<std::pair<std::string, double>> phases_;
};

// Times its scope as phase NAME of TIMES (null: nothing). NAME must outlive it.
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimes* times, std::string_view name)
      : times_(times), name_(name), start_(std::chrono::steady_clock::now()) {}
  ~ScopedPhase() {
    if (times_ != nullptr)
      times_->Add(name_,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  PhaseTimes* times_;
  std::string_view name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_PHASE_TIMES_H_
