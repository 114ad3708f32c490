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
#include <optional>
#include <string>
#include <string_view>

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

std::string EncodeEnvelope(const CheckpointEnvelope& envelope);

// Corruption for a wrong magic, an unknown version, a truncated or oversized
// envelope, trailing bytes or a checksum mismatch; the message says which.
Result<CheckpointEnvelope> DecodeEnvelope(std::string_view bytes);

// CRC-32 (IEEE 802.3), exposed for tests.
uint32_t Crc32(std::string_view bytes);

}  // namespace ztune::checkpoint
