// UTF-8 checks shared by every writer whose reader decodes strictly (JSON reports, pickles that
// Python loads): a sequence's length, and a string's valid form with U+FFFD for each bad byte.
//   Utf8SequenceLength("\xC3\xA9", 0) == 2; Utf8SequenceLength("\xC3", 0) == 0
//   AppendValidUtf8("a\xFFb", &out) appends "a\xEF\xBF\xBDb"
#ifndef PERFTRACKER_BASE_UTF8_H_
#define PERFTRACKER_BASE_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace perftracker {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid (overlong forms,
// surrogates and code points above U+10FFFF are invalid too).
size_t Utf8SequenceLength(std::string_view s, size_t i);

// S appended to *OUT with each byte that starts no valid sequence replaced by U+FFFD (a string
// cut inside a character, a file name in another encoding).
void AppendValidUtf8(std::string_view s, std::string* out);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_UTF8_H_
