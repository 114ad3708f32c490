// LoopReads: how a thread other than the head's loop (the dashboard's HTTP
// handlers) reads the head's state. It queues a client request and waits; the
// loop answers every queued request once per turn, after the turn's commit,
// as it answers the reads of its client socket that come behind a change
// (ClientService::Handle, here with a read-only caller). A stalled loop
// answers late, never wrongly.
//
// A request the loop cannot answer in its turn (a trial's output, read from
// the worker that ran it) is answered later through its Respond
// (AnswerAllDeferred).
//
// Thread-safe. AnswerAll() and AnswerAllDeferred() are called on the loop
// thread only; a Respond may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace ztune::head {

class LoopReads {
 public:
  // Requests waiting at most; more are refused (ResourceExhausted) so that a
  // flood of HTTP requests cannot grow the loop's work without bound.
  static constexpr size_t kMaxWaiting = 64;

  LoopReads();
  ~LoopReads();
  LoopReads(const LoopReads&) = delete;
  LoopReads& operator=(const LoopReads&) = delete;

  // Any thread: the loop's reply to `request`; Unavailable when it did not
  // come within `timeout` or the queue is closed.
  Result<Json> Ask(Json request, std::chrono::milliseconds timeout);

  // An eventfd, readable while requests wait: the loop polls it.
  int wake_fd() const { return fd_; }

  // Loop thread: answers every waiting request with `handle`.
  void AnswerAll(const std::function<Json(const Json&)>& handle);

  // Answers one request; calls after the first (or after Close) do nothing.
  using Respond = std::function<void(Json reply)>;
  // Loop thread: hands every waiting request to `handle`, which answers it
  // through its Respond, at once or later.
  void AnswerAllDeferred(const std::function<void(const Json&, Respond)>& handle);

  // Loop thread: whether a request waits (the turn then answers it, after
  // its commit has ended).
  bool HasWaiting();

  // Any thread: waiting and later requests fail at once (shutdown).
  void Close();

 private:
  struct Pending {
    Json request;
    std::promise<Json> reply;
    bool answered = false;  // guarded by mu_
  };
  // Sets `p`'s reply unless it has one.
  void Answer(const std::shared_ptr<Pending>& p, Json reply);

  std::mutex mu_;
  std::deque<std::shared_ptr<Pending>> waiting_;  // guarded by mu_
  // Handed to the loop and not answered yet (Close answers them).
  std::vector<std::weak_ptr<Pending>> deferred_;  // guarded by mu_
  bool closed_ = false;                           // guarded by mu_
  int fd_ = -1;
};

}  // namespace ztune::head
