#include "cli/job_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/log.h"
#include "base/start_thread.h"

namespace perftracker::cli {

std::pair<int, int> OutputRelay::AddChild(bool with_stdout) {
  const int child = children_++;
  int out[2] = {-1, -1}, err[2];
  if (with_stdout && pipe2(out, O_CLOEXEC) != 0) return {-1, -1};
  if (pipe2(err, O_CLOEXEC) != 0) {
    if (with_stdout) {
      close(out[0]);
      close(out[1]);
    }
    return {-1, -1};
  }
  if (with_stdout) {
    ends_.push_back({out[0], STDOUT_FILENO, {}, child, {}});
    write_ends_.push_back(out[1]);
  }
  ends_.push_back({err[0], STDERR_FILENO, {}, child, {}});
  write_ends_.push_back(err[1]);
  return {out[1], err[1]};
}

bool IsProfilerChatter(std::string_view line) {
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  if (line.starts_with("USDT:") || line.starts_with("STAGE:")) return true;
  for (std::string_view source : {"ActivityProfiler", "CuptiActivityProfiler", "output_json.cpp",
                                  "ActivityProfilerController", "SyncActivityProfilerHandler"})
    if (line.find(source) != std::string_view::npos) return true;
  // c10's allocator warns while profile_memory records (a window on a rank whose memory grows),
  // and torch.profiler warns of its own cycles: the profiler's, not the job's.
  for (std::string_view text : {"profiler results will not include the deallocation event",
                                "Profiler clears events at the end of each cycle"})
    if (line.find(text) != std::string_view::npos) return true;
  return false;
}

void OutputRelay::Keep(End* e, std::string_view lines) {
  if (e->target != STDERR_FILENO) return;
  while (!lines.empty()) {
    const size_t nl = lines.find('\n');
    std::string_view line = lines.substr(0, nl);
    lines.remove_prefix(nl == std::string_view::npos ? lines.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || IsProfilerChatter(line)) continue;
    e->tail.emplace_back(line.substr(0, kErrorTailChars));
    if (e->tail.size() > kErrorTailLines) e->tail.pop_front();
  }
}

std::vector<std::string> OutputRelay::ErrorTail(int child) const {
  for (const End& e : ends_)
    if (e.child == child && e.target == STDERR_FILENO) return {e.tail.begin(), e.tail.end()};
  return {};
}

Status OutputRelay::Start() {
  for (int fd : write_ends_) close(fd);
  write_ends_.clear();
  if (ends_.empty()) return Status::Ok();
  return StartThread(&thread_, [this] { Loop(); });
}

void OutputRelay::Join() {
  if (!thread_.joinable()) return;
  auto until = Clock::now() + std::chrono::seconds(2);
  while (!done_ && Clock::now() < until) std::this_thread::sleep_for(kStatusInterval / 5);
  stop_ = true;
  thread_.join();
}

void OutputRelay::Loop() {
  std::vector<char> buf(64 << 10);
  std::vector<pollfd> fds;
  std::vector<End*> polled;
  while (!stop_) {
    fds.clear();
    polled.clear();
    for (End& e : ends_) {
      if (e.fd < 0) continue;
      fds.push_back({e.fd, POLLIN, 0});
      polled.push_back(&e);
    }
    if (fds.empty()) break;
    if (poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      End& e = *polled[i];
      ssize_t n = read(e.fd, buf.data(), buf.size());
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        Keep(&e, e.partial);
        if (!e.partial.empty()) log::Passthrough(e.target, e.partial + "\n");
        close(e.fd);
        e.fd = -1;
        continue;
      }
      e.partial.append(buf.data(), static_cast<size_t>(n));
      size_t nl = e.partial.rfind('\n');
      if (nl != std::string::npos) {
        Keep(&e, std::string_view(e.partial).substr(0, nl + 1));
        log::Passthrough(e.target, std::string_view(e.partial).substr(0, nl + 1));
        e.partial.erase(0, nl + 1);
      }
      if (e.partial.size() > kMaxPassthroughLine) {
        Keep(&e, e.partial);
        log::Passthrough(e.target, e.partial);
        e.partial.clear();
      }
    }
  }
  for (End& e : ends_)
    if (e.fd >= 0) close(e.fd);
  done_ = true;
}

std::string Elapsed(Clock::duration d) {
  long s = static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(d).count());
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string StatusLine(const agent::AgentProgress& p, Clock::duration elapsed, int ranks) {
  std::string line = fmt::format("perftracker {} | ", Elapsed(elapsed));
  if (p.iteration < 0) {
    line += "starting: the detector learns the iteration";
  } else {
    line += fmt::format("iteration {}, {:.1f} ms | detector: {}", p.iteration, p.iteration_ms,
                        p.trigger.empty() ? "watching" : p.trigger);
  }
  if (p.window > 0) {
    int of = std::max(ranks, p.ranks);
    line += p.window_uploads < of ? fmt::format(" | window {}: profiling ({}/{} uploaded)",
                                                p.window, p.window_uploads, of)
                                  : fmt::format(" | window {}: uploaded", p.window);
  }
  return line;
}

}  // namespace perftracker::cli
