// Text bound for a terminal. Names in traces, in workers' messages and in summaries come from
// files and processes the user does not control; printed raw, an escape sequence among them
// moves the cursor, rewrites earlier lines or sets the window title. TerminalSafe shows every
// control character as a visible escape instead; line breaks and tabs stay, as the tool's own
// layout needs them.
#ifndef PERFTRACKER_BASE_TERMINAL_H_
#define PERFTRACKER_BASE_TERMINAL_H_

#include <cstdio>
#include <string>
#include <string_view>

namespace perftracker {

// Each C0 control byte but '\n' and '\t' (those too unless KEEP_LINES), DEL, and each C1
// control (U+0080..U+009F, as UTF-8 C2 80..C2 9F) becomes "\xHH" (the C1 ones "\u00HH"), and
// each Unicode bidirectional control (U+202A..U+202E, U+2066..U+2069, U+200E, U+200F, U+061C:
// they reorder what a terminal shows) "\uHHHH"; every other byte is kept.
//   "ok\x1b[2Jgone\n" -> "ok\\x1b[2Jgone\n"   (the ESC shown as the four characters \x1b)
// With KEEP_LINES false the result is one line (log::Printable: a host name, a reason).
std::string TerminalSafe(std::string_view text, bool keep_lines = true);

// Writes TerminalSafe(TEXT) to OUT.
void PutSafe(std::string_view text, std::FILE* out);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_TERMINAL_H_
