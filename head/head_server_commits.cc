// HeadServer, the commit side: a turn's commit on the loop (with the
// heartbeats lent) or handed to the commit thread (PipelinedStore) with what
// waits for it, the ended commits' actions, the wait for disk space, and the
// store operations run off the loop. Head loop thread only.
#include <spdlog/spdlog.h>

#include "common/check.h"
#include "head/head_server.h"

namespace ztune::head {

Status HeadServer::RunOffLoop(const std::function<Status()>& job, const char* what, size_t bytes) {
  // The job may use the store: one thread at a time.
  pipeline_.Drain();
  const TimeMs start = clock_.NowMs();
  store_thread_.Begin(job);
  while (true) {
    const TimeMs next = last_heartbeat_round_ + HeartbeatRoundMs() - clock_.NowMs();
    if (std::optional<Status> s = store_thread_.Wait(std::max<TimeMs>(1, next))) {
      const TimeMs took = clock_.NowMs() - start;
      if (took > options_.runner.heartbeat_ms) {
        ++stats_.slow_store_operations;
        spdlog::info("slow {}{}: {} ms (heartbeats kept going)", what,
                     bytes > 0 ? " of " + std::to_string(bytes) + " bytes" : std::string(), took);
      }
      return *std::move(s);
    }
    SendHeartbeats();
  }
}

Status HeadServer::CommitTurn(const storage::WriteBatch& batch) {
  CHECK(!pipeline_.outstanding());
  const TimeMs start = clock_.NowMs();
  const TurnTimes::Micros start_us = TurnTimes::SteadyNow();
  Status s;
  {
    HeartbeatKeeper::Loan loan(heartbeat_keeper_);
    s = store_.Commit(batch);
  }
  turn_times_.Committed(start_us, TurnTimes::SteadyNow());
  const TimeMs took = clock_.NowMs() - start;
  if (took > options_.runner.heartbeat_ms) {
    ++stats_.slow_store_operations;
    spdlog::info("slow commit of {} bytes: {} ms (heartbeats kept going)", batch.bytes(), took);
  }
  return s;
}

void HeadServer::RunLongStoreOperation(const std::function<void()>& op) {
  RunOffLoop(
      [&op] {
        op();
        return Status::Ok();
      },
      "store read", /*bytes=*/0)
      .IgnoreError();
}

Status HeadServer::WaitForSpace(const std::function<Status()>& retry, size_t bytes, Status refused,
                                const std::atomic<bool>& stop) {
  out_of_space_ = refused.message();
  spdlog::error(
      "commit refused: {}. The head takes no new work (submit, add-trial, stop, "
      "pause, resume are refused) and holds its workers until the commit succeeds; "
      "reads are served. Free space on the data directory's disk.",
      out_of_space_);
  // Nothing of this turn may leave before its commit: workers wait (they keep
  // their results) and hear heartbeats; clients get reads (of the state
  // including this turn) and refusals. Worker messages stay queued.
  // The turn's own replies (mutations it applied) wait for its commit.
  std::vector<PendingClientReply> held;
  held.swap(client_replies_);
  zmq::pollitem_t item{client_socket_.handle(), 0, ZMQ_POLLIN, 0};
  TimeMs last_try = clock_.NowMs();
  while (!stop.load()) {
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(options_.runner.heartbeat_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) return Status::IOError(std::string("poll: ") + e.what());
    }
    DrainClients();
    SendClientReplies();
    SendHeartbeats();
    if (clock_.NowMs() - last_try < options_.runner.heartbeat_ms) continue;
    last_try = clock_.NowMs();
    Status s = RunOffLoop(retry, "commit", bytes);
    if (s.code() == StatusCode::kResourceExhausted) continue;
    out_of_space_.clear();
    client_replies_.swap(held);
    if (s.ok()) spdlog::info("commit succeeded: space is back; the head takes work again");
    return s;
  }
  client_replies_.swap(held);
  return refused;
}

