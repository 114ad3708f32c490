// `ztune checkpoint TRIAL [--iteration N] -o DIR`: fetches a trial's
// persistent checkpoint from the head page by page and writes it out as what
// the trainable saved: the directory itself for a process trainable (a packed
// directory, docs/protocol.md "Checkpoint directories"), else the bytes of
// the trainable's Save in DIR/checkpoint.bin. The envelope's counters go to
// stdout (and DIR is left with only the trainable's own files).
//
// Thread affinity: that of the HeadClient in ctx.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "client/commands.h"

namespace ztune::client {

// DIR must not exist or be empty (nothing is overwritten). Exit codes as the
// other commands; 2 when DIR is unusable or the bytes are damaged.
int RunCheckpoint(const CommandContext& ctx, const std::string& trial_id,
                  std::optional<int64_t> iteration, const std::string& out_dir, bool json);

}  // namespace ztune::client
