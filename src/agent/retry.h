// The agent's retry policy for uploads: a window summary or a hang's stacks is the only copy the
// server will get, so a transient failure (server restarting or overloaded, the reply lost to
// the deadline) is retried a few times with jittered, doubling waits; a refusal is final. The
// server refuses a second upload of the same (window, rank), so a retry after a lost reply does
// no harm. Header-only and free of gRPC so the policy is tested on its own.
#ifndef PERFTRACKER_AGENT_RETRY_H_
#define PERFTRACKER_AGENT_RETRY_H_

#include <algorithm>
#include <chrono>
#include <random>

namespace perftracker::agent {

struct RetryPolicy {
  int attempts = 5;
  std::chrono::milliseconds first_wait{500};
  std::chrono::milliseconds max_wait{8000};
};

// Calls `attempt()` (returning a status-like value) until it succeeds, fails for good, or the
// attempts run out. `transient(status)` says whether a failure is worth another try;
// `wait(duration)` sleeps between tries and returns false to give up (the agent is stopping).
// Returns the last status.
template <typename Attempt, typename Transient, typename Wait>
auto CallWithRetry(const RetryPolicy& policy, Attempt attempt, Transient transient, Wait wait) {
  // Jitter spreads out thousands of agents that lost the same server at the same moment.
  thread_local std::minstd_rand rng{std::random_device{}()};
  std::chrono::milliseconds backoff = policy.first_wait;
  for (int i = 1;; ++i) {
    auto status = attempt();
    if (status.ok() || i >= policy.attempts || !transient(status)) return status;
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    const auto pause = std::chrono::milliseconds(
        static_cast<long long>(static_cast<double>(backoff.count()) * jitter(rng)));
    if (!wait(pause)) return status;
    backoff = std::min(backoff * 2, policy.max_wait);
  }
}

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_RETRY_H_
