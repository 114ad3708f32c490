// Mix64: SplitMix64's finaliser, a well-mixed 64-bit hash. Random choices
// that must be the same on every platform and after every head restart (a
// trial's sampled config, its ASHA bracket, PBT's draws) seed their
// generators with Mix64 of (seed, index, ...) instead of sharing one stream.
#pragma once

#include <cstdint>

namespace ztune {

inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace ztune
