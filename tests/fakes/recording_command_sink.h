// RecordingCommandSink: a CommandSink that records every message the head
// logic sends, for socket-free unit tests. Test-thread only.
#pragma once

#include <string>
#include <vector>

#include "head/command_sink.h"

namespace ztune::testing {

class RecordingCommandSink final : public head::CommandSink {
 public:
  struct Sent {
    WorkerId worker_id;
    protocol::Message message;
    head::SendTiming timing;
  };

  void SendToWorker(const WorkerId& worker_id, protocol::Message message,
                    head::SendTiming timing) override {
    sent.push_back({worker_id, std::move(message), timing});
  }

  // Removes and returns everything sent so far.
  std::vector<Sent> TakeAll() {
    std::vector<Sent> out;
    out.swap(sent);
    return out;
  }

  template <class T>
  size_t Count() const {
    size_t n = 0;
    for (const auto& s : sent) n += std::holds_alternative<T>(s.message.body) ? 1 : 0;
    return n;
  }

  std::vector<Sent> sent;
};

}  // namespace ztune::testing
