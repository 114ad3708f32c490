#include "head/loop_reads.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "common/check.h"

namespace ztune::head {

LoopReads::LoopReads() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) { CHECK(fd_ >= 0); }

LoopReads::~LoopReads() {
  Close();
  ::close(fd_);
}

Result<Json> LoopReads::Ask(Json request, std::chrono::milliseconds timeout) {
  auto pending = std::make_shared<Pending>();
  pending->request = std::move(request);
  std::future<Json> reply = pending->reply.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::Unavailable("the head is stopping");
    if (waiting_.size() >= kMaxWaiting) {
      return Status::ResourceExhausted("the head has " + std::to_string(kMaxWaiting) +
                                       " dashboard reads waiting already");
    }
    waiting_.push_back(pending);
  }
  const uint64_t one = 1;
  // A full counter (never: it holds 2^64-2) or EAGAIN still leaves it readable.
  (void)!::write(fd_, &one, sizeof(one));
  if (reply.wait_for(timeout) != std::future_status::ready) {
    return Status::Unavailable("the head did not answer within " + std::to_string(timeout.count()) +
                               " ms (busy or stalled)");
  }
  Json j = reply.get();
  if (j.is_discarded()) return Status::Unavailable("the head is stopping");
  return j;
}

void LoopReads::Answer(const std::shared_ptr<Pending>& p, Json reply) {
  std::lock_guard<std::mutex> lock(mu_);
  if (p->answered) return;
  p->answered = true;
  p->reply.set_value(std::move(reply));
}

void LoopReads::AnswerAll(const std::function<Json(const Json&)>& handle) {
  AnswerAllDeferred([&](const Json& request, Respond respond) { respond(handle(request)); });
}

void LoopReads::AnswerAllDeferred(const std::function<void(const Json&, Respond)>& handle) {
  uint64_t count = 0;
  (void)!::read(fd_, &count, sizeof(count));  // reset; EAGAIN when nothing was written
  std::deque<std::shared_ptr<Pending>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(waiting_);
    // What was answered (or given up: its Ask returned) is dropped here.
    std::erase_if(deferred_, [](const std::weak_ptr<Pending>& w) {
      auto p = w.lock();
      return p == nullptr || p->answered;
    });
    for (auto& p : batch) deferred_.push_back(p);
  }
  for (auto& p : batch) {
    handle(p->request, [this, p](Json reply) { Answer(p, std::move(reply)); });
  }
}

bool LoopReads::HasWaiting() {
  std::lock_guard<std::mutex> lock(mu_);
  return !waiting_.empty();
}

void LoopReads::Close() {
  std::deque<std::shared_ptr<Pending>> batch;
  std::vector<std::weak_ptr<Pending>> deferred;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    batch.swap(waiting_);
    deferred.swap(deferred_);
  }
  for (auto& p : batch) Answer(p, Json(Json::value_t::discarded));
  for (auto& w : deferred) {
    if (auto p = w.lock()) Answer(p, Json(Json::value_t::discarded));
  }
}

}  // namespace ztune::head
