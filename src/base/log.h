// The process-wide log of the online parts (server, agent, launcher). It owns the terminal's
// stderr while they run, so that their lines and the launcher's live status line never mix.
//
// Every line has a level, which decides where it goes:
//   kDetail  what we need to see a job from the inside: registrations, every rank's detector
//            line, every upload. The log file always; the terminal only when verbose.
//   kEvent   what a user of `perftracker run` came for: the job started, a window opened, its
//            diagnosis, the end summary. The terminal and the log file.
//   kError   always the terminal, and the log file.
// Until Configure is called (the standalone `perftracker server` and `agent`, the tests) every
// level goes to stderr: a daemon's output is its log.
#ifndef PERFTRACKER_BASE_LOG_H_
#define PERFTRACKER_BASE_LOG_H_

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "base/status.h"

namespace perftracker::log {

enum class Level { kDetail, kEvent, kError };

struct Config {
  std::string file;      // every line, time-stamped; empty: no file
  bool verbose = false;  // kDetail on the terminal too
};

// Opens CONFIG.file (appending) and routes the levels as above. An error leaves the log as it
// was. Thread-safe, like everything here.
Status Configure(const Config& config);

// Writes TEXT (one or several lines) at LEVEL. SOURCE names the part ("server", "agent"): it
// prefixes terminal lines as "perftracker SOURCE: " ("perftracker: " when empty).
void Write(Level level, std::string_view source, std::string_view text);

// TEXT with control characters (terminal escapes, newlines) written as \xNN: for what other
// processes tell us (host names, paths, reasons) before it reaches a terminal or a log line.
std::string Printable(std::string_view text);

// The live status line: redrawn below the last line written, on a terminal only (stderr is a
// TTY); an empty LINE removes it. Cheap to call often.
void SetStatus(std::string_view line);
// Whether SetStatus shows anything (stderr is a terminal).
bool StatusShown();

// Text that came from elsewhere (a rank's output) and must appear above the status line, as it
// is, on FD (stdout or stderr): no prefix, not in the log file.
void Passthrough(int fd, std::string_view text);

template <typename... Args>
void Detail(std::string_view source, fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kDetail, source, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Event(std::string_view source, fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kEvent, source, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Error(std::string_view source, fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kError, source, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace perftracker::log

#endif  // PERFTRACKER_BASE_LOG_H_
