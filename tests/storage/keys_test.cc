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

TEST(KeysTest, TrialChildKeysRoundTripAndSortAfterTheirTrial) {
  for (char kind : {kTrialCheckpointRecord, kTrialErrorRecord}) {
    for (uint64_t n : {uint64_t{1}, uint64_t{256}, UINT64_MAX}) {
      const std::string key = TrialChildKey("e0001_00003", kind, n);
      EXPECT_TRUE(IsTrialChildKey(key));
      auto parts = ParseTrialChildKey(key);
      ASSERT_TRUE(parts.has_value());
      EXPECT_EQ(parts->trial_id, "e0001_00003");
      EXPECT_EQ(parts->kind, kind);
      EXPECT_EQ(parts->n, n);
      // After the trial's record, before the next trial's.
      EXPECT_LT(std::string("e0001_00003"), key);
      EXPECT_LT(key, std::string("e0001_00004"));
      EXPECT_LT(key, std::string("e0001_000030"));
    }
  }
  // Checkpoints by id, then errors; numbers in numeric order.
  EXPECT_LT(TrialChildKey("t", kTrialCheckpointRecord, UINT64_MAX),
            TrialChildKey("t", kTrialErrorRecord, 0));
  EXPECT_LT(TrialChildKey("t", kTrialErrorRecord, 255), TrialChildKey("t", kTrialErrorRecord, 256));
  EXPECT_FALSE(IsTrialChildKey("e0001_00003"));
}

TEST(KeysTest, ParseTrialChildKeyRejectsMalformedKeys) {
  EXPECT_EQ(ParseTrialChildKey("e0001_00003"), std::nullopt);  // a trial record
  EXPECT_EQ(ParseTrialChildKey("t\0x\0\0\0\0\0\0\0\x01"s), std::nullopt);   // unknown kind
  EXPECT_EQ(ParseTrialChildKey("t\0c\0\0\0\0\0\0\x01"s), std::nullopt);      // 7-byte number
  EXPECT_EQ(ParseTrialChildKey("t\0c\0\0\0\0\0\0\0\0\x01"s), std::nullopt);  // 9 bytes
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
