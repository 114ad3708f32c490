// A checkpoint directory as bytes: process trainables save a directory, the
// head stores opaque bytes, and any worker restores the directory from them.
//
// Layout (integers little-endian; docs/protocol.md "Checkpoint directories"):
//   magic "ZTDIR" (5) | version u8 = 1 | entry count u32
//   per entry, in byte order of the relative path:
//     kind u8 (1 directory, 2 file) | mode u32 (permission bits) |
//     path: u32 length + bytes ('/'-separated, relative, no "." or ".." parts) |
//     file only: size u64 + bytes
//   crc32 (IEEE) u32 of every preceding byte
// The same directory always packs to the same bytes (sorted entries, no
// times or owners), so equal checkpoints compare equal.
//
// Plain functions; thread-safe. They touch only the paths they are given.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ztune::checkpoint {

// Limits an archive must respect, in both directions: a trainable that
// writes more is refused with a message saying which limit, and bytes that
// claim more are corrupt.
inline constexpr uint64_t kMaxArchiveEntries = 1'000'000;
inline constexpr uint32_t kMaxArchivePathBytes = 4096;

// Packs the regular files and subdirectories under `dir` (not `dir` itself).
// InvalidArgument naming the path for a symbolic link or any other file
// type (a link could point outside the checkpoint, and restore would not
// recreate it faithfully); IOError for a file that cannot be read;
// ResourceExhausted when the archive would exceed `max_bytes`.
Result<std::string> PackDirectory(const std::string& dir, uint64_t max_bytes);

// True for an entry to leave out (a directory: with everything under it);
// `rel_path` is '/'-separated and relative to the packed directory.
using PackFilter = std::function<bool(const std::string& rel_path, bool is_dir)>;
// PackDirectory with entries left out by `leave_out` (may be empty); `what`
// names the directory in messages ("checkpoint", "project").
Result<std::string> PackDirectory(const std::string& dir, uint64_t max_bytes,
                                  const PackFilter& leave_out, const std::string& what);

// Whether `bytes` start as a packed directory does (its magic): what a
// process trainable saved, as opposed to a built-in trainable's own bytes.
bool IsDirectoryArchive(std::string_view bytes);

// Unpacks `bytes` into `dir`, which must exist and be empty. Corruption
// (naming what is wrong: magic, version, checksum, truncation, a path that
// is absolute or escapes, a duplicate or unsorted entry) before anything is
// written; IOError if writing fails (what was written stays; the caller
// removes `dir`).
Status UnpackDirectory(std::string_view bytes, const std::string& dir);

}  // namespace ztune::checkpoint
