#include "base/terminal.h"

#include <gtest/gtest.h>

namespace perftracker {
namespace {

TEST(TerminalSafeTest, EscapeSequencesBecomeVisible) {
  EXPECT_EQ(TerminalSafe("ok\x1b[2Jgone\n"), "ok\\x1b[2Jgone\n");
  EXPECT_EQ(TerminalSafe("title\x1b]0;pwned\x07"), "title\\x1b]0;pwned\\x07");
  EXPECT_EQ(TerminalSafe("back\rover"), "back\\x0dover");
  EXPECT_EQ(TerminalSafe(std::string_view("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(TerminalSafe("del\x7f"), "del\\x7f");
}

TEST(TerminalSafeTest, C1ControlsInUtf8AreEscapedAndOtherTextKept) {
  EXPECT_EQ(TerminalSafe("csi\xc2\x9b"
                         "2J"),
            "csi\\u009b2J");
  // Line breaks, tabs and ordinary UTF-8 (U+00E9, U+2192) stay as they are.
  EXPECT_EQ(TerminalSafe("a\tb\ncaf\xc3\xa9 \xe2\x86\x92 x"), "a\tb\ncaf\xc3\xa9 \xe2\x86\x92 x");
  // A lone C2 at the end is no control character.
  EXPECT_EQ(TerminalSafe("end\xc2"), "end\xc2");
}

TEST(TerminalSafeTest, OneLineEscapesLineBreaksToo) {
  EXPECT_EQ(TerminalSafe("host\nfake line\t", /*keep_lines=*/false), "host\\x0afake line\\x09");
}

}  // namespace
}  // namespace perftracker
