#include "base/terminal.h"

#include <fmt/format.h>

namespace perftracker {

std::string TerminalSafe(std::string_view text, bool keep_lines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && !(keep_lines && (c == '\n' || c == '\t'))) || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      out += fmt::format("\\u00{:02x}", static_cast<unsigned char>(text[++i]));
    } else {
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
