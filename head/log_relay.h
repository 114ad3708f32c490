// LogRelay: the `logs` op (docs/client-protocol.md). A trial's output stays
// in files on the worker that ran the attempt; each page a client asks for is
// read there (READ_LOG, docs/protocol.md) and relayed back when the worker
// answers, so the head keeps no output and a page costs it one small message
// each way. Reads unanswered in time, or whose worker is gone, are answered
// Unavailable.
//
// Head loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/ids.h"
#include "common/json.h"
#include "common/protocol/messages.h"
#include "head/worker_registry.h"

namespace ztune::head {

// One page of one attempt's output, as the client asked for it and as the
// head resolved it (ClientService::PlanLogRead).
struct LogRead {
  TrialId trial_id;
  uint64_t attempt = 0;  // 0: the trial has had no actor yet (nothing to read)
  std::string stream;    // "stdout" | "stderr"
  uint64_t offset = 0;
  uint64_t limit = 0;
  WorkerId worker_id;  // the attempt's host
  // The attempt is the trial's current one and the trial is RUNNING: its
  // section may not exist yet on the worker and may grow.
  bool may_grow = false;
  Json doc;  // the reply's fields known before the worker answers
};

class LogRelay {
 public:
  // Who waits for a read's answer.
  struct Client {
    std::string identity;
    Json rid;
    bool delimited = false;
    // Set: a reader in the head's process (the dashboard, through
    // LoopReads) takes the reply, not a client socket.
    std::function<void(Json)> deliver;
  };
  struct Answer {
    Client client;
    Json reply;
  };

  // A read unanswered `timeout_ms` after it was sent is answered Unavailable.
  LogRelay(const Clock& clock, TimeMs timeout_ms) : clock_(clock), timeout_ms_(timeout_ms) {}

  // The READ_LOG that asks `read.worker_id` for `read` with request id `rid`.
  static protocol::ReadLog RequestFor(const LogRead& read, uint64_t rid);
  // The reply for a read that needs no worker (read.attempt == 0): an empty
  // page.
  static Json EmptyPage(const LogRead& read, const Json& rid);
  // The reply when the attempt's host is not connected (`known`: what the
  // registry still knows of it, or null).
  static Json WorkerGone(const LogRead& read, const WorkerInfo* known, const Json& rid);

  // Waits for the answer to `rid`, the READ_LOG sent for `read`.
  void Wait(uint64_t rid, Client client, LogRead read);
  bool Owns(uint64_t rid) const { return pending_.count(rid) > 0; }
  // The client's reply built from the worker's answer; nullopt when `reply`
  // does not come from the worker the read went to (dropped).
  std::optional<Answer> OnReply(const WorkerId& from, const protocol::Reply& reply,
                                const std::string& payload);
  // Reads past their deadline or whose worker is no longer alive, removed,
  // each with its Unavailable reply.
  std::vector<Answer> TakeUnanswerable(const WorkerRegistry& registry);
  size_t size() const { return pending_.size(); }

 private:
  struct Pending {
    Client client;
    LogRead read;
    TimeMs deadline = 0;
  };

  const Clock& clock_;
  const TimeMs timeout_ms_;
  std::unordered_map<uint64_t, Pending> pending_;
};

}  // namespace ztune::head
