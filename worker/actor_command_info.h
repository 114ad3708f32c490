// What an actor command from the head is about (its kind, request id and
// actor), shared by the files that implement WorkerRuntime. Internal to worker/.
#pragma once

#include <type_traits>
#include <variant>

#include "common/protocol/messages.h"
#include "worker/actor_runner.h"

namespace ztune::worker {

// What an actor command is about: its kind, request id and actor.
struct ActorCommandInfo {
  CommandKind kind = CommandKind::kSetup;
  uint64_t rid = 0;
  ActorKey key;
};

inline ActorCommandInfo DescribeActorCommand(const protocol::Message& message) {
  ActorCommandInfo info;
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (requires { body.rid; body.trial_id; body.attempt; }) {
          info.rid = body.rid;
          info.key = ActorKey{body.trial_id, body.attempt};
        }
        if constexpr (std::is_same_v<T, protocol::Train>) info.kind = CommandKind::kTrain;
        if constexpr (std::is_same_v<T, protocol::Save>) info.kind = CommandKind::kSave;
        if constexpr (std::is_same_v<T, protocol::Restore>) info.kind = CommandKind::kRestore;
        if constexpr (std::is_same_v<T, protocol::Reset>) info.kind = CommandKind::kReset;
        if constexpr (std::is_same_v<T, protocol::Stop>) info.kind = CommandKind::kStop;
        if constexpr (std::is_same_v<T, protocol::Export>) info.kind = CommandKind::kExport;
      },
      message.body);
  return info;
}

}  // namespace ztune::worker
