// ScriptedWorkers: a CommandSink for the fuzz targets that plays the workers'
// side of the protocol in process, so that fuzzed client requests and fuzzed
// stores drive the TrialRunner through real trial lifecycles (create, train,
// checkpoint, pause, restore, reset, stop) instead of stalling at the first
// CREATE_ACTOR. Trainables: "quadratic" trains forever (a result per TRAIN,
// should_checkpoint every 4th iteration), "noop" is done at once, "fail"
// fails every step and refuses RESET. Deterministic; never throws, whatever
// configs the fuzzer made up (tests/fakes/fake_worker_fleet.h reads configs
// and may). Fuzz-target thread only.
#pragma once

#include <charconv>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "head/command_sink.h"
#include "head/trial_runner.h"
#include "storage/store.h"

namespace ztune::fuzz {

class ScriptedWorkers final : public head::CommandSink {
 public:
  void SendToWorker(const WorkerId& worker_id, protocol::Message message,
                    head::SendTiming) override {
    inbox_.emplace_back(worker_id, std::move(message));
  }

  // Registers a worker; `live` are actors it already hosts (a head restart),
  // which it then answers for as if it had created them.
  void Register(head::TrialRunner& runner, const WorkerId& worker_id, double cpus, double gpus,
                const std::vector<std::pair<protocol::LiveActor, std::string>>& live = {}) {
    protocol::Register r;
    for (const auto& [actor, trainable] : live) {
      r.live_actors.push_back(actor);
      actors_[Key(actor.trial_id, actor.attempt)] =
          Actor{trainable, actor.iteration, actor.acked_seq};
    }
    r.worker_id = worker_id;
    r.incarnation = 1;
    r.name = worker_id;
    r.host = "fuzzhost";
    r.pid = 4242;
    r.resources = {{"CPU", cpus}, {"GPU", gpus}, {"memory", 8e9}};
    for (int i = 0; i < static_cast<int>(gpus); ++i) r.gpu_ids.push_back(i);
    r.trainables = {"fail", "noop", "quadratic"};
    runner.HandleRegister(r);
  }

  // One head turn as the HeadServer runs it: timers and scheduling, the
  // turn's commit, then the workers answer what was sent (their answers are
  // the next turn's input).
  void Turn(head::TrialRunner& runner, storage::Store& store, FakeClock& clock) {
    runner.Tick();
    storage::WriteBatch batch;
    runner.FlushTo(batch);
    if (!batch.empty()) store.Commit(batch).IgnoreError();
    Answer(runner);
    for (const auto& w : workers_) runner.HandleHeartbeat(w);
    clock.AdvanceMs(50);
  }

  // Answers every message sent so far (not those the answers cause).
  void Answer(head::TrialRunner& runner) {
    std::vector<std::pair<WorkerId, protocol::Message>> inbox;
    inbox.swap(inbox_);
    for (auto& [worker, message] : inbox) Answer(runner, worker, message);
  }

 private:
  struct Actor {
    std::string trainable;
    int64_t iteration = 0;
    uint64_t seq = 0;
  };

  static std::string Key(const std::string& trial, uint64_t attempt) {
    return trial + "#" + std::to_string(attempt);
  }

  static void Reply(head::TrialRunner& runner, const WorkerId& worker, uint64_t rid,
                    const std::string& trial, uint64_t attempt, bool ok, std::string error = {},
                    Json data = Json::object(), std::string payload = {}) {
    if (rid == 0) return;  // no answer wanted
    protocol::Reply r;
    r.rid = rid;
    r.trial_id = trial;
    r.attempt = attempt;
    r.ok = ok;
    r.error = std::move(error);
    r.data = std::move(data);
    runner.HandleReply(worker, r, std::move(payload));
  }

