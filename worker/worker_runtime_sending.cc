// WorkerRuntime, sending to the head: encoded messages checked against the
// frame limit, result batches coalesced for a head that takes RESULTS
// (docs/protocol.md §4.12), and replies held while the link is not registered.
#include "worker/worker_runtime.h"

#include <chrono>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/protocol/codec.h"
#include "common/zmq/socket_util.h"

namespace ztune::worker {
namespace {

// What goes to the head instead of a message too large for the link: the
// same answer, failed with `error`, without results or data.
protocol::Message OversizeReplacement(const protocol::Message& message, const std::string& error) {
  if (const auto* batch = std::get_if<protocol::ResultBatch>(&message.body)) {
    protocol::ResultBatch failed;
    failed.rid = batch->rid;
    failed.trial_id = batch->trial_id;
    failed.attempt = batch->attempt;
    failed.failed = true;
    failed.error = error;
    return protocol::Message{std::move(failed), {}};
  }
  if (const auto* reply = std::get_if<protocol::Reply>(&message.body)) {
    protocol::Reply failed{reply->rid, reply->trial_id, reply->attempt,
                           false,      error,           Json::object()};
    return protocol::Message{std::move(failed), {}};
  }
  return protocol::Message{protocol::Heartbeat{}, {}};  // nothing else can carry user data
}

constexpr size_t kMaxHeld = 10'000;
// Coalesced result batches are sent once they hold this much: a message far
// below the frame limit, which a heartbeat behind it does not wait long for.
// A batch this large goes alone.
constexpr size_t kCoalescedBytes = 1 << 20;
}  // namespace

Status WorkerRuntime::SendToHead(const std::vector<std::string>& frames) {
  if (!head_takes_one_frame_) return zmqutil::SendFrames(*dealer_, frames);
  const protocol::OneFrameMessage joined(frames);
  return zmqutil::SendFrames(*dealer_, joined.frames());
}

bool WorkerRuntime::Send(const protocol::Message& message) {
  if (dealer_ == nullptr || shutting_down_) return false;
  return SendEncoded(protocol::Encode(message), protocol::CommandName(message.body),
                     [&] { return message; });
}

bool WorkerRuntime::Send(const protocol::ResultBatch& batch) {
  if (dealer_ == nullptr || shutting_down_) return false;
  return SendEncoded(protocol::Encode(batch), "RESULT", [&] {
    return protocol::Message{batch, {}};
  });
}

bool WorkerRuntime::SendEncoded(const std::vector<std::string>& frames, const char* name,
                                const std::function<protocol::Message()>& message) {
  FlushResults();  // they came first
  for (const auto& frame : frames) {
    if (static_cast<int64_t>(frame.size()) <= protocol::kMaxFrameBytes) continue;
    // The head would drop the connection (and this worker would send it again
    // after every reconnect): a failure goes in its place.
    const std::string error = std::string(name) + " of " + std::to_string(frame.size()) +
                              " bytes is larger than the " +
                              std::to_string(protocol::kMaxFrameBytes) +
                              " bytes a message may have (a result or metric too large?)";
    spdlog::warn("{}", error);
    return Send(OversizeReplacement(message(), error));
  }
  Status s = SendToHead(frames);
  if (!s.ok()) {
    spdlog::warn("cannot send {} to the head: {}", name, s.ToString());
    return false;
  }
  last_sent_ = clock_.NowMs();
  return true;
}

void WorkerRuntime::QueueBatch(const protocol::ResultBatch& batch) {
  if (!head_takes_results_) {
    Send(batch);
    return;
  }
  size_t bytes = 64 + batch.trial_id.size() + batch.error.size();
  for (const auto& r : batch.results) bytes += 16 + r.result.bytes.size();
  if (bytes >= kCoalescedBytes) {
    Send(batch);  // alone, and checked against the frame limit
    return;
  }
  if (results_.bytes() + bytes > kCoalescedBytes || results_.count() >= protocol::kMaxCoalesced) {
    FlushResults();
  }
  // ... or once the first has waited options_.coalesce_wait_us. Coalescing
  // saves each side a send, a receive and their wake-ups per batch, but the
  // head cannot start on a batch that waits for the steps after it: at 10
  // noop steps a batch, coalescing a whole pass cost more in lost overlap
  // than it saved (docs/benchmarks.md, "against the floor"). A real clock,
  // not clock_: this bounds a delay of microseconds, and Clock counts
  // milliseconds.
  const auto now = std::chrono::steady_clock::now();
  if (results_.empty()) results_since_ = now;
  results_.Add(batch);
  if (now - results_since_ >= std::chrono::microseconds(options_.coalesce_wait_us)) {
    FlushResults();
  }
}

void WorkerRuntime::FlushResults() {
  if (results_.empty()) return;
  if (dealer_ == nullptr || shutting_down_ || link_ != Link::kRegistered) {
    results_.Clear();
    return;
  }
  const size_t n = results_.count();
  Status s = SendToHead(results_.Finish());
  if (!s.ok()) {
    spdlog::warn("cannot send {} result batch(es) to the head: {}", n, s.ToString());
    return;
  }
  last_sent_ = clock_.NowMs();
}

void WorkerRuntime::SendOrHold(protocol::Message message) {
  HeldReply reply;
  if (message.payload.size() > protocol::kInlinePayloadBytes &&
      std::holds_alternative<protocol::Reply>(message.body)) {
    reply.large_payload =
        std::make_unique<protocol::StringPayloadSource>(std::move(message.payload));
    message.payload.clear();
  }
  reply.message = std::move(message);
  SendOrHold(std::move(reply));
}

void WorkerRuntime::SendOrHold(HeldReply reply) {
  if (shutting_down_) return;
  if (link_ == Link::kRegistered) {
    if (reply.large_payload != nullptr) {
      if (SendChunked(reply.message, reply.large_payload)) return;
    } else if (Send(reply.message)) {
      return;
    }
  }
  if (held_.size() >= kMaxHeld) {
    spdlog::warn("dropping a held {} (more than {} replies waiting for registration)",
                 protocol::CommandName(held_.front().message.body), kMaxHeld);
    held_.pop_front();
  }
  held_.push_back(std::move(reply));
}

}  // namespace ztune::worker
