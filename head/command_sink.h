// CommandSink: how head logic emits messages to workers without knowing about
// sockets. HeadServer implements it over the ROUTER; tests record the calls.
// Called on the head loop thread only.
#pragma once

#include <string>

#include "common/protocol/messages.h"

namespace ztune::head {

enum class SendTiming {
  kNow,          // continues work only (TRAIN): need not wait for the commit
  kAfterCommit,  // depends on state that must be durable first (ACK, STOP, ...)
};

class CommandSink {
 public:
  virtual ~CommandSink() = default;
  virtual void SendToWorker(const std::string& worker_id, protocol::Message message,
                            SendTiming timing) = 0;
};

}  // namespace ztune::head
