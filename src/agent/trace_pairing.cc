#include "agent/trace_pairing.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "base/log.h"

namespace perftracker::agent {

namespace {

double Seconds(TracePairing::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool SameWindow(const std::optional<int64_t>& a, const std::optional<int64_t>& b) {
  return a && b && *a == *b;
}

// The worker names its torch trace after its Python trace: "rank-0.python.json" and
// "rank-0.python.json.torch.json".
bool IsTorchOf(const std::string& torch_path, const std::string& python_path) {
  return !python_path.empty() && torch_path == python_path + ".torch.json";
}

}  // namespace

TracePairing::Pending& TracePairing::NewPending() {
  if (pending_.size() >= kMaxPending) pending_.erase(pending_.begin());
  return pending_.emplace_back();
}

void TracePairing::PythonTrace(int pid, int rank, std::optional<int64_t> window,
                               const std::string& path, bool torch_expected, Time now) {
  Pending* entry = nullptr;
  for (Pending& e : pending_) {
    if (e.pid == pid && !e.have_python &&
        (IsTorchOf(e.torch_path, path) || SameWindow(e.window, window))) {
      entry = &e;
      break;
    }
  }
  if (entry == nullptr) entry = &NewPending();
  entry->pid = pid;
  entry->rank = rank;
  if (window) entry->window = window;
  entry->have_python = true;
  entry->python_path = path;
  entry->torch_expected = torch_expected;
  entry->python_at = now;
}

bool TracePairing::TorchTrace(int pid, int rank, std::optional<int64_t> window,
                              const std::string& path, const std::optional<std::string>& error,
                              Time now) {
  for (const Taken& t : taken_)
    if (t.pid == pid && (IsTorchOf(path, t.python_path) || SameWindow(t.window, window)))
      return false;
  Pending* entry = nullptr;
  for (Pending& e : pending_) {
    if (e.pid == pid && e.have_python && !e.torch_done &&
        (IsTorchOf(path, e.python_path) || SameWindow(e.window, window))) {
      entry = &e;
      break;
    }
  }
  if (entry == nullptr) {
    entry = &NewPending();
    entry->pid = pid;
    entry->rank = rank;
    entry->window = window;
  }
  entry->torch_done = true;
  entry->torch_path = error ? "" : path;
  entry->torch_error = error ? log::Printable(error->substr(0, 500)) : "";
  entry->torch_at = now;
  return true;
}

bool TracePairing::Done(const Pending& e, Time now, std::vector<Paired>* out) {
  Paired p;
  p.pid = e.pid;
  p.rank = e.rank;
  if (e.have_python) {
    if (e.torch_expected && !e.torch_done &&
        Seconds(now - e.python_at) < options_.torch_wait_seconds)
      return false;
    p.paths.push_back(e.python_path);
    if (e.torch_done && !e.torch_path.empty()) {
      p.paths.push_back(e.torch_path);
    } else if (e.torch_done) {
      p.missing_part = "torch.profiler";
      p.missing_why =
          e.torch_error.empty() ? "the worker could not write its trace" : e.torch_error;
    } else if (e.torch_expected) {
      p.missing_part = "torch.profiler";
      p.missing_why = fmt::format(
          "its trace did not arrive within {:.0f} s of the Python tracer's "
          "file",
          options_.torch_wait_seconds);
    }
    if (!e.torch_done) {
      // Its torch trace may still come: it is dropped then, not taken alone.
      if (taken_.size() >= kMaxRemembered) taken_.pop_front();
      taken_.push_back({e.pid, e.window, e.python_path});
    }
    out->push_back(std::move(p));
    return true;
  }
  if (Seconds(now - e.torch_at) < options_.orphan_torch_seconds) return false;
  if (!e.torch_path.empty()) {
    p.paths.push_back(e.torch_path);
    p.missing_part = "python";
    p.missing_why =
        fmt::format("the Python tracer's file did not arrive within {:.0f} s of the torch trace",
                    options_.orphan_torch_seconds);
    out->push_back(std::move(p));
  }
  return true;
}

void TracePairing::Reap(Time now, std::vector<Paired>* out) {
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const Pending& e) { return Done(e, now, out); }),
                 pending_.end());
}

}  // namespace perftracker::agent
