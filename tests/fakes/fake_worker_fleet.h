// FakeWorkerFleet: scripted workers for socket-free TrialRunner tests. It plays
// the worker side of the protocol for whatever the runner sent: actors are
// created, train a closed-form quadratic, save/restore their iteration, stop.
// Failures can be injected per (trial, iteration). Test-thread only.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "head/trial_runner.h"
#include "storage/store.h"
#include "tests/fakes/recording_command_sink.h"

namespace ztune::testing {

class FakeWorkerFleet {
 public:
  struct Actor {
    WorkerId worker_id;
    std::string trainable;
    int64_t iteration = 0;
    uint64_t seq = 0;
    bool restored = false;
    int64_t num_resets = 0;  // actor state: survives RESET, not restored
    int64_t id = 0;          // which physical actor this is
  };

  FakeWorkerFleet(head::TrialRunner& runner, RecordingCommandSink& sink, storage::Store& store)
      : runner_(runner), sink_(sink), store_(store) {}

  void Register(const WorkerId& worker_id, double cpus, double gpus = 0,
                std::vector<std::string> trainables = {"quadratic", "noop", "fail"}) {
    protocol::Register r;
    r.worker_id = worker_id;
    r.name = worker_id;
    r.host = "localhost";
    r.resources = {{"CPU", cpus}};
    if (gpus > 0) {
      r.resources["GPU"] = gpus;
      for (int i = 0; i < static_cast<int>(gpus); ++i) r.gpu_ids.push_back(i);
    }
    hosted_[worker_id] = std::set<std::string>(trainables.begin(), trainables.end());
    r.trainables = std::move(trainables);
    runner_.HandleRegister(r);
    alive_.insert(worker_id);
  }

  // Re-registers after a head restart, listing its live actors, then replays
  // every unacknowledged result batch (as a real worker's outbox does).
  // `after_register`, if set, runs between the REGISTER and the replay.
  void Reregister(const WorkerId& worker_id, double cpus, uint64_t incarnation = 0,
                  const std::function<void()>& after_register = {}) {
    protocol::Register r;
    r.worker_id = worker_id;
    r.incarnation = incarnation;
    r.name = worker_id;
    r.host = "localhost";
    r.resources = {{"CPU", cpus}};
    r.trainables = {"quadratic", "noop", "fail"};
    for (const auto& [key, a] : actors) {
      if (a.worker_id != worker_id) continue;
      auto hash = key.rfind('#');
      protocol::LiveActor live;
      live.trial_id = key.substr(0, hash);
      live.attempt = std::stoull(key.substr(hash + 1));
      live.iteration = a.iteration;
      r.live_actors.push_back(std::move(live));
    }
    runner_.HandleRegister(r);
    alive_.insert(worker_id);
    if (after_register) after_register();
    for (auto& [key, batches] : outbox) {
      auto it = actors.find(key);
      if (it == actors.end() || it->second.worker_id != worker_id) continue;
      for (const auto& b : batches) {
        ++replayed;
        runner_.HandleResultBatch(worker_id, b);
      }
    }
  }

  // Kills a worker: it answers nothing any more.
  void Kill(const WorkerId& worker_id) { alive_.erase(worker_id); }
  void Heartbeat() {
    for (const auto& w : alive_) runner_.HandleHeartbeat(w);
  }

  // One head turn: Tick, commit, then the workers answer what was sent.
  void Turn() {
    runner_.Tick();
    storage::WriteBatch batch;
    runner_.FlushTo(batch);
    if (!batch.empty()) {
      auto s = store_.Commit(batch);
      (void)s;
    }
    for (auto& sent : sink_.TakeAll()) Answer(sent);
    // A fast worker: what the head sent while handling the answers (a SAVE
    // after a result, the TRAIN after a SAVE) is answered within the same
    // head turn, before its commit.
    for (int round = 1; round < answer_rounds && !sink_.sent.empty(); ++round) {
      for (auto& sent : sink_.TakeAll()) Answer(sent);
    }
  }
  int answer_rounds = 1;

  // Answers everything sent so far, one message at a time, calling
  // `after_each` once the runner has handled each answer.
  void AnswerEach(const std::function<void()>& after_each) {
    for (auto& sent : sink_.TakeAll()) {
      Answer(sent);
      after_each();
    }
  }

