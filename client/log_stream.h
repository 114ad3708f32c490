// `ztune logs TRIAL [--stderr] [--follow] [--attempt N]`: a trial's stdout
// (or stderr) as its process trainable wrote it, read page by page through
// the head from the worker that ran each attempt (the `logs` op,
// docs/client-protocol.md). The bytes go to ctx.out unchanged; notes (an
// attempt whose worker is gone, a trial without output yet) go to ctx.err.
//
// Without --attempt every attempt the head remembers is shown, oldest first
// (each begins with its header line). With --follow the newest attempt is
// followed as it grows, and the next attempt when one starts, until the
// trial has finished and its last output is shown (like `tail -f`, but it
// ends); with --attempt N --follow, until that attempt ended.
//
// Thread affinity: that of the HeadClient in ctx.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "client/commands.h"

namespace ztune::client {

struct LogsOptions {
  std::string trial_id;
  bool stderr_stream = false;
  bool follow = false;
  std::optional<uint64_t> attempt;
  // How often --follow asks for more once it has caught up.
  int interval_ms = 500;
};

// Exit codes as the other commands: 1 when the head (or the worker through
// it) refused, including an attempt whose worker is gone when that attempt
// was asked for with --attempt; 3 when the head does not answer.
int RunLogs(const CommandContext& ctx, const LogsOptions& options);

}  // namespace ztune::client
