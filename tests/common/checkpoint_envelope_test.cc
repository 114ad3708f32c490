#include "common/checkpoint/checkpoint_envelope.h"

#include <gtest/gtest.h>

namespace ztune::checkpoint {
namespace {

CheckpointEnvelope Sample() {
  CheckpointEnvelope e;
  e.trainable = "quadratic";
  e.trial_id = "trial_00001";
  e.iteration = 42;
  e.time_total_s = 3.0000000000000004;
  e.timesteps_total = 1234.5;
  e.data = std::string("\0\x01\x02payload\xff", 11);
  return e;
}

TEST(CheckpointEnvelopeTest, RoundTrips) {
  auto e = Sample();
  auto d = DecodeEnvelope(EncodeEnvelope(e));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->trainable, e.trainable);
  EXPECT_EQ(d->trial_id, e.trial_id);
  EXPECT_EQ(d->iteration, 42);
  EXPECT_EQ(d->time_total_s, e.time_total_s);  // bit-exact
  ASSERT_TRUE(d->timesteps_total.has_value());
  EXPECT_EQ(*d->timesteps_total, 1234.5);
  EXPECT_EQ(d->data, e.data);

  e.timesteps_total.reset();
  e.data.clear();
  d = DecodeEnvelope(EncodeEnvelope(e));
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->timesteps_total.has_value());
  EXPECT_TRUE(d->data.empty());
}

TEST(CheckpointEnvelopeTest, RejectsEveryTruncation) {
  std::string bytes = EncodeEnvelope(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto d = DecodeEnvelope(bytes.substr(0, n));
    ASSERT_FALSE(d.ok()) << "prefix of " << n << " bytes decoded";
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  }
}

TEST(CheckpointEnvelopeTest, RejectsWrongMagicVersionTrailingAndFlips) {
  std::string bytes = EncodeEnvelope(Sample());
  std::string bad = bytes;
  bad[0] = 'X';
  auto d = DecodeEnvelope(bad);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("magic"), std::string::npos);

  bad = bytes;
  bad[6] = 9;  // version
  d = DecodeEnvelope(bad);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("version"), std::string::npos);

  d = DecodeEnvelope(bytes + "x");
  ASSERT_FALSE(d.ok());

  for (size_t i = 8; i < bytes.size(); ++i) {
    bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    EXPECT_FALSE(DecodeEnvelope(bad).ok()) << "flip at byte " << i << " accepted";
  }
}

TEST(CheckpointEnvelopeTest, RejectsGarbage) {
  uint32_t seed = 99;
  for (int i = 0; i < 2000; ++i) {
    std::string junk = (i % 2 == 0) ? "ZTCKPT" : "";
    int len = static_cast<int>(seed % 64);
    for (int k = 0; k < len; ++k) {
      seed = seed * 1103515245 + 12345;
      junk.push_back(static_cast<char>(seed >> 16));
    }
    EXPECT_FALSE(DecodeEnvelope(junk).ok());
  }
}

TEST(CheckpointEnvelopeTest, Crc32MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
}

}  // namespace
}  // namespace ztune::checkpoint
