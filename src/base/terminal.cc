#include "base/terminal.h"

#include <fmt/format.h>

#include <cstdint>

namespace perftracker {
namespace {

// The code point of a Unicode bidirectional control at TEXT[I] (UTF-8), or 0: the embeddings and
// overrides U+202A..U+202E, the isolates U+2066..U+2069, the marks U+200E, U+200F and U+061C.
// Printed raw they reorder what the terminal shows (a file name that reads as another).
//   BidiControlAt("a\xe2\x80\xae", 1) == 0x202e;  BidiControlAt("\xe2\x80\x94", 0) == 0 (a dash)
char32_t BidiControlAt(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  if (i + 1 < text.size() && byte(i) == 0xd8 && byte(i + 1) == 0x9c) return 0x061c;
  if (i + 2 >= text.size() || byte(i) != 0xe2) return 0;
  const char32_t cp = 0x2000 + ((byte(i + 1) & 0x3f) << 6) + (byte(i + 2) & 0x3f);
  if (byte(i + 1) != 0x80 && byte(i + 1) != 0x81) return 0;
  if ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e ||
      cp == 0x200f)
    return cp;
  return 0;
}

}  // namespace

std::string TerminalSafe(std::string_view text, bool keep_lines) {
  std::string out;
  out.reserve(text.size());
  size_t continuation = 0;  // bytes of the current UTF-8 character still to come
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80 && c <= 0xbf && continuation > 0) {
      --continuation;
      out.push_back(static_cast<char>(c));
      continue;
    }
    continuation = 0;
    if ((c < 0x20 && !(keep_lines && (c == '\n' || c == '\t'))) || c == 0x7f ||
        (c >= 0x80 && c <= 0x9f)) {
      // A C0 control, DEL, or a C1 control as a raw byte (outside a UTF-8 character: what a
      // terminal in an 8-bit mode takes for CSI and its kind).
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      out += fmt::format("\\u00{:02x}", static_cast<unsigned char>(text[++i]));
    } else if (const char32_t bidi = BidiControlAt(text, i); bidi != 0) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(bidi));
      i += bidi == 0x061c ? 1 : 2;
    } else {
      if (c >= 0xc2 && c <= 0xf4) continuation = c < 0xe0 ? 1 : c < 0xf0 ? 2 : 3;
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

void PutSafe(std::string_view text, std::FILE* out) {
  const std::string safe = TerminalSafe(text);
  std::fwrite(safe.data(), 1, safe.size(), out);
}

}  // namespace perftracker
