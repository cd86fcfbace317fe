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

TEST(TerminalSafeTest, RawC1BytesAndBidiControlsAreEscaped) {
  // A raw 0x9b (CSI to a terminal in an 8-bit mode) outside any UTF-8 character.
  EXPECT_EQ(TerminalSafe("csi\x9b"
                         "2J"),
            "csi\\x9b2J");
  // Inside a character it is a continuation byte: U+2192 and U+4E9B stay.
  EXPECT_EQ(TerminalSafe("\xe2\x86\x92\xe4\xba\x9b"), "\xe2\x86\x92\xe4\xba\x9b");
  // A right-to-left override makes "gpj.exe" read as "exe.jpg"; isolates and marks too.
  EXPECT_EQ(TerminalSafe("a\xe2\x80\xae"
                         "gpj.exe"),
            "a\\u202egpj.exe");
  EXPECT_EQ(TerminalSafe("\xe2\x81\xa6x\xe2\x81\xa9\xe2\x80\x8f\xd8\x9c"),
            "\\u2066x\\u2069\\u200f\\u061c");
  // An em dash (U+2014) and U+2070 are no controls.
  EXPECT_EQ(TerminalSafe("a\xe2\x80\x94\xe2\x81\xb0"), "a\xe2\x80\x94\xe2\x81\xb0");
}

TEST(TerminalSafeTest, OneLineEscapesLineBreaksToo) {
  EXPECT_EQ(TerminalSafe("host\nfake line\t", /*keep_lines=*/false), "host\\x0afake line\\x09");
}

}  // namespace
}  // namespace perftracker
