#include "storage/keys.h"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "storage/store.h"

namespace ztune::storage {
namespace {

using namespace std::string_literals;

TEST(KeysTest, TrialPrefixAppendsSeparator) {
  EXPECT_EQ(TrialPrefix("t1"), "t1\0"s);
  EXPECT_EQ(TrialPrefix(""), "\0"s);
}

TEST(KeysTest, ResultKeyIsPrefixPlusBigEndianIteration) {
  EXPECT_EQ(ResultKey("t1", 0x0102030405060708ULL), "t1\0\x01\x02\x03\x04\x05\x06\x07\x08"s);
  EXPECT_EQ(ResultKey("t1", 1), "t1\0\0\0\0\0\0\0\0\x01"s);
  EXPECT_EQ(CheckpointKey("t1", 256), "t1\0\0\0\0\0\0\0\x01\0"s);
}

TEST(KeysTest, ByteOrderIsNumericOrder) {
  // std::string compares as unsigned char, like RocksDB's bytewise comparator.
  EXPECT_LT(ResultKey("t", 255), ResultKey("t", 256));
  EXPECT_LT(ResultKey("t", 0x7fffffffffffffffULL), ResultKey("t", 0x8000000000000000ULL));
  EXPECT_LT(ResultKey("t", 65535), ResultKey("t", 65536));
  // A trial's keys sort before those of a trial whose id extends it.
  EXPECT_LT(ResultKey("t1", UINT64_MAX), ResultKey("t10", 0));
}

TEST(KeysTest, KeySuffixNumberRoundTrips) {
  for (uint64_t n :
       {uint64_t{0}, uint64_t{1}, uint64_t{255}, uint64_t{256}, uint64_t{1} << 40, UINT64_MAX}) {
    EXPECT_EQ(KeySuffixNumber(ResultKey("trial_a", n)), n);
    EXPECT_EQ(KeySuffixNumber(CheckpointKey("", n)), n);
  }
}

TEST(KeysTest, KeySuffixNumberRejectsMalformedKeys) {
  EXPECT_EQ(KeySuffixNumber(""), std::nullopt);
  EXPECT_EQ(KeySuffixNumber("t1"), std::nullopt);
  EXPECT_EQ(KeySuffixNumber(TrialPrefix("t1")), std::nullopt);
  EXPECT_EQ(KeySuffixNumber("\0\0\0\0\0\0\0\0"s), std::nullopt);       // 8 bytes, no separator
  EXPECT_EQ(KeySuffixNumber("t1x\0\0\0\0\0\0\0\x01"s), std::nullopt);  // 7-byte suffix
}

TEST(KeysTest, FamilyNamesAreTheColumnFamilyNames) {
  EXPECT_STREQ(FamilyName(Family::kMeta), "meta");
  EXPECT_STREQ(FamilyName(Family::kExperiments), "experiments");
  EXPECT_STREQ(FamilyName(Family::kTrials), "trials");
  EXPECT_STREQ(FamilyName(Family::kResults), "results");
  EXPECT_STREQ(FamilyName(Family::kCheckpoints), "checkpoints");
}

}  // namespace
}  // namespace ztune::storage
