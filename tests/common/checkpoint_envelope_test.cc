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

// The slicing-by-8 loop against the one-byte-at-a-time definition, at every
// length and split around the 8-byte steps.
TEST(CheckpointEnvelopeTest, Crc32ExtendsAcrossAnySplitAndMatchesTheBytewiseDefinition) {
  std::string bytes;
  for (int i = 0; i < 100; ++i) bytes.push_back(static_cast<char>(i * 37 + 11));
  auto bytewise = [](std::string_view b) {
    uint32_t c = 0xffffffffu;
    for (char ch : b) {
      c ^= static_cast<uint8_t>(ch);
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
  };
  for (size_t n = 0; n <= bytes.size(); ++n) {
    const std::string_view whole = std::string_view(bytes).substr(0, n);
    ASSERT_EQ(Crc32(whole), bytewise(whole)) << n;
    for (size_t split = 0; split <= n; split += 3) {
      ASSERT_EQ(Crc32Extend(Crc32(whole.substr(0, split)), whole.substr(split)), Crc32(whole))
          << n << " split at " << split;
    }
  }
}

// The source gives the envelope's bytes read in chunks of any size, in order
// (the checksum computed on the way), again from 0 (a resend), or skipping
// ahead straight to the checksum.
TEST(CheckpointEnvelopeTest, TheEnvelopeSourceReadsAsTheEncodingInAnyChunking) {
  const std::string whole = EncodeEnvelope(Sample());
  for (uint64_t step = 1; step <= whole.size(); ++step) {
    auto source = MakeEnvelopeSource(Sample());
    ASSERT_EQ(source->size(), whole.size());
    for (int pass = 0; pass < 2; ++pass) {
      std::string read;
      for (uint64_t at = 0; at < whole.size(); at += step) {
        std::string piece;
        ASSERT_TRUE(source->ReadAt(at, std::min<uint64_t>(step, whole.size() - at), piece).ok());
        read += piece;
      }
      ASSERT_EQ(read, whole) << "step " << step << " pass " << pass;
    }
  }
  auto source = MakeEnvelopeSource(Sample());
  std::string crc;
  ASSERT_TRUE(source->ReadAt(whole.size() - 4, 4, crc).ok());
  EXPECT_EQ(crc, whole.substr(whole.size() - 4));
}

TEST(CheckpointEnvelopeTest, AViewDecodesWithoutCopying) {
  const std::string whole = EncodeEnvelope(Sample());
  auto view = DecodeEnvelopeView(whole);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->data, Sample().data);
  EXPECT_GE(view->data.data(), whole.data());  // points into the bytes it was decoded from
  EXPECT_LE(view->data.data() + view->data.size(), whole.data() + whole.size());
  EXPECT_EQ(view->iteration, 42);
  EXPECT_EQ(view->timesteps_total, 1234.5);
  std::string flipped = whole;
  flipped[flipped.size() - 7] ^= 1;
  EXPECT_EQ(DecodeEnvelopeView(flipped).status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace ztune::checkpoint
