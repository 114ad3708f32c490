// `ztune submit --working-dir DIR`: the project directory packed
// (common/checkpoint/directory_archive.h, the same deterministic format as
// checkpoint directories), addressed by its sha256, and uploaded to the head
// page by page with put_code (docs/client-protocol.md). A head that already
// stores the address takes nothing. Single-threaded, like HeadClient.
#pragma once

#include <cstdint>
#include <string>

#include "client/client.h"
#include "common/status.h"

namespace ztune::client {

// What a project archive leaves out: version-control directories (.git, .hg,
// .svn), Python caches (__pycache__, *.pyc), .ipynb_checkpoints, and ztune's
// own worker directories (.ztune-*).
bool LeftOutOfProject(const std::string& rel_path, bool is_dir);

// The largest project a client packs (what a worker accepts); a head takes
// what its --max-code-bytes allows, and says so before any byte is sent.
inline constexpr uint64_t kMaxProjectBytes = 4ULL << 30;

struct PackedProject {
  std::string bytes;
  std::string sha256;  // 64 lowercase hex digits
};

// InvalidArgument for a path that is not a directory or holds a symbolic
// link or special file (naming it); ResourceExhausted above `max_bytes`.
Result<PackedProject> PackProject(const std::string& dir, uint64_t max_bytes);

struct UploadStats {
  bool already_stored = false;  // the head had it: nothing was sent
  uint64_t bytes_sent = 0;
};

// Uploads `project` unless the head has it; resumes where the head says an
// upload stands. The head's error for a refused page (too large, no room).
Result<UploadStats> UploadProject(HeadClient& client, const PackedProject& project);

}  // namespace ztune::client