  // kill -9 of the head between its Tick and its commit: what it sent at once
  // (SendTiming::kNow) reached the workers; what waited for the commit is lost.
  void DeliverOnlyWhatWasSentNow() {
    for (auto& sent : sink_.TakeAll()) {
      if (sent.timing == head::SendTiming::kNow) Answer(sent);
    }
  }

  // Fail the step of `iteration` of a trial (every attempt unless `once`).
  void FailAt(const TrialId& trial_id, int64_t iteration, bool once = true) {
    fail_at_[trial_id] = {iteration, once};
  }
  // Called on each TRAIN with the current number of actors per worker.
  std::function<void()> on_train;
  int64_t buffer_seen = 0;
  std::vector<protocol::Train> trains;
  int64_t creates = 0;
  int64_t restores = 0;
  int64_t saves = 0;
  int64_t stops = 0;
  int64_t resets = 0;
  int64_t replayed = 0;
  // Unacknowledged result batches per actor key (the worker's outbox).
  std::map<std::string, std::vector<protocol::ResultBatch>> outbox;
  int64_t exports = 0;
  bool hang_stops = false;
  int64_t fail_restores = 0;  // the next this many RESTOREs fail
  // A command for which this returns true is never answered: a hung setup,
  // step or save (the actor's later commands are still answered).
  std::function<bool(const protocol::Body&)> hang;
  std::map<WorkerId, int64_t> created_on;  // actors created per worker
  std::map<std::string, Actor> actors;  // key trial_id + "#" + attempt

  static double Quadratic(const Json& config, int64_t i) {
    double lr = config.value("lr", 0.1), x0 = config.value("x0", 10.0),
           target = config.value("target", 0.0);
    return target + (x0 - target) * std::pow(1 - 2 * lr, static_cast<double>(i));
  }

 private:
  static std::string Key(const std::string& trial, uint64_t attempt) {
    return trial + "#" + std::to_string(attempt);
  }

  void Reply(const WorkerId& worker, uint64_t rid, const std::string& trial, uint64_t attempt,
             bool ok, std::string error = {}, Json data = {}, std::string payload = {}) {
    protocol::Reply r{rid, trial, attempt, ok, std::move(error), std::move(data)};
    runner_.HandleReply(worker, r, std::move(payload));
  }

