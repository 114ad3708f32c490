// TrialRecovery: what a restarted head does with the trials its store holds
// (the epoch bumped, RUNNING trials await their worker or go back to the
// queue), the live actors a registering worker reports (re-attached, or
// stopped when the head does not own them), a re-attach grace running out,
// and Ray's experiment resume policies. Over an in-memory store, a fake clock,
// a recording command sink and the real parts, with strict invariants.
#include "head/trial_recovery.h"

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "head/trial_records.h"
#include "storage/in_memory_store.h"
#include "storage/keys.h"
#include "tests/head/runner_parts_fixture.h"

namespace ztune::head {
namespace {

constexpr char kExp[] = "e0001";

class TrialRecoveryTest : public RunnerPartsTest {
 protected:
  TrialRecoveryTest()
      : RunnerPartsTest(/*strict_invariants=*/true),
        recovery_(TrialRecovery::Parts{store_, book_, lifecycle_, executor_, actors_, groups_,
                                       waits_, searcher_, sink_, clock_, batch_},
                  Options()) {}

  // Grace 0: two liveness windows, 2 x 100 ms x 3 = 600 ms.
  static TrialRecovery::Options Options() {
    TrialRecovery::Options o;
    o.reattach_grace_ms = 0;
    o.heartbeat_ms = 100;
    o.liveness = 3;
    o.force_cleanup_ms = 30'000;
    return o;
  }

  // Stores experiment e0001 with `trials` trial ids issued and its search at
  // next_variant of total.
  void StoreExperiment(uint64_t trials, uint64_t next_variant, uint64_t total,
                       bool finished = false) {
    Experiment e;
    e.experiment_id = kExp;
    auto spec = ExperimentSpec::Parse(
        Json{{"trainable", "noop"}, {"param_space", {{"lr", {{"uniform", {0, 1}}}}}}}, 7);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    e.spec = *spec;
    e.next_variant = next_variant;
    e.total_variants = total;
    e.next_trial_index = trials;
    e.finished = finished;
    storage::WriteBatch b;
    b.Put(storage::Family::kExperiments, e.experiment_id, e.ToJson().dump());
    ASSERT_TRUE(store_.Commit(b).ok());
  }

  static Trial MakeTrial(uint64_t index, TrialStatus status) {
    Trial t;
    t.trial_id = TrialIdFor(kExp, index);
    t.experiment_id = kExp;
    t.seq = index + 1;
    t.config = Json{{"lr", 0.1 * static_cast<double>(index + 1)}};
    t.status = status;
    return t;
  }

  // A trial that was RUNNING attempt 1 at iteration 2, its actor on `worker`
  // (one CPU there) unless `worker` is empty.
  static Trial RunningOn(uint64_t index, const std::string& worker) {
    Trial t = MakeTrial(index, TrialStatus::kRunning);
    t.attempt = 1;
    t.iteration = 2;
    t.last_result = Json{{"training_iteration", 2}, {"done", false}};
    if (!worker.empty()) {
      t.actor_worker = WorkerId(worker);
      t.placement.bundles.push_back(
          {WorkerId(worker), ResourceSet::FromDoubles({{"CPU", 1}}), {}});
    }
    return t;
  }

  void StoreTrial(const Trial& t) {
    storage::WriteBatch b;
    PutTrialRecord(b, t);
    PutChildRecords(b, t);
    ASSERT_TRUE(store_.Commit(b).ok());
  }

