#include "common/printable.h"

#include <gtest/gtest.h>

namespace ztune {
namespace {

TEST(PrintableTest, EscapesControlCharactersAndLeavesTheRest) {
  EXPECT_EQ(EscapeControl("plain name é 名"), "plain name é 名");
  EXPECT_EQ(EscapeControl("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(EscapeControl("\x1b[2J\x1b[31mred"), "\\x1b[2J\\x1b[31mred");
  EXPECT_EQ(EscapeControl(std::string_view("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(EscapeControl("del\x7f"), "del\\x7f");
  EXPECT_EQ(EscapeControl("c1\xc2\x9b" "31m"), "c1\\u009b31m");
  EXPECT_EQ(EscapeControl("back\\slash"), "back\\slash");
}

TEST(PrintableTest, KeepsNewlinesAndTabsWhenAskedButNeverCarriageReturns) {
  EXPECT_EQ(EscapeControl("line 1\n\tline 2\r\x1b", Newlines::kKeep), "line 1\n\tline 2\\r\\x1b");
}

TEST(PrintableTest, DetectsControlCharacters) {
  EXPECT_FALSE(HasControl("ok name-1_é"));
  EXPECT_TRUE(HasControl("new\nline"));
  EXPECT_TRUE(HasControl("\x1b[0m"));
  EXPECT_TRUE(HasControl("\xc2\x85"));
  EXPECT_FALSE(HasControl("\xc2\xa0"));  // no-break space is printable
}

TEST(PrintableTest, LogTextIsOneLineOfValidUtf8) {
  EXPECT_EQ(EscapeForLog("plain ascii"), "plain ascii");
  EXPECT_EQ(EscapeForLog("caf\xc3\xa9 \xe2\x82\xac"),
            "caf\xc3\xa9 \xe2\x82\xac");  // valid UTF-8 kept
  EXPECT_EQ(EscapeForLog("two\nlines\r\t"), "two\\nlines\\r\\t");
  EXPECT_EQ(EscapeForLog(std::string_view("bin\xff\xfe\0\x80", 7)), "bin\\xff\\xfe\\x00\\x80");
  // A truncated sequence and an overlong form: every byte escaped.
  EXPECT_EQ(EscapeForLog("cut \xe2\x82"), "cut \\xe2\\x82");
  EXPECT_EQ(EscapeForLog("overlong \xc0\xaf"), "overlong \\xc0\\xaf");
  EXPECT_EQ(EscapeForLog("c1 \xc2\x9b"), "c1 \\u009b");
  EXPECT_EQ(EscapeForLog("esc \x1b[31m"), "esc \\x1b[31m");
}

}  // namespace
}  // namespace ztune