bool HeadServer::TurnWaitsForItsCommit() {
  return !client_replies_.empty() || (loop_reads_ != nullptr && loop_reads_->HasWaiting()) ||
         (checkpoint_files_ != nullptr && checkpoint_files_->HasPending()) ||
         !out_of_space_.empty();
}

void HeadServer::HandOverTurn(storage::WriteBatch batch, uint64_t results) {
  if (batch.empty() && after_commit_.empty() && results == 0 &&
      (results_dir_ == nullptr || !results_dir_->HasRows())) {
    return;  // a turn of timers and heartbeats
  }
  CommitActions actions;
  actions.after_commit.swap(after_commit_);
  actions.held.swap(held_this_turn_);
  if (results_dir_ != nullptr) actions.rows = results_dir_->TakeRows();
  actions.results = results;
  actions.oldest_unread = turn_times_.oldest_unread();
  if (!batch.empty()) {
    actions.ticket = pipeline_.CommitLater(std::move(batch));
    turn_times_.CommitHandedOver();
    pipeline_.AwaitRoom();
  } else if (pipeline_.outstanding()) {
    // Nothing of its own to commit, but what it sends may acknowledge what
    // an outstanding commit holds (a replayed result's ACK): after them.
    actions.ticket = pipeline_.last_ticket();
  } else {
    RunCommitActions(actions);
    return;
  }
  commit_actions_.push_back(std::move(actions));
}

void HeadServer::RunCommitActions(CommitActions& actions) {
  // The turn's results are durable: now they may appear in the copy.
  if (results_dir_ != nullptr && !actions.rows.empty()) results_dir_->Write(actions.rows);
  SendQueued(actions.after_commit);
  ReleaseHeld(actions.held);
  if (actions.results > 0) {
    turn_times_.Answered(TurnTimes::SteadyNow(), actions.results, actions.oldest_unread);
  }
}

Status HeadServer::FinishEndedCommits(const std::atomic<bool>& stop) {
  bool any = false;
  while (pipeline_.outstanding()) {
    std::vector<PipelinedStore::Ended> ended = pipeline_.TakeEnded();
    if (ended.empty()) break;
    for (PipelinedStore::Ended& e : ended) {
      turn_times_.CommitEnded(e.start_us, e.end_us);
      const int64_t took_ms = (e.end_us - e.start_us) / 1000;
      if (took_ms > options_.runner.heartbeat_ms) {
        ++stats_.slow_store_operations;
        spdlog::info("slow commit of {} bytes: {} ms (heartbeats kept going)", e.bytes, took_ms);
      }
      if (e.status.code() == StatusCode::kResourceExhausted) {
        // Held, with what was handed over since; once committed, TakeEnded
        // reports them ended.
        Status s = WaitForSpace([this] { return pipeline_.CommitHeld(); }, e.bytes,
                                std::move(e.status), stop);
        if (!s.ok()) {
          spdlog::critical("commit failed: {}; the head stops (restart it on the same data dir)",
                           s.ToString());
          return s;
        }
        continue;
      }
      if (!e.status.ok()) {
        spdlog::critical("commit failed: {}; the head stops (restart it on the same data dir)",
                         e.status.ToString());
        return e.status;
      }
      ++stats_.commits;
      ++stats_.commits_behind_loop;
      any = true;
      while (!commit_actions_.empty() && commit_actions_.front().ticket <= e.through) {
        RunCommitActions(commit_actions_.front());
        commit_actions_.pop_front();
      }
    }
  }
  // What those sends queued that need not wait goes now.
  if (any) SendQueued(before_commit_);
  return Status::Ok();
}

Status HeadServer::DrainCommits(const std::atomic<bool>& stop) {
  if (!pipeline_.outstanding()) return Status::Ok();
  pipeline_.Drain();
  RETURN_IF_ERROR(FinishEndedCommits(stop));
  CHECK(!pipeline_.outstanding());
  CHECK(commit_actions_.empty());
  return Status::Ok();
}

}  // namespace ztune::head