  void Load() {
    Status s = recovery_.Load();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  Trial& T(uint64_t index) { return book_.TrialRef(TrialIdFor(kExp, index)); }
  Experiment& E() { return *book_.FindExperiment(kExp); }
  std::string RequestKey() { return E().request_key; }

  // The next trial the scheduler would start (any shape has resources).
  std::optional<TrialId> NextToRun() {
    return scheduler_.ChooseTrialToRun([](const std::string&) { return true; });
  }

  static protocol::Register Registration(const std::string& worker,
                                         std::vector<protocol::LiveActor> live) {
    protocol::Register r;
    r.worker_id = worker;
    r.incarnation = 1;
    r.resources = {{"CPU", 2}};
    r.trainables = {"noop"};
    r.live_actors = std::move(live);
    return r;
  }

  static protocol::LiveActor Live(const TrialId& id, uint64_t attempt, int64_t iteration) {
    protocol::LiveActor a;
    a.trial_id = id.str();
    a.attempt = attempt;
    a.iteration = iteration;
    return a;
  }

  // Trial 0 awaits attempt 1 on w1, which reports attempts 1 and 2 of it.
  void ExpectAwaitedAttemptReattached(bool later_first) {
    StoreExperiment(1, 1, 1);
    StoreTrial(RunningOn(0, "w1"));
    Load();
    ledger_.AddWorker(WorkerId("w1"), ResourceSet::FromDoubles({{"CPU", 2}}), {});
    std::vector<protocol::LiveActor> live = {Live(T(0).trial_id, 1, 2),
                                             Live(T(0).trial_id, 2, 0)};
    if (later_first) std::swap(live[0], live[1]);
    recovery_.OnRegistered(Registration("w1", live), /*reconnected=*/false);
    EXPECT_EQ(T(0).phase, TrialPhase::kTraining);
    EXPECT_EQ(T(0).attempt, 1u);
    EXPECT_EQ(T(0).worker_id, "w1");
    ASSERT_EQ(sink_.Count<protocol::Stop>(), 1u);
    for (const auto& sent : sink_.sent) {
      if (const auto* stop = std::get_if<protocol::Stop>(&sent.message.body)) {
        EXPECT_EQ(stop->attempt, 2u) << "the later, never-stored attempt is the stray";
      }
    }
    CheckAll();
  }

  void CheckAll() {
    for (const TrialId& id : E().trial_ids) lifecycle_.CheckInvariants(book_.TrialRef(id));
  }

  storage::InMemoryStore store_;
  TrialRecovery recovery_;
};

// Load bumps the stored epoch into the batch; a RUNNING trial with a recorded
// worker awaits it for the grace (two liveness windows), one without goes
// back to the queue as PENDING, a finished one stays as it is.
TEST_F(TrialRecoveryTest, LoadBumpsTheEpochAndSortsTheRunningTrials) {
  storage::WriteBatch meta;
  meta.Put(storage::Family::kMeta, storage::kMetaHeadEpoch, "4");
  ASSERT_TRUE(store_.Commit(meta).ok());
  StoreExperiment(3, 3, 3);
  StoreTrial(RunningOn(0, "w1"));
  StoreTrial(RunningOn(1, ""));
  StoreTrial(MakeTrial(2, TrialStatus::kTerminated));
  Load();

  EXPECT_EQ(recovery_.epoch(), 5u);
  const auto* epoch = batch_.NewestWrite(storage::Family::kMeta, storage::kMetaHeadEpoch);
  ASSERT_NE(epoch, nullptr);
  EXPECT_EQ(epoch->value, "5");

  EXPECT_EQ(T(0).status, TrialStatus::kRunning);
  EXPECT_EQ(T(0).phase, TrialPhase::kAwaitingReattach);
  EXPECT_EQ(T(0).actor_worker, "w1");
  EXPECT_EQ(T(0).worker_id, "") << "no actor held until its worker reports it";
  EXPECT_TRUE(waits_.AwaitingReattach(T(0).trial_id));
  EXPECT_EQ(waits_.Deadline(T(0).trial_id), clock_.NowMs() + 600);

  EXPECT_EQ(T(1).status, TrialStatus::kPending);
  EXPECT_EQ(T(1).phase, TrialPhase::kIdle);
  EXPECT_EQ(scheduler_.NumWaiting(RequestKey()), 1u);
  EXPECT_EQ(NextToRun(), T(1).trial_id);

  EXPECT_EQ(T(2).status, TrialStatus::kTerminated);
  EXPECT_FALSE(E().finished) << "two trials are live";
  CheckAll();
}

// Whatever order a worker lists its actors in, the awaited attempt is
// re-attached and a later attempt of the same trial (one the store never
// saw) is stopped. (Listed first, the later one raised the trial past the
// awaited attempt, which was then stopped too and the trial waited out its
// grace with its worker present.)
TEST_F(TrialRecoveryTest, TheAwaitedAttemptIsReattachedWhenALaterOneIsListedFirst) {
  ExpectAwaitedAttemptReattached(/*later_first=*/true);
}

TEST_F(TrialRecoveryTest, TheAwaitedAttemptIsReattachedWhenItIsListedFirst) {
  ExpectAwaitedAttemptReattached(/*later_first=*/false);
}

// The registering worker's live actors are adopted: one level with the store
// trains on (its TRAIN after the commit, under the new epoch's rids), one
// ahead of the store awaits its replayed results first.
TEST_F(TrialRecoveryTest, OnRegisteredReattachesTheLiveActorsOfAwaitingTrials) {
  StoreExperiment(2, 2, 2);
  StoreTrial(RunningOn(0, "w1"));
  StoreTrial(RunningOn(1, "w1"));
  Load();
  ledger_.AddWorker(WorkerId("w1"), ResourceSet::FromDoubles({{"CPU", 2}}), {});
  recovery_.OnRegistered(
      Registration("w1", {Live(T(0).trial_id, 1, 2), Live(T(1).trial_id, 1, 4)}),
      /*reconnected=*/false);

  EXPECT_EQ(T(0).phase, TrialPhase::kTraining);
  EXPECT_EQ(T(0).worker_id, "w1");
  EXPECT_NE(T(0).group_id, 0u);
  EXPECT_EQ(T(0).attempt, 1u);
  EXPECT_EQ(T(1).phase, TrialPhase::kAwaitingReplay);
  EXPECT_EQ(T(1).worker_id, "w1");
  EXPECT_TRUE(waits_.AwaitingReplay(T(1).trial_id));
  EXPECT_TRUE(waits_.ReplayReached(T(1).trial_id, 4));
  EXPECT_FALSE(waits_.ReplayReached(T(1).trial_id, 3));
  EXPECT_FALSE(waits_.AwaitingReattach(T(0).trial_id));
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w1")), 2);
  EXPECT_DOUBLE_EQ(ledger_.AvailableOf(WorkerId("w1")).Get("CPU"), 0) << "placements re-reserved";

  ASSERT_EQ(sink_.sent.size(), 1u) << "only trial 0's TRAIN; no STOP";
  const auto* train = std::get_if<protocol::Train>(&sink_.sent[0].message.body);
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->trial_id, T(0).trial_id.str());
  EXPECT_EQ(sink_.sent[0].timing, SendTiming::kAfterCommit);
  EXPECT_EQ(train->rid >> 40, recovery_.epoch());
  CheckAll();

