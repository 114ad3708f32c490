#include "head/pipelined_store.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <spdlog/spdlog.h>

#include "common/check.h"
#include "head/turn_times.h"

namespace ztune::head {

PipelinedStore::PipelinedStore(storage::Store& store, HeartbeatKeeper* keeper)
    : store_(store),
      keeper_(keeper),
      ended_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      thread_([this] { Run(); }) {
  if (ended_fd_ < 0) {
    spdlog::warn("eventfd for the commit thread: {}; the loop polls for ended commits instead",
                 std::strerror(errno));
  }
}

PipelinedStore::~PipelinedStore() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    WaitIdle(lock);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (ended_fd_ >= 0) ::close(ended_fd_);
}

bool PipelinedStore::Idle() const {
  return !committing_ && (waiting_.empty() || stopped_ || held_through_);
}

void PipelinedStore::WaitIdle(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return Idle(); });
}

template <class Done>
void PipelinedStore::WaitLending(std::unique_lock<std::mutex>& lock, Done done) {
  if (done()) return;
  if (keeper_ == nullptr) {
    cv_.wait(lock, done);
    return;
  }
  // The loop blocks here: the heartbeats are the keeper's meanwhile. Lent
  // without mu_ held (Reclaim may wait for the keeper's send).
  lock.unlock();
  HeartbeatKeeper::Loan loan(*keeper_);
  lock.lock();
  cv_.wait(lock, done);
}

void PipelinedStore::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  WaitLending(lock, [&] { return Idle(); });
}

void PipelinedStore::AwaitRoom() {
  std::unique_lock<std::mutex> lock(mu_);
  // Not while the thread has yet to take the first batch: that wait is a
  // thread wake-up, the cost the pipeline is there to hide.
  WaitLending(lock, [&] { return !committing_ || waiting_.empty() || stopped_ || held_through_; });
}

Status PipelinedStore::Commit(const storage::WriteBatch& batch) {
  Drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(!stopped_ && held_through_ == 0);
  }
  return store_.Commit(batch);
}

Result<std::optional<std::string>> PipelinedStore::Get(storage::Family f, std::string_view key) {
  Drain();
  {
    // Refused for space and held: a turn that ran before the loop saw the
    // refusal still reads what the held turns wrote (a checkpoint they
    // saved), newest first.
    std::lock_guard<std::mutex> lock(mu_);
    if (held_through_ != 0) {
      const storage::WriteBatch::Op* op = nullptr;
      for (auto it = waiting_.rbegin(); op == nullptr && it != waiting_.rend(); ++it) {
        op = it->batch.NewestWrite(f, key);
      }
      if (op == nullptr) op = held_.NewestWrite(f, key);
      if (op != nullptr) {
        if (op->is_delete) return std::optional<std::string>();
        return std::optional<std::string>(op->value);
      }
    }
  }
  return store_.Get(f, key);
}

Status PipelinedStore::Scan(storage::Family f, std::string_view prefix,
                            const std::function<bool(std::string_view, std::string_view)>& fn) {
  Drain();
  return store_.Scan(f, prefix, fn);
}

Result<std::optional<storage::Store::Entry>> PipelinedStore::Last(storage::Family f,
                                                                  std::string_view prefix) {
  Drain();
  return store_.Last(f, prefix);
}

PipelinedStore::Ticket PipelinedStore::CommitLater(storage::WriteBatch batch) {
  CHECK(!batch.empty());
  const Ticket ticket = ++last_ticket_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_.push_back(Handed{std::move(batch), ticket});
  }
  cv_.notify_all();
  return ticket;
}

std::vector<PipelinedStore::Ended> PipelinedStore::TakeEnded() {
  std::vector<Ended> taken;
  if (!outstanding()) return taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_.empty()) return taken;
    taken.swap(ended_);
    if (ended_fd_ >= 0) {
      // Under mu_, as PushEnded's write: readable exactly while ended_ is
      // not empty.
      uint64_t count;
      while (::read(ended_fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
      }
    }
  }
  // A refusal is reported again, as a success, once CommitHeld has committed
  // what it held.
  for (const Ended& e : taken) {
    if (e.status.ok()) taken_through_ = e.through;
  }
  return taken;
}

void PipelinedStore::PushEnded(Ended e) {
  ended_.push_back(std::move(e));
  if (ended_fd_ >= 0) {
    const uint64_t one = 1;
    while (::write(ended_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }
}

Status PipelinedStore::CommitHeld() {
  storage::WriteBatch batch;
  Ticket through = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(held_through_ != 0);
    // What was handed over since goes with it, in order.
    for (Handed& h : waiting_) {
      held_.Append(std::move(h.batch));
      held_through_ = h.ticket;
    }
    waiting_.clear();
    batch = std::move(held_);
    held_.Clear();
    through = held_through_;
  }
  const int64_t start = TurnTimes::SteadyNow();
  Status s = store_.Commit(batch);
  const int64_t end = TurnTimes::SteadyNow();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok()) {
      held_ = std::move(batch);  // still held, as one
      return s;
    }
    held_through_ = 0;
    PushEnded(Ended{through, Status::Ok(), start, end, batch.bytes()});
  }
  cv_.notify_all();
  return s;
}

void PipelinedStore::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || (!waiting_.empty() && !stopped_ && !held_through_); });
    if (waiting_.empty() || stopped_ || held_through_) {
      if (quit_) return;
      continue;
    }
    // Everything waiting goes in one commit (group commit).
    std::vector<Handed> taken;
    taken.swap(waiting_);
    committing_ = true;
    cv_.notify_all();  // AwaitRoom
    lock.unlock();
    storage::WriteBatch batch = std::move(taken.front().batch);
    for (size_t i = 1; i < taken.size(); ++i) batch.Append(std::move(taken[i].batch));
    const Ticket through = taken.back().ticket;
    const int64_t start = TurnTimes::SteadyNow();
    Status s = store_.Commit(batch);
    const int64_t end = TurnTimes::SteadyNow();
    const size_t bytes = batch.bytes();
    lock.lock();
    committing_ = false;
    if (s.code() == StatusCode::kResourceExhausted) {
      held_ = std::move(batch);
      held_through_ = through;
    } else if (!s.ok()) {
      stopped_ = true;
    }
    PushEnded(Ended{through, std::move(s), start, end, bytes});
    cv_.notify_all();
  }
}

}  // namespace ztune::head