  void Answer(head::TrialRunner& runner, const WorkerId& w, const protocol::Message& m) {
    if (auto* reg = std::get_if<protocol::Registered>(&m.body)) {
      workers_.insert(WorkerId(reg->worker_id));  // as the worker reads it off the wire
    } else if (auto* c = std::get_if<protocol::CreateActor>(&m.body)) {
      const std::string key = Key(c->trial_id, c->attempt);
      if (actors_.count(key)) {
        Reply(runner, w, c->rid, c->trial_id, c->attempt, false, "actor already exists");
      } else if (c->trainable != "quadratic" && c->trainable != "noop" && c->trainable != "fail") {
        Reply(runner, w, c->rid, c->trial_id, c->attempt, false,
              "unknown trainable '" + c->trainable + "'");
      } else {
        actors_[key] = Actor{c->trainable, 0, 0};
        Reply(runner, w, c->rid, c->trial_id, c->attempt, true);
      }
    } else if (auto* t = std::get_if<protocol::Train>(&m.body)) {
      protocol::ResultBatch batch;
      batch.rid = t->rid;
      batch.trial_id = t->trial_id;
      batch.attempt = t->attempt;
      auto it = actors_.find(Key(t->trial_id, t->attempt));
      if (it == actors_.end()) {
        batch.failed = true;
        batch.error = "no actor for trial " + t->trial_id;
      } else if (it->second.trainable == "fail") {
        batch.failed = true;
        batch.error = "step of iteration " + std::to_string(it->second.iteration + 1) +
                      " failed: scripted";
      } else {
        Actor& a = it->second;
        const int64_t i = ++a.iteration;
        Json result{{"training_iteration", i},
                    {"loss", 1.0 / static_cast<double>(i)},
                    {"eval", {{"acc", static_cast<double>(i % 10) / 10}}},
                    {"timesteps_this_iter", 1},
                    {"time_this_iter_s", 0.01},
                    {"time_total_s", 0.01 * static_cast<double>(i)},
                    {"trial_id", t->trial_id},
                    {"done", a.trainable == "noop"}};
        if (i % 4 == 0) result["should_checkpoint"] = true;
        batch.results.push_back({++a.seq, protocol::RawResult::FromJson(result)});
      }
      runner.HandleResultBatch(w, batch);
    } else if (auto* s = std::get_if<protocol::Save>(&m.body)) {
      auto it = actors_.find(Key(s->trial_id, s->attempt));
      if (it == actors_.end()) {
        Reply(runner, w, s->rid, s->trial_id, s->attempt, false, "no actor");
      } else {
        const int64_t i = it->second.iteration;
        std::string payload = "ckpt:" + std::to_string(i);
        Json data{{"iteration", i}, {"bytes", payload.size()}, {"storage", s->storage}};
        Reply(runner, w, s->rid, s->trial_id, s->attempt, true, {}, std::move(data),
              std::move(payload));
      }
    } else if (auto* r = std::get_if<protocol::Restore>(&m.body)) {
      auto it = actors_.find(Key(r->trial_id, r->attempt));
      int64_t i = 0;
      const std::string& p = m.payload;
      if (it == actors_.end()) {
        Reply(runner, w, r->rid, r->trial_id, r->attempt, false, "no actor");
      } else if (p.rfind("ckpt:", 0) != 0 ||
                 std::from_chars(p.data() + 5, p.data() + p.size(), i).ec != std::errc()) {
        Reply(runner, w, r->rid, r->trial_id, r->attempt, false,
              "restore failed: not a ztune checkpoint (bad magic)");
      } else {
        it->second.iteration = i;
        Reply(runner, w, r->rid, r->trial_id, r->attempt, true, {}, Json{{"iteration", i}});
      }
    } else if (auto* rs = std::get_if<protocol::Reset>(&m.body)) {
      auto it = actors_.find(Key(rs->trial_id, rs->attempt));
      if (it == actors_.end()) {
        Reply(runner, w, rs->rid, rs->new_trial_id, rs->new_attempt, false, "no actor");
      } else if (it->second.trainable == "fail") {
        Reply(runner, w, rs->rid, rs->trial_id, rs->attempt, true, {}, Json{{"reset", false}});
      } else {
        Actor a{it->second.trainable, 0, 0};
        actors_.erase(it);
        actors_[Key(rs->new_trial_id, rs->new_attempt)] = a;
        Reply(runner, w, rs->rid, rs->new_trial_id, rs->new_attempt, true, {},
              Json{{"reset", true}});
      }
    } else if (auto* st = std::get_if<protocol::Stop>(&m.body)) {
      actors_.erase(Key(st->trial_id, st->attempt));
      Reply(runner, w, st->rid, st->trial_id, st->attempt, true);
    } else if (auto* ex = std::get_if<protocol::Export>(&m.body)) {
      Json exports = Json::object();
      for (const auto& f : ex->formats) exports[f] = "model in " + f;
      Reply(runner, w, ex->rid, ex->trial_id, ex->attempt, true, {},
            Json{{"exports", std::move(exports)}});
    }
    // ACK, HEARTBEAT, DISCONNECT: nothing to answer.
  }

  std::vector<std::pair<WorkerId, protocol::Message>> inbox_;
  std::map<std::string, Actor> actors_;
  std::set<WorkerId> workers_;
};

}  // namespace ztune::fuzz