  void Answer(const RecordingCommandSink::Sent& sent) {
    const WorkerId& w = sent.worker_id;
    if (!alive_.count(w)) return;
    const auto& body = sent.message.body;
    if (hang && hang(body)) return;
    if (auto* c = std::get_if<protocol::CreateActor>(&body)) {
      ++creates;
      if (c->trainable == "missing" || (hosted_.count(w) && !hosted_[w].count(c->trainable))) {
        Reply(w, c->rid, c->trial_id, c->attempt, false,
              "unknown trainable '" + c->trainable + "'");
        return;
      }
      // config.setup_fail_attempts: the trainable's setup raises in attempts
      // up to this one.
      if (static_cast<int64_t>(c->attempt) <= c->config.value("setup_fail_attempts", int64_t{0})) {
        Reply(w, c->rid, c->trial_id, c->attempt, false, "setup raised: injected");
        return;
      }
      // As the real worker: one actor per (trial, attempt).
      if (actors.count(Key(c->trial_id, c->attempt)) > 0) {
        Reply(w, c->rid, c->trial_id, c->attempt, false,
              "actor for trial " + c->trial_id + " attempt " + std::to_string(c->attempt) +
                  " already exists on worker " + w);
        return;
      }
      actors[Key(c->trial_id, c->attempt)] = Actor{w, c->trainable, 0, 0, false, 0, ++next_actor_id};
      created_on[w]++;
      Reply(w, c->rid, c->trial_id, c->attempt, true);
    } else if (auto* r = std::get_if<protocol::Restore>(&body)) {
      ++restores;
      if (fail_restores > 0) {
        --fail_restores;
        Reply(w, r->rid, r->trial_id, r->attempt, false, "checkpoint is damaged: injected");
        return;
      }
      Actor& a = actors[Key(r->trial_id, r->attempt)];
      a.iteration = std::stoll(sent.message.payload.substr(5));
      a.restored = true;
      Reply(w, r->rid, r->trial_id, r->attempt, true);
    } else if (auto* s = std::get_if<protocol::Save>(&body)) {
      ++saves;
      Actor& a = actors[Key(s->trial_id, s->attempt)];
      Reply(w, s->rid, s->trial_id, s->attempt, true, {}, Json{{"iteration", a.iteration}},
            "ckpt:" + std::to_string(a.iteration));
    } else if (auto* ack = std::get_if<protocol::Ack>(&body)) {
      protocol::ForEachAck(*ack, [&](const protocol::AckEntry& e) {
        auto& batches = outbox[Key(e.trial_id, e.attempt)];
        std::erase_if(batches, [&](const protocol::ResultBatch& b) {
          return b.results.empty() || b.results.back().seq <= e.seq;
        });
      });
    } else if (auto* rs = std::get_if<protocol::Reset>(&body)) {
      ++resets;
      auto it = actors.find(Key(rs->trial_id, rs->attempt));
      if (it == actors.end()) {
        Reply(w, rs->rid, rs->new_trial_id, rs->new_attempt, false, "no actor");
        return;
      }
      if (it->second.trainable == "fail") {
        Reply(w, rs->rid, rs->new_trial_id, rs->new_attempt, true, {}, Json{{"reset", false}});
        return;
      }
      Actor a = it->second;
      actors.erase(it);
      a.iteration = 0;
      a.seq = 0;
      a.restored = false;
      a.num_resets++;
      actors[Key(rs->new_trial_id, rs->new_attempt)] = a;
      Reply(w, rs->rid, rs->new_trial_id, rs->new_attempt, true, {}, Json{{"reset", true}});
    } else if (auto* ex = std::get_if<protocol::Export>(&body)) {
      ++exports;
      auto it = actors.find(Key(ex->trial_id, ex->attempt));
      Json out = Json::object();
      for (const auto& f : ex->formats) {
        out[f] = Json{{"iteration", it == actors.end() ? -1 : it->second.iteration}}.dump();
      }
      Reply(w, ex->rid, ex->trial_id, ex->attempt, true, {}, Json{{"exports", out}});
    } else if (auto* st = std::get_if<protocol::Stop>(&body)) {
      if (hang_stops) return;  // the actor's stop never finishes
      ++stops;
      actors.erase(Key(st->trial_id, st->attempt));
      Reply(w, st->rid, st->trial_id, st->attempt, true);
    } else if (auto* t = std::get_if<protocol::Train>(&body)) {
      trains.push_back(*t);
      if (on_train) on_train();
      auto it = actors.find(Key(t->trial_id, t->attempt));
      if (it == actors.end()) return;
      Actor& a = it->second;
      const head::Trial* trial = runner_.FindTrial(TrialId(t->trial_id));
      protocol::ResultBatch batch;
      batch.rid = t->rid;
      batch.trial_id = t->trial_id;
      batch.attempt = t->attempt;
      for (int64_t k = 0; k < std::max<int64_t>(1, t->buffer_length); ++k) {
        int64_t i = a.iteration + 1;
        auto f = fail_at_.find(t->trial_id);
        if (f != fail_at_.end() && f->second.first == i) {
          if (f->second.second) fail_at_.erase(f);
          batch.failed = true;
          batch.error = "step of iteration " + std::to_string(i) + " failed: injected";
          break;
        }
        a.iteration = i;
        double x = Quadratic(trial->config, i);
        // config.done_at: the trainable reports done itself at that iteration.
        const bool done = trial->config.value("done_at", int64_t{0}) == i;
        Json result{{"training_iteration", i}, {"x", x},         {"loss", x * x},
                    {"done", done},            {"num_resets", a.num_resets}, {"actor", a.id}};
        int64_t user_freq = trial->config.value("user_checkpoint_freq", int64_t{0});
        bool user_ckpt = user_freq > 0 && i % user_freq == 0;
        if (user_ckpt) result["should_checkpoint"] = true;
        batch.results.push_back({++a.seq, protocol::RawResult::FromJson(result)});
        if (user_ckpt) break;  // a buffered batch ends at should_checkpoint
      }
      outbox[Key(t->trial_id, t->attempt)].push_back(batch);
      runner_.HandleResultBatch(w, batch);
    }
  }

  head::TrialRunner& runner_;
  RecordingCommandSink& sink_;
  storage::Store& store_;
  std::set<WorkerId> alive_;
  std::map<WorkerId, std::set<std::string>> hosted_;  // trainables per worker
  std::map<std::string, std::pair<int64_t, bool>> fail_at_;
  int64_t next_actor_id = 0;
};

}  // namespace ztune::testing
