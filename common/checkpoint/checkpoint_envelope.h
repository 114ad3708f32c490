// The checkpoint envelope: what SAVE returns as the message payload and RESTORE
// accepts. It wraps the trainable's own bytes with the actor counters Ray keeps
// in .tune_metadata (iteration, time_total_s, timesteps_total) and the
// trainable name, so any actor of the same trainable, on any worker, can
// resume. Opaque to the head.
//
// Layout (all integers little-endian, docs/protocol.md "Checkpoint envelope"):
//   magic "ZTCKPT" (6) | version u16 = 1
//   trainable: u32 length + bytes | trial_id: u32 length + bytes (informational)
//   iteration i64 | time_total_s f64 (IEEE bits) | has_timesteps u8 | timesteps_total f64
//   data: u64 length + bytes
//   crc32 (IEEE) u32 of every preceding byte
// Plain functions; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/protocol/payload_source.h"
#include "common/status.h"

namespace ztune::checkpoint {

struct CheckpointEnvelope {
  std::string trainable;
  std::string trial_id;
  int64_t iteration = 0;
  double time_total_s = 0;
  std::optional<double> timesteps_total;
  std::string data;  // the trainable's Save() bytes
};

// A decoded envelope whose data stays in the bytes it was decoded from (a
// restore of a gigabyte must not copy it): valid while those bytes are.
struct CheckpointEnvelopeView {
  std::string trainable;
  std::string trial_id;
  int64_t iteration = 0;
  double time_total_s = 0;
  std::optional<double> timesteps_total;
  std::string_view data;
};

std::string EncodeEnvelope(const CheckpointEnvelope& envelope);
// The same bytes as a payload source, for a checkpoint too large to go
// inline: the data is moved in, not copied, and the checksum is computed as
// the bytes are read (a ChunkSender reads in order), so that a gigabyte's
// CRC is spread over its transfer instead of delaying its first chunk.
// Reads out of order (a resend from offset 0) are served too.
std::unique_ptr<protocol::PayloadSource> MakeEnvelopeSource(CheckpointEnvelope&& envelope);

// Corruption for a wrong magic, an unknown version, a truncated or oversized
// envelope, trailing bytes or a checksum mismatch; the message says which.
Result<CheckpointEnvelope> DecodeEnvelope(std::string_view bytes);
Result<CheckpointEnvelopeView> DecodeEnvelopeView(std::string_view bytes);

// CRC-32 (IEEE 802.3). Crc32Extend(Crc32(a), b) == Crc32(a + b).
uint32_t Crc32(std::string_view bytes);
uint32_t Crc32Extend(uint32_t crc, std::string_view bytes);

}  // namespace ztune::checkpoint
