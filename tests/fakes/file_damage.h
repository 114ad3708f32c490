// DamageMiddle: deliberate damage to a store's file (an SST, a blob file, a
// WAL) for the tests that check a damaged store is refused, named and never
// modified. Test-thread only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace ztune::testing {

// Inverts 64 bytes in the middle of `path` (size unchanged). A fatal gtest
// failure if the file is too small or cannot be rewritten.
inline void DamageMiddle(const std::string& path) {
  const uintmax_t size = std::filesystem::file_size(path);
  ASSERT_GT(size, 256u) << path;
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  std::string bytes(64, '\0');
  f.seekg(static_cast<std::streamoff>(size / 2));
  f.read(bytes.data(), 64);
  for (char& c : bytes) c = static_cast<char>(~c);
  f.seekp(static_cast<std::streamoff>(size / 2));
  f.write(bytes.data(), 64);
  ASSERT_TRUE(f.good()) << path;
}

}  // namespace ztune::testing
