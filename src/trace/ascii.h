// ASCII text helpers shared by the trace reader's units: case folding for category names and
// file names, and prefix tests for marker names. Bytes outside A-Z are left as they are.
//   Lower('Q') == 'q'; EqualsIgnoreCase("Kernel", "kernel"); StartsWith("ProfilerStep#3", "Pro")
// Internal to the trace module.
#ifndef PERFTRACKER_TRACE_ASCII_H_
#define PERFTRACKER_TRACE_ASCII_H_

#include <string_view>

namespace perftracker::trace::internal {

inline char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Out of line (inline only for the one definition rule), as they were when they lived in the
// reader's one file: inlined, they grow KindFromName past what GCC inlines into the event loop,
// and Args is inlined there in its place (seen in the call graph of pass 2's ParseDocument).
[[gnu::noinline]] inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

[[gnu::noinline]] inline bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace perftracker::trace::internal

#endif  // PERFTRACKER_TRACE_ASCII_H_
