// CommandSink: how head logic emits messages to workers without knowing about
// sockets. HeadServer implements it over the ROUTER; tests record the calls.
// Called on the head loop thread only.
#pragma once

#include <functional>
#include <string>

#include "common/ids.h"
#include "common/protocol/messages.h"

namespace ztune::head {

enum class SendTiming {
  kNow,          // continues work only (TRAIN): need not wait for the commit
  kAfterCommit,  // depends on state that must be durable first (ACK, STOP, ...)
  // A TRAIN after a result of a trial whose steps are long next to a commit:
  // to a worker that takes TRAINs inside ACKs it waits for the commit and goes
  // in the worker's ACK, one message where there were two; otherwise kNow.
  kWithAck,
};

class CommandSink {
 public:
  virtual ~CommandSink() = default;
  virtual void SendToWorker(const WorkerId& worker_id, protocol::Message message,
                            SendTiming timing) = 0;
  // Runs `op`, a long store operation (reading a large checkpoint), to
  // completion before returning. The head server runs it on its store thread
  // and keeps heartbeats going meanwhile; `op` must touch nothing but the
  // store and what it captures.
  virtual void RunLongStoreOperation(const std::function<void()>& op) { op(); }
};

}  // namespace ztune::head
