// SHA-256 (FIPS 180-4): content addresses of submitted working directories. A client with the
// submit role must not be able to craft two directories with the same address, so this has to be
// a cryptographic hash rather than a fast checksum. Self-contained to avoid a crypto dependency.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ztune {

// Incremental hasher, for inputs too large to hold in memory at once. Not thread-safe.
class Sha256 {
 public:
  static constexpr size_t kDigestSize = 32;
  using Digest = std::array<uint8_t, kDigestSize>;

  Sha256() { Reset(); }

  void Update(std::string_view bytes);
  // Pads and returns the digest. The object is then spent: Update or Finish again is a CHECK
  // failure until Reset(), since the padded state is no message's prefix and going on would
  // silently produce a wrong digest.
  Digest Finish();
  void Reset();

 private:
  static constexpr size_t kBlockSize = 64;

  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, kBlockSize> buffer_;
  size_t buffer_len_;
  // In bits because that is what the padding encodes; 64 bits wide since a 32-bit count would
  // already wrap at 512 MiB of input.
  uint64_t bit_count_;
  bool finished_;
};

std::array<uint8_t, 32> Sha256Digest(std::string_view bytes);
// 64 lowercase hex digits.
std::string Sha256Hex(std::string_view bytes);
// A digest as 64 lowercase hex digits (for digests made with Sha256).
std::string DigestHex(const Sha256::Digest& digest);
// Whether `text` is how Sha256Hex spells a digest: 64 lowercase hex digits.
bool IsSha256Hex(std::string_view text);

}  // namespace ztune
