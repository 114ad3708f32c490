// Copies of a data directory for salvage: the copy is the only untouched
// version of a damaged store once salvage starts changing the original, so
// every file and directory of it is fsynced before CopyTree returns.
//
// Blocking file I/O; called from the salvage path only (no thread affinity).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/status.h"

namespace ztune::storage::internal {

// Copies the tree `from` (regular files and directories; anything else is
// skipped) to `to`, which must not exist. IOError names the file that failed.
Status CopyTree(const std::filesystem::path& from, const std::filesystem::path& to);

// Bytes of the regular files under `dir`, only those ending in `only_ext`
// (e.g. ".blob") if it is not empty. Unreadable entries count 0.
uint64_t TreeBytes(const std::filesystem::path& dir, const std::string& only_ext = "");

}  // namespace ztune::storage::internal
