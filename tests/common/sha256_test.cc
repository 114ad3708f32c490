#include "common/sha256.h"

#include <string>

#include <gtest/gtest.h>

namespace ztune {
namespace {

std::string ToHex(const Sha256::Digest& digest) {
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string hex;
  for (const uint8_t byte : digest) {
    hex.push_back(kHexDigits[byte >> 4]);
    hex.push_back(kHexDigits[byte & 0x0f]);
  }
  return hex;
}

// "abcd...xyzabcd..." cut to n bytes: unlike a run of one letter, it catches words loaded in the
// wrong byte order.
std::string Alphabet(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + i % 26));
  return s;
}

TEST(Sha256Test, MatchesTheFips180Vectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      Sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmno"
                "pqklmnopqrlmnopqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, DigestAndHexAgree) {
  EXPECT_EQ(ToHex(Sha256Digest("abc")), Sha256Hex("abc"));
  EXPECT_EQ(Sha256Hex("abc").size(), 64u);
}

// 55 is the longest input whose length still fits in its last block, 56 the shortest that spills
// the length into an extra block; 63/64/65 straddle a block boundary. Expected values from
// coreutils sha256sum.
TEST(Sha256Test, PaddingEdgeLengths) {
  EXPECT_EQ(Sha256Hex(Alphabet(55)),
            "595615dbe4f0f407ae397d08b4c2cb870cb9b0e11937416f950c5160acf9c005");
  EXPECT_EQ(Sha256Hex(Alphabet(56)),
            "784f623b787495078e93ff28a25b581df0584055a7e71d8cd90c454716b92f51");
  EXPECT_EQ(Sha256Hex(Alphabet(63)),
            "5ca3e1ef5207490eac01a795e5cc94d59582a5118bf9534665c8668d87aa647c");
  EXPECT_EQ(Sha256Hex(Alphabet(64)),
            "2fcd5a0d60e4c941381fcc4e00a4bf8be422c3ddfafb93c809e8d1e2bfffae8e");
  EXPECT_EQ(Sha256Hex(Alphabet(65)),
            "1b3cd1877ab2f2f19f7be001722554f336cb799df0329de0bb4c118dc6abc06d");
}

TEST(Sha256Test, EverySplitPointGivesTheSameDigest) {
  const std::string input = Alphabet(200);
  const std::string want = "8013a82140d916576e2cf550b27449a368abec66cc154a7d9f599019d33aa3d2";
  ASSERT_EQ(Sha256Hex(input), want);
  const std::string_view view = input;
  for (size_t split = 0; split <= input.size(); ++split) {
    Sha256 hasher;
    hasher.Update(view.substr(0, split));
    hasher.Update(view.substr(split));
    EXPECT_EQ(ToHex(hasher.Finish()), want) << "split at " << split;
  }
}

TEST(Sha256Test, ByteAtATimeMatchesOneUpdate) {
  const std::string input = Alphabet(200);
  Sha256 hasher;
  for (const char c : input) hasher.Update(std::string_view(&c, 1));
  EXPECT_EQ(hasher.Finish(), Sha256Digest(input));
}

TEST(Sha256Test, ResetMakesTheObjectReusable) {
  Sha256 hasher;
  hasher.Update("some earlier input that must not leak into the next digest");
  hasher.Finish();
  hasher.Reset();
  hasher.Update("abc");
  EXPECT_EQ(ToHex(hasher.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

  // Reset also discards a partial, unfinished input.
  hasher.Reset();
  hasher.Update("partial");
  hasher.Reset();
  EXPECT_EQ(ToHex(hasher.Finish()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256Test, DigestHexAndIsSha256HexAgreeWithSha256Hex) {
  Sha256 hasher;
  hasher.Update("ab");
  hasher.Update("c");
  EXPECT_EQ(DigestHex(hasher.Finish()), Sha256Hex("abc"));
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("abc")));
  EXPECT_FALSE(IsSha256Hex(Sha256Hex("abc").substr(1)));  // 63 digits
  EXPECT_FALSE(IsSha256Hex(Sha256Hex("abc") + "0"));      // 65
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));        // upper case
  EXPECT_FALSE(IsSha256Hex(std::string(63, 'a') + "g"));  // not hex
  EXPECT_FALSE(IsSha256Hex(std::string(63, 'a') + std::string(1, '\0')));
}

TEST(Sha256DeathTest, UpdateAfterFinishWithoutResetAborts) {
  Sha256 hasher;
  hasher.Finish();
  EXPECT_DEATH(hasher.Update("x"), "");  // CHECK aborts (its message goes to the log)
  EXPECT_DEATH(hasher.Finish(), "");
}

}  // namespace
}  // namespace ztune