  sink_.TakeAll();
  recovery_.OnReplayReached(T(1));
  EXPECT_EQ(T(1).phase, TrialPhase::kTraining);
  EXPECT_EQ(sink_.Count<protocol::Train>(), 1u);
  EXPECT_TRUE(waits_.empty());
  CheckAll();
}

// Actors the head does not own are stopped (rid 0, the head's kill deadline,
// after the commit): an unknown trial's, a finished trial's, and an awaiting
// trial's actor reported by a worker other than its recorded one.
TEST_F(TrialRecoveryTest, OnRegisteredStopsActorsTheHeadDoesNotOwn) {
  StoreExperiment(3, 3, 3);
  StoreTrial(RunningOn(0, "w1"));
  Trial done = MakeTrial(1, TrialStatus::kTerminated);
  done.attempt = 1;
  StoreTrial(done);
  Load();
  ledger_.AddWorker(WorkerId("w2"), ResourceSet::FromDoubles({{"CPU", 2}}), {});
  const TrialId unknown = TrialIdFor(kExp, 9);
  recovery_.OnRegistered(Registration("w2", {Live(unknown, 1, 0), Live(T(1).trial_id, 1, 5),
                                             Live(T(0).trial_id, 1, 2)}),
                         /*reconnected=*/false);

  std::vector<std::string> stopped;
  for (const auto& s : sink_.sent) {
    const auto* stop = std::get_if<protocol::Stop>(&s.message.body);
    ASSERT_NE(stop, nullptr) << "only STOPs are sent";
    EXPECT_EQ(s.worker_id, "w2");
    EXPECT_EQ(stop->rid, 0u);
    EXPECT_EQ(stop->attempt, 1u);
    EXPECT_EQ(stop->kill_after_ms, 30'000);
    EXPECT_EQ(s.timing, SendTiming::kAfterCommit);
    stopped.push_back(stop->trial_id);
  }
  EXPECT_EQ(stopped, (std::vector<std::string>{unknown.str(), T(1).trial_id.str(),
                                               T(0).trial_id.str()}));
  EXPECT_EQ(T(0).phase, TrialPhase::kAwaitingReattach) << "w1 may still report it";
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w2")), 0);
  CheckAll();
}

// A worker's REGISTER lists every actor it hosts: a trial awaiting its
// actor there that the list lacks starts again at once (PENDING, queued,
// same attempt and place, no failure), not when the grace runs out.
// Found by SchedulerE2ETest.PbtExploitsTheSameAfterTheHeadIsKilled: the head
// committed a RESET of trial 3's actor to trial 4 and was killed before
// sending it; the worker reported trial 3's actor, trial 4 sat out 10 s of
// grace while the others ran, and PBT decided differently. A trial awaiting
// another worker still waits; an actor listed is re-attached as before.
TEST_F(TrialRecoveryTest, AnAwaitedActorTheWorkerDoesNotListStartsAgainAtOnce) {
  StoreExperiment(4, 4, 4);
  Trial reset_source = MakeTrial(0, TrialStatus::kPaused);  // its actor was to go to trial 1
  reset_source.attempt = 1;
  StoreTrial(reset_source);
  StoreTrial(RunningOn(1, "w1"));  // the RESET's target: never sent
  StoreTrial(RunningOn(2, "w1"));  // listed: re-attached
  StoreTrial(RunningOn(3, "w2"));  // another worker's
  Load();
  ASSERT_EQ(T(1).phase, TrialPhase::kAwaitingReattach);
  ledger_.AddWorker(WorkerId("w1"), ResourceSet::FromDoubles({{"CPU", 2}}), {});
  recovery_.OnRegistered(Registration("w1", {Live(T(0).trial_id, 1, 2), Live(T(2).trial_id, 1, 2)}),
                         /*reconnected=*/false);

  EXPECT_EQ(T(1).status, TrialStatus::kPending);
  EXPECT_EQ(T(1).phase, TrialPhase::kIdle);
  EXPECT_EQ(T(1).attempt, 1u);
  EXPECT_EQ(T(1).seq, 2u) << "it keeps its place";
  EXPECT_EQ(T(1).num_failures, 0);
  EXPECT_EQ(T(1).actor_worker, "");
  EXPECT_FALSE(waits_.AwaitingReattach(T(1).trial_id));
  EXPECT_EQ(T(2).phase, TrialPhase::kTraining);
  EXPECT_EQ(T(3).phase, TrialPhase::kAwaitingReattach) << "w2 may still report it";
  EXPECT_TRUE(waits_.AwaitingReattach(T(3).trial_id));
  std::vector<std::string> stopped;
  for (const auto& sent : sink_.sent) {
    if (const auto* stop = std::get_if<protocol::Stop>(&sent.message.body)) {
      stopped.push_back(stop->trial_id);
    }
  }
  EXPECT_EQ(stopped, std::vector<std::string>{T(0).trial_id.str()}) << "the paused trial's actor";
  CheckAll();

  // A registration without the trial 3's actor ends its wait too.
  ledger_.AddWorker(WorkerId("w2"), ResourceSet::FromDoubles({{"CPU", 2}}), {});
  recovery_.OnRegistered(Registration("w2", {}), /*reconnected=*/false);
  EXPECT_EQ(T(3).status, TrialStatus::kPending);
  EXPECT_TRUE(waits_.empty());
  CheckAll();
}

// An actor behind the checkpoint its attempt was started from never finished
// its RESTORE (the head died while it streamed): it is stopped, not
// re-attached, and the trial starts again (PENDING, queued, no failure).
// Found by LargeCheckpointE2ETest: the re-attached actor ran from iteration
// 1 and its first result failed the trial ("does not follow iteration 6").
// An actor at or past its checkpoint is re-attached as before.
TEST_F(TrialRecoveryTest, AnActorBehindItsStartingCheckpointIsNotReattached) {
  StoreExperiment(3, 3, 3);
  Trial source = MakeTrial(0, TrialStatus::kTerminated);
  source.attempt = 1;
  source.iteration = 6;
  source.checkpoints.push_back({1, 6, false, 0, {}});
  source.next_checkpoint_id = 2;
  StoreTrial(source);
  Trial restored = RunningOn(1, "w1");  // started from trial 0's checkpoint at 6
  restored.iteration = 0;
  restored.last_result = Json();
  restored.restore_from = source.trial_id;
  StoreTrial(restored);
  Trial own = RunningOn(2, "w1");  // restarted from its own checkpoint at 2
  own.checkpoints.push_back({1, 2, false, 0, {}});
  own.next_checkpoint_id = 2;
  StoreTrial(own);
  Load();
  ledger_.AddWorker(WorkerId("w1"), ResourceSet::FromDoubles({{"CPU", 2}}), {});
  recovery_.OnRegistered(Registration("w1", {Live(T(1).trial_id, 1, 0), Live(T(2).trial_id, 1, 2)}),
                         /*reconnected=*/false);

  EXPECT_EQ(T(1).status, TrialStatus::kPending);
  EXPECT_EQ(T(1).phase, TrialPhase::kIdle);
  EXPECT_EQ(T(1).num_failures, 0);
  EXPECT_EQ(NextToRun(), std::optional<TrialId>(T(1).trial_id));
  EXPECT_EQ(T(2).phase, TrialPhase::kTraining) << "at its checkpoint: re-attached";
  std::vector<std::string> stopped;
  for (const auto& sent : sink_.sent) {
    if (const auto* stop = std::get_if<protocol::Stop>(&sent.message.body)) {
      stopped.push_back(stop->trial_id);
    }
  }
  EXPECT_EQ(stopped, std::vector<std::string>{T(1).trial_id.str()});
  CheckAll();
}

// When the grace runs out (not a ms before) the trial starts again: PENDING
// and queued, same attempt, no failure counted, its recorded worker forgotten.
TEST_F(TrialRecoveryTest, ExpireWaitsRequeuesATrialWhoseWorkerNeverCame) {
  StoreExperiment(1, 1, 1);
  StoreTrial(RunningOn(0, "w1"));
  Load();
  clock_.AdvanceMs(599);
  recovery_.ExpireWaits();
  EXPECT_EQ(T(0).phase, TrialPhase::kAwaitingReattach);
  clock_.AdvanceMs(1);
  recovery_.ExpireWaits();
  EXPECT_EQ(T(0).phase, TrialPhase::kIdle);
  EXPECT_EQ(T(0).status, TrialStatus::kPending);
  EXPECT_EQ(T(0).attempt, 1u);
  EXPECT_EQ(T(0).num_failures, 0);
  EXPECT_EQ(T(0).actor_worker, "");
  EXPECT_TRUE(waits_.empty());
  EXPECT_EQ(NextToRun(), T(0).trial_id);
  EXPECT_TRUE(sink_.sent.empty()) << "no actor was adopted: nothing to stop";
  CheckAll();
}

// A trial a user paused (held) that loses its actor that way stays PAUSED,
// out of the queue, until resumed.
TEST_F(TrialRecoveryTest, ExpireWaitsLeavesAHeldTrialPaused) {
  StoreExperiment(1, 1, 1);
  Trial held = RunningOn(0, "w1");
  held.held = true;
  StoreTrial(held);
  Load();
  ASSERT_EQ(T(0).phase, TrialPhase::kAwaitingReattach);
  clock_.AdvanceMs(600);
  recovery_.ExpireWaits();
  EXPECT_EQ(T(0).status, TrialStatus::kPaused);
  EXPECT_EQ(T(0).phase, TrialPhase::kIdle);
  EXPECT_TRUE(T(0).held);
  EXPECT_EQ(scheduler_.NumWaiting(RequestKey()), 0u);
  EXPECT_EQ(NextToRun(), std::nullopt);
  CheckAll();
}

// "retry" puts the ERROR trials back in the queue under their ids and
// reopens a finished experiment; a TERMINATED trial is left alone.
TEST_F(TrialRecoveryTest, ResumeRetryRequeuesTheErroredTrials) {
  StoreExperiment(3, 3, 3, /*finished=*/true);
  for (uint64_t i : {0, 1}) {
    Trial t = MakeTrial(i, TrialStatus::kError);
    t.error = "boom";
    t.end_time = 17;
    t.num_failures = 1;
    StoreTrial(t);
  }
  StoreTrial(MakeTrial(2, TrialStatus::kTerminated));
  Load();
  ASSERT_TRUE(E().finished);

  auto r = recovery_.ResumeExperiment(kExp, "retry", /*unfinished=*/true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["retried"], (Json::array({T(0).trial_id.str(), T(1).trial_id.str()})));
  EXPECT_TRUE((*r)["restarted"].empty());
  EXPECT_TRUE((*r)["terminated"].empty());
  for (uint64_t i : {0, 1}) {
    EXPECT_EQ(T(i).status, TrialStatus::kPending);
    EXPECT_EQ(T(i).error, "");
    EXPECT_EQ(T(i).end_time, 0);
  }
  EXPECT_EQ(T(2).status, TrialStatus::kTerminated);
  EXPECT_EQ(scheduler_.NumWaiting(RequestKey()), 2u);
  EXPECT_EQ(NextToRun(), T(0).trial_id);
  EXPECT_FALSE(E().finished);
  EXPECT_EQ(E().live_trials, 2);
  CheckAll();
}

// "restart" adds a fresh PENDING trial with the same config for each ERROR
// trial, which stays ERROR.
TEST_F(TrialRecoveryTest, ResumeRestartAddsAFreshTrialPerErroredOne) {
  StoreExperiment(2, 2, 2, /*finished=*/true);
  StoreTrial(MakeTrial(0, TrialStatus::kError));
  StoreTrial(MakeTrial(1, TrialStatus::kTerminated));
  Load();

  auto r = recovery_.ResumeExperiment(kExp, "restart", /*unfinished=*/true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TrialId fresh = TrialIdFor(kExp, 2);
  EXPECT_EQ((*r)["restarted"],
            (Json::array({Json{{"from", T(0).trial_id.str()}, {"trial_id", fresh.str()}}})));
  EXPECT_TRUE((*r)["retried"].empty());
  EXPECT_EQ(T(0).status, TrialStatus::kError);
  EXPECT_EQ(T(2).status, TrialStatus::kPending);
  EXPECT_EQ(T(2).config, T(0).config);
  EXPECT_EQ(T(2).attempt, 0u);
  EXPECT_EQ(E().trial_ids.size(), 3u);
  EXPECT_EQ(E().TotalTrials(), 3u);
  EXPECT_EQ(E().added_trials, 1u) << "not a variant: the search does not move";
  EXPECT_EQ(NextToRun(), fresh);
  EXPECT_FALSE(E().finished);
  CheckAll();
}

// A trial restarted once is not restarted (nor retried) again, also after
// a head restart: its fresh trial stands for it (Ray replaces the trial).
// Once the fresh trial errs, it is the one restarted.
TEST_F(TrialRecoveryTest, ResumeRestartTwiceRestartsEachErroredTrialOnce) {
  StoreExperiment(2, 2, 2, /*finished=*/true);
  StoreTrial(MakeTrial(0, TrialStatus::kError));
  StoreTrial(MakeTrial(1, TrialStatus::kTerminated));
  Load();
  const TrialId fresh = TrialIdFor(kExp, 2);
  ASSERT_TRUE(recovery_.ResumeExperiment(kExp, "restart", /*unfinished=*/true).ok());
  EXPECT_EQ(T(0).restarted_as, fresh);

  for (const char* errored : {"restart", "retry"}) {
    SCOPED_TRACE(errored);
    auto again = recovery_.ResumeExperiment(kExp, errored, /*unfinished=*/true);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_TRUE((*again)["restarted"].empty()) << again->dump();
    EXPECT_TRUE((*again)["retried"].empty()) << again->dump();
    EXPECT_EQ(T(0).status, TrialStatus::kError);
    EXPECT_EQ(E().trial_ids.size(), 3u);
  }

  // The link is part of the record: a restarted head knows it too.
  Result<Trial> stored = Trial::FromJson(Json::parse(T(0).ToRecordText()));
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->restarted_as, fresh);
  CheckAll();
}

// An unknown experiment is NotFound and a bad `errored` InvalidArgument, both
// before anything changes; `unfinished` false then terminates what is live.
TEST_F(TrialRecoveryTest, ResumeRefusesBadArgumentsBeforeChangingAnything) {
  StoreExperiment(1, 1, 1);
  StoreTrial(MakeTrial(0, TrialStatus::kPending));
  Load();

  auto unknown = recovery_.ResumeExperiment("e0009", "retry", true);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  auto bad = recovery_.ResumeExperiment(kExp, "again", /*unfinished=*/false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(T(0).status, TrialStatus::kPending) << "the refused call terminated nothing";
  EXPECT_FALSE(E().stopped);

  auto stop = recovery_.ResumeExperiment(kExp, "", /*unfinished=*/false);
  ASSERT_TRUE(stop.ok()) << stop.status().ToString();
  EXPECT_EQ((*stop)["terminated"], (Json::array({T(0).trial_id.str()})));
  EXPECT_EQ(T(0).status, TrialStatus::kTerminated);
  EXPECT_TRUE(E().stopped);
  EXPECT_TRUE(E().finished);
}

}  // namespace
}  // namespace ztune::head
