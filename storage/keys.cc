#include "storage/keys.h"

#include <cstddef>
#include <cstdio>

namespace ztune::storage {
namespace {

constexpr size_t kSuffixBytes = 8;

std::string KeyWithSuffix(std::string_view trial_id, uint64_t n) {
  std::string key = TrialPrefix(trial_id);
  key.reserve(key.size() + kSuffixBytes);
  for (int shift = 56; shift >= 0; shift -= 8) {
    key.push_back(static_cast<char>((n >> shift) & 0xff));
  }
  return key;
}

}  // namespace

std::string TrialPrefix(std::string_view trial_id) {
  std::string prefix;
  prefix.reserve(trial_id.size() + 1);
  prefix.append(trial_id);
  prefix.push_back('\0');
  return prefix;
}

std::string ResultKey(std::string_view trial_id, uint64_t iteration) {
  return KeyWithSuffix(trial_id, iteration);
}

std::string CheckpointKey(std::string_view trial_id, uint64_t checkpoint_id) {
  return KeyWithSuffix(trial_id, checkpoint_id);
}

std::string TrialChildKey(std::string_view trial_id, char kind, uint64_t n) {
  std::string key = TrialPrefix(trial_id);
  key.reserve(key.size() + 1 + kSuffixBytes);
  key.push_back(kind);
  for (int shift = 56; shift >= 0; shift -= 8) {
    key.push_back(static_cast<char>((n >> shift) & 0xff));
  }
  return key;
}

std::optional<TrialChildKeyParts> ParseTrialChildKey(std::string_view key) {
  const size_t zero = key.find('\0');
  if (zero == std::string_view::npos || key.size() != zero + 2 + kSuffixBytes) return std::nullopt;
  const char kind = key[zero + 1];
  if (kind != kTrialCheckpointRecord && kind != kTrialErrorRecord) return std::nullopt;
  uint64_t n = 0;
  for (size_t i = zero + 2; i < key.size(); ++i) n = (n << 8) | static_cast<unsigned char>(key[i]);
  return TrialChildKeyParts{key.substr(0, zero), kind, n};
}

std::optional<uint64_t> KeySuffixNumber(std::string_view key) {
  // The shortest well-formed key has an empty trial id: "\0" + 8 bytes.
  if (key.size() < kSuffixBytes + 1) return std::nullopt;
  if (key[key.size() - kSuffixBytes - 1] != '\0') return std::nullopt;
  uint64_t n = 0;
  for (size_t i = key.size() - kSuffixBytes; i < key.size(); ++i) {
    n = (n << 8) | static_cast<unsigned char>(key[i]);
  }
  return n;
}

std::string CodeKey(std::string_view hex) {
  return std::string(kMetaCodePrefix) + std::string(hex);
}

std::string CodePageKey(std::string_view hex, uint64_t page) {
  char index[24];
  std::snprintf(index, sizeof(index), "/%08llu", static_cast<unsigned long long>(page));
  return CodeKey(hex) + index;
}

}  // namespace ztune::storage
