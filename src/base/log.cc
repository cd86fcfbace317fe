#include "base/log.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "base/terminal.h"

namespace perftracker::log {
namespace {

// The status line never wraps: a wrapped line cannot be erased with one carriage return.
constexpr size_t kDefaultTerminalWidth = 100;

struct State {
  std::mutex mu;
  bool configured = false;
  bool verbose = false;
  std::FILE* file = nullptr;
  std::string status;
  bool status_drawn = false;
  int tty = -1;  // -1: not asked yet
};

State& S() {
  static State* s = new State();  // never destroyed: threads may log during exit
  return *s;
}

bool Tty(State& s) {
  if (s.tty < 0) s.tty = isatty(STDERR_FILENO) ? 1 : 0;
  return s.tty == 1;
}

size_t TerminalWidth() {
  winsize w{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 1) return w.ws_col - 1;
  return kDefaultTerminalWidth;
}

// Called with s.mu held.
void EraseStatus(State& s) {
  if (!s.status_drawn) return;
  std::fputs("\r\033[K", stderr);
  s.status_drawn = false;
}

// Called with s.mu held.
void DrawStatus(State& s) {
  if (s.status.empty() || !Tty(s)) return;
  std::string line = s.status.substr(0, TerminalWidth());
  std::fputs("\r\033[K", stderr);
  std::fputs(line.c_str(), stderr);
  s.status_drawn = true;
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kDetail:
      return "detail";
    case Level::kEvent:
      return "event";
    case Level::kError:
      return "error";
  }
  return "?";
}

// Called with s.mu held.
void WriteFile(State& s, Level level, std::string_view source, std::string_view text) {
  if (s.file == nullptr) return;
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() || end < text.size())
      std::fprintf(s.file, "%s.%03d %-6s %.*s%s%.*s\n", stamp, ms, LevelName(level),
                   static_cast<int>(source.size()), source.data(), source.empty() ? "" : ": ",
                   static_cast<int>(line.size()), line.data());
    if (end == text.size()) break;
    start = end + 1;
  }
  std::fflush(s.file);
}

}  // namespace

Status Configure(const Config& config) {
  State& s = S();
  std::FILE* f = nullptr;
  if (!config.file.empty()) {
    // e: close-on-exec; the ranks the launcher starts would inherit the log otherwise.
    f = std::fopen(config.file.c_str(), "ae");
    if (f == nullptr)
      return InvalidArgument(config.file + ": cannot open the log file: " + std::strerror(errno));
  }
  std::lock_guard lk(s.mu);
  if (s.file != nullptr) std::fclose(s.file);
  s.file = f;
  s.verbose = config.verbose;
  s.configured = true;
  return Status::Ok();
}

void Write(Level level, std::string_view source, std::string_view text) {
  State& s = S();
  std::lock_guard lk(s.mu);
  WriteFile(s, level, source, text);
  bool terminal = !s.configured || s.verbose || level != Level::kDetail;
  if (!terminal) return;
  EraseStatus(s);
  std::string out = source.empty() ? "perftracker: " : fmt::format("perftracker {}: ", source);
  if (level == Level::kError && s.configured) out += "error: ";
  out += TerminalSafe(text);
  if (out.empty() || out.back() != '\n') out.push_back('\n');
  std::fputs(out.c_str(), stderr);
  DrawStatus(s);
  std::fflush(stderr);
}

void SetStatus(std::string_view line) {
  State& s = S();
  std::lock_guard lk(s.mu);
  if (s.status == line) return;
  s.status = std::string(line);
  if (!Tty(s)) return;
  EraseStatus(s);
  DrawStatus(s);
  std::fflush(stderr);
}

bool StatusShown() {
  State& s = S();
  std::lock_guard lk(s.mu);
  return Tty(s);
}

void Passthrough(int fd, std::string_view text) {
  State& s = S();
  std::lock_guard lk(s.mu);
  EraseStatus(s);
  std::fflush(stderr);
  while (!text.empty()) {
    ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the terminal is gone: nothing to tell anyone
    text.remove_prefix(static_cast<size_t>(n));
  }
  DrawStatus(s);
  std::fflush(stderr);
}

std::string Printable(std::string_view text) { return TerminalSafe(text, /*keep_lines=*/false); }

}  // namespace perftracker::log
