// TrialLauncher: how a waiting trial gets an actor (Ray's start_trial and
// reset_trial) and what the answers to those starts do: a fresh start on a
// ready placement group (CREATE_ACTOR, RESTORE with a checkpoint, TRAIN after
// the commit), a cached actor preferred and re-keyed by RESET, a shape without
// resources that blocks no other, and failed setups, restores and RESETs.
// Over the real parts (runner_parts_fixture.h) with strict invariants, an
// in-memory store, a fake clock and a recording command sink.
#include "head/trial_launcher.h"

#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "head/checkpoint_manager.h"
#include "head/worker_registry.h"
#include "storage/in_memory_store.h"
#include "tests/head/runner_parts_fixture.h"

namespace ztune::head {
namespace {

using Sent = ztune::testing::RecordingCommandSink::Sent;

class TrialLauncherTest : public RunnerPartsTest {
 protected:
  TrialLauncherTest() : RunnerPartsTest(/*strict_invariants=*/true) {}

  // An experiment of trainable "noop" (one CPU, max_failures 1) with `extra`
  // merged into its spec; its search has nothing more to yield.
  Experiment& AddExperiment(const Json& extra = Json::object()) {
    Json j = {{"trainable", "noop"},
              {"resources", {{"bundles", Json::array({{{"CPU", 1}}})}}},
              {"max_failures", 1}};
    j.update(extra);
    auto spec = ExperimentSpec::Parse(j, 7);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    Experiment e;
    e.experiment_id = book_.NextExperimentId();
    e.spec = std::move(spec).value();
    return book_.AddExperiment(std::move(e));
  }

  // A new PENDING trial of `e`, queued.
  Trial& Queued(Experiment& e, double lr = 0.1) { return lifecycle_.NewTrial(e, Json{{"lr", lr}}); }

  // One ready placement group of `e`'s shape.
  void ReadyGroup(const Experiment& e) {
    groups_.Stage(e.spec.resources, e.request_key);
    ASSERT_EQ(groups_.Update(), 1);
    ASSERT_TRUE(groups_.HasReady(e.request_key));
  }

  // `old` started on a fresh group, then TERMINATED with reuse_actors while
  // another trial waits: its actor is cached (its group in `*group`). The
  // sink is emptied.
  void StartAndCache(Trial& old, const Experiment& e, uint64_t* group = nullptr) {
    ReadyGroup(e);
    launcher_.StartReadyTrials();
    ASSERT_EQ(old.status, TrialStatus::kRunning);
    if (group != nullptr) *group = old.group_id;
    lifecycle_.FinishTrial(old, TrialStatus::kTerminated);
    ASSERT_EQ(actors_.NumCached(e.request_key), 1u);
    sink_.TakeAll();
  }

  // "COMMAND@worker" of each message, in send order.
  static std::vector<std::string> Names(const std::vector<Sent>& sent) {
    std::vector<std::string> out;
    for (const auto& s : sent) {
      out.push_back(std::string(protocol::CommandName(s.message.body)) + "@" + s.worker_id.str());
    }
    return out;
  }

  static protocol::Reply Failed(const std::string& error) {
    protocol::Reply r;
    r.ok = false;
    r.error = error;
    return r;
  }

  static protocol::Reply ResetAnswer(bool accepted) {
    protocol::Reply r;
    r.ok = true;
    r.data = Json{{"reset", accepted}};
    return r;
  }

  storage::InMemoryStore store_;
  CheckpointManager checkpoints_{store_, batch_, sink_};
  TrialLauncher launcher_{TrialLauncher::Parts{book_, lifecycle_, actors_, groups_, executor_,
                                               scheduler_, checkpoints_, registry_}};
};

// A fresh start: CREATE_ACTOR then TRAIN (no RESTORE without a checkpoint),
// both after the commit, attempt 1, the trial RUNNING and starting in its group.
TEST_F(TrialLauncherTest, AFreshStartSendsCreateAndTrainAfterTheCommit) {
  AddWorker("w1", {"noop"});
  Experiment& e = AddExperiment();
  Trial& t = Queued(e, 0.25);
  ReadyGroup(e);

  launcher_.StartReadyTrials();

  const std::vector<Sent> sent = sink_.TakeAll();
  ASSERT_EQ(Names(sent), (std::vector<std::string>{"CREATE_ACTOR@w1", "TRAIN@w1"}));
  for (const auto& s : sent) EXPECT_EQ(s.timing, SendTiming::kAfterCommit);
  const auto& create = std::get<protocol::CreateActor>(sent[0].message.body);
  EXPECT_EQ(create.trial_id, t.trial_id.str());
  EXPECT_EQ(create.attempt, 1u);
  EXPECT_EQ(create.trainable, "noop");
  EXPECT_EQ(create.config, (Json{{"lr", 0.25}}));
  EXPECT_EQ(create.resources, (std::map<std::string, double>{{"CPU", 1}}));
  const auto& train = std::get<protocol::Train>(sent[1].message.body);
  EXPECT_EQ(train.trial_id, t.trial_id.str());
  EXPECT_EQ(train.attempt, 1u);
  EXPECT_TRUE(sent[0].message.payload.empty());

  EXPECT_EQ(t.attempt, 1u);
  EXPECT_EQ(t.status, TrialStatus::kRunning);
  EXPECT_EQ(t.phase, TrialPhase::kStarting);
  EXPECT_EQ(t.worker_id, "w1");
  EXPECT_EQ(t.actor_worker, "w1");
  ASSERT_NE(groups_.Find(t.group_id), nullptr);
  EXPECT_EQ(groups_.Find(t.group_id)->state, PlacementGroupManager::State::kInUse);
  EXPECT_EQ(groups_.Find(t.group_id)->trial_id, t.trial_id);
  EXPECT_EQ(groups_.NumInUse(), 1);
  EXPECT_FALSE(groups_.HasReady(e.request_key));
  ASSERT_EQ(t.placement.bundles.size(), 1u);
  EXPECT_EQ(t.placement.bundles[0].worker_id, "w1");
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w1")), 1);
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 0u) << "out of the queue";
  EXPECT_GT(t.start_time, 0);
  EXPECT_EQ(t.num_restores, 0);
  lifecycle_.CheckInvariants(t);
}

// A paused trial's memory checkpoint is restored: RESTORE between CREATE_ACTOR
// and TRAIN carries its bytes, and the trial resumes at its iteration.
TEST_F(TrialLauncherTest, AMemoryCheckpointIsRestoredBetweenCreateAndTrain) {
  AddWorker("w1", {"noop"});
  Experiment& e = AddExperiment();
  Trial& t = book_.AddTrial(e, Json{{"lr", 0.1}});
  ASSERT_TRUE(lifecycle_.SetStatus(t, TrialStatus::kPaused));
  t.iteration = 3;
  t.memory_checkpoint = "memory-bytes";
  lifecycle_.Enqueue(t);
  ReadyGroup(e);

  launcher_.StartReadyTrials();

  const std::vector<Sent> sent = sink_.TakeAll();
  ASSERT_EQ(Names(sent),
            (std::vector<std::string>{"CREATE_ACTOR@w1", "RESTORE@w1", "TRAIN@w1"}));
  EXPECT_EQ(sent[1].message.payload, "memory-bytes");
  EXPECT_EQ(sent[1].timing, SendTiming::kAfterCommit);
  const auto& restore = std::get<protocol::Restore>(sent[1].message.body);
  EXPECT_EQ(restore.trial_id, t.trial_id.str());
  EXPECT_EQ(restore.attempt, 1u);
  EXPECT_TRUE(t.memory_checkpoint.empty()) << "consumed by the start";
  EXPECT_EQ(t.resume_iteration, 3);
  EXPECT_EQ(t.num_restores, 1);
  EXPECT_EQ(t.status, TrialStatus::kRunning);
  lifecycle_.CheckInvariants(t);
}

// A cached actor of the trial's shape is preferred over a ready group: RESET
// re-keys it (no CREATE_ACTOR) and the ready group stays ready.
TEST_F(TrialLauncherTest, ACachedActorIsPreferredOverAReadyGroup) {
  AddWorker("w1", {"noop"});
  Experiment& e = AddExperiment(Json{{"reuse_actors", true}});
  Trial& old = Queued(e, 0.1);
  Trial& next = Queued(e, 0.2);
  uint64_t cached_group = 0;
  StartAndCache(old, e, &cached_group);
  ReadyGroup(e);  // a fresh group of the same shape is ready too

  launcher_.StartReadyTrials();

  const std::vector<Sent> sent = sink_.TakeAll();
  ASSERT_EQ(Names(sent), (std::vector<std::string>{"RESET@w1"}));
  EXPECT_EQ(sent[0].timing, SendTiming::kAfterCommit);
  const auto& reset = std::get<protocol::Reset>(sent[0].message.body);
  EXPECT_EQ(reset.trial_id, old.trial_id.str()) << "addressed to the actor's old key";
  EXPECT_EQ(reset.attempt, 1u);
  EXPECT_EQ(reset.new_trial_id, next.trial_id.str());
  EXPECT_EQ(reset.new_attempt, 1u);
  EXPECT_EQ(reset.config, (Json{{"lr", 0.2}}));
  EXPECT_EQ(next.status, TrialStatus::kRunning);
  EXPECT_EQ(next.phase, TrialPhase::kResetting);
  EXPECT_EQ(next.attempt, 1u);
  EXPECT_EQ(next.group_id, cached_group);
  EXPECT_EQ(next.worker_id, "w1");
  ASSERT_NE(actors_.ResetOf(next.trial_id), nullptr);
  EXPECT_EQ(actors_.ResetOf(next.trial_id)->trial_id, old.trial_id);
  EXPECT_EQ(actors_.NumCached(e.request_key), 0u);
  EXPECT_EQ(groups_.NumReady(e.request_key), 1) << "the fresh group is left for later";
  EXPECT_EQ(groups_.Find(cached_group)->state, PlacementGroupManager::State::kInUse);
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 0u);
  lifecycle_.CheckInvariants(next);
}

// A request shape without resources does not block a later trial of another
// shape that has a ready group; it starts once its own group is ready.
TEST_F(TrialLauncherTest, AShapeWithoutResourcesDoesNotBlockAnotherShape) {
  AddWorker("w1", {"noop"});
  Experiment& big = AddExperiment(
      Json{{"resources", {{"bundles", Json::array({{{"CPU", 2}}})}}}});
  Experiment& small = AddExperiment();
  ASSERT_NE(big.request_key, small.request_key);
  Trial& first = Queued(big);
  Trial& second = Queued(small);
  ASSERT_LT(first.seq, second.seq);
  ReadyGroup(small);

  launcher_.StartReadyTrials();

  EXPECT_EQ(second.status, TrialStatus::kRunning);
  EXPECT_EQ(first.status, TrialStatus::kPending);
  EXPECT_EQ(first.attempt, 0u);
  EXPECT_EQ(scheduler_.NumWaiting(big.request_key), 1u);
  const std::vector<Sent> sent = sink_.TakeAll();
  ASSERT_EQ(Names(sent), (std::vector<std::string>{"CREATE_ACTOR@w1", "TRAIN@w1"}));
  EXPECT_EQ(std::get<protocol::CreateActor>(sent[0].message.body).trial_id,
            second.trial_id.str());

  ReadyGroup(big);
  launcher_.StartReadyTrials();
  EXPECT_EQ(first.status, TrialStatus::kRunning);
  EXPECT_EQ(first.attempt, 1u);
  EXPECT_EQ(sink_.Count<protocol::CreateActor>(), 1u);
  lifecycle_.CheckInvariants(first);
  lifecycle_.CheckInvariants(second);
}

// A failed setup on a worker that hosts the trainable is a retried failure
// (PENDING, queued, one failure, its actor stopped); on a worker that does
// not host it, ERROR at once with a message naming the worker and trainable.
TEST_F(TrialLauncherTest, AFailedSetupIsRetriedOnlyWhereTheTrainableIsHosted) {
  AddWorker("w1", {"noop"}, /*cpus=*/1);
  Experiment& e = AddExperiment(Json{{"max_failures", 3}});
  Trial& t = Queued(e);
  ReadyGroup(e);
  launcher_.StartReadyTrials();
  sink_.TakeAll();

  launcher_.OnCreateReply(t, Failed("setup raised"));
  EXPECT_EQ(t.status, TrialStatus::kPending);
  EXPECT_EQ(t.phase, TrialPhase::kIdle);
  EXPECT_EQ(t.num_failures, 1);
  EXPECT_EQ(t.error, "failed to start: setup raised");
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 1u) << "queued again";
  EXPECT_EQ(Stops(), (std::set<std::string>{"w1/" + t.trial_id.str() + "/1"}));
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w1")), 0);
  lifecycle_.CheckInvariants(t);

  // w1 stays full until its STOP completes; w2 has room but does not host "noop".
  AddWorker("w2", {"other"});
  ReadyGroup(e);
  launcher_.StartReadyTrials();
  ASSERT_EQ(t.worker_id, "w2");
  ASSERT_EQ(t.attempt, 2u);
  sink_.TakeAll();

  launcher_.OnCreateReply(t, Failed("unknown trainable"));
  EXPECT_EQ(t.status, TrialStatus::kError) << "not retried although max_failures is 3";
  EXPECT_EQ(t.num_failures, 2);
  EXPECT_EQ(t.error,
            "failed to start: unknown trainable (worker w2 does not host 'noop'; not retried)");
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 0u);
  EXPECT_EQ(Stops(), (std::set<std::string>{"w2/" + t.trial_id.str() + "/2"}));
  lifecycle_.CheckInvariants(t);
}

// A failed restore gives the checkpoint up and is a retried failure: the
// next start creates the actor from scratch (no RESTORE).
TEST_F(TrialLauncherTest, AFailedRestoreGivesTheCheckpointUpAndRetriesFromScratch) {
  AddWorker("w1", {"noop"});
  Experiment& e = AddExperiment();
  Trial& t = Queued(e);
  t.iteration = 2;
  t.last_result = Json{{"training_iteration", 2}};
  checkpoints_.Add(t, e.spec.checkpoint, "persistent-bytes", 2);  // into the turn's batch
  ASSERT_EQ(t.checkpoints.size(), 1u);
  ReadyGroup(e);
  launcher_.StartReadyTrials();
  std::vector<Sent> sent = sink_.TakeAll();
  ASSERT_EQ(Names(sent),
            (std::vector<std::string>{"CREATE_ACTOR@w1", "RESTORE@w1", "TRAIN@w1"}));
  EXPECT_EQ(sent[1].message.payload, "persistent-bytes");
  EXPECT_EQ(t.resume_iteration, 2);

  launcher_.OnRestoreReply(t, Failed("checkpoint truncated"));
  EXPECT_EQ(t.status, TrialStatus::kPending);
  EXPECT_EQ(t.num_failures, 1);
  EXPECT_EQ(t.checkpoints_given_up_through, t.checkpoints.back().id);
  EXPECT_EQ(t.error,
            "failed to restore from checkpoint: checkpoint truncated (the retry starts from "
            "scratch)");
  lifecycle_.CheckInvariants(t);
  sink_.TakeAll();

  ReadyGroup(e);
  launcher_.StartReadyTrials();
  sent = sink_.TakeAll();
  EXPECT_EQ(Names(sent), (std::vector<std::string>{"CREATE_ACTOR@w1", "TRAIN@w1"}));
  EXPECT_EQ(t.attempt, 2u);
  EXPECT_EQ(t.resume_iteration, 0);
}

// An accepted RESET moves the trial to starting and sends RESTORE (its memory
// checkpoint) and TRAIN on the reused actor; nothing is stopped.
TEST_F(TrialLauncherTest, AnAcceptedResetStartsTheTrialOnTheReusedActor) {
  AddWorker("w1", {"noop"});
  Experiment& e = AddExperiment(Json{{"reuse_actors", true}});
  Trial& old = Queued(e, 0.1);
  Trial& next = book_.AddTrial(e, Json{{"lr", 0.2}});
  ASSERT_TRUE(lifecycle_.SetStatus(next, TrialStatus::kPaused));
  next.memory_checkpoint = "paused-bytes";
  lifecycle_.Enqueue(next);
  StartAndCache(old, e);
  launcher_.StartReadyTrials();
  ASSERT_EQ(next.phase, TrialPhase::kResetting);
  sink_.TakeAll();

  launcher_.OnResetReply(next, ResetAnswer(true));
  EXPECT_EQ(next.phase, TrialPhase::kStarting);
  EXPECT_EQ(next.status, TrialStatus::kRunning);
  EXPECT_EQ(actors_.ResetOf(next.trial_id), nullptr);
  const std::vector<Sent> sent = sink_.TakeAll();
  ASSERT_EQ(Names(sent), (std::vector<std::string>{"RESTORE@w1", "TRAIN@w1"}));
  EXPECT_EQ(sent[0].message.payload, "paused-bytes");
  const auto& train = std::get<protocol::Train>(sent[1].message.body);
  EXPECT_EQ(train.trial_id, next.trial_id.str());
  EXPECT_EQ(train.attempt, 1u);
  EXPECT_TRUE(next.memory_checkpoint.empty());
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w1")), 1);
  lifecycle_.CheckInvariants(next);
}

// A refused RESET (reset_config returned false) stops the actor under its old
// key and ends the trial in ERROR at once, with Ray's message.
TEST_F(TrialLauncherTest, ARefusedResetStopsTheOldKeyAndEndsInError) {
  AddWorker("w1", {"noop"});
  Experiment& e = AddExperiment(Json{{"reuse_actors", true}, {"max_failures", 3}});
  Trial& old = Queued(e, 0.1);
  Trial& next = Queued(e, 0.2);
  StartAndCache(old, e);
  launcher_.StartReadyTrials();
  ASSERT_EQ(next.phase, TrialPhase::kResetting);
  const uint64_t group = next.group_id;
  sink_.TakeAll();

  launcher_.OnResetReply(next, ResetAnswer(false));
  EXPECT_EQ(next.status, TrialStatus::kError) << "not retried although max_failures is 3";
  EXPECT_EQ(next.num_failures, 1);
  EXPECT_EQ(next.error,
            "Trainable runner reuse requires reset_config() to be implemented and return True.");
  EXPECT_EQ(next.phase, TrialPhase::kIdle);
  EXPECT_EQ(actors_.ResetOf(next.trial_id), nullptr);
  EXPECT_EQ(next.worker_id, "");
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w1")), 0);
  const std::vector<Sent> sent = sink_.TakeAll();
  ASSERT_EQ(Names(sent), (std::vector<std::string>{"STOP@w1"}));
  const auto& stop = std::get<protocol::Stop>(sent[0].message.body);
  EXPECT_EQ(stop.trial_id, old.trial_id.str()) << "the actor kept its old key";
  EXPECT_EQ(stop.attempt, 1u);
  lifecycle_.CheckInvariants(next);
  // The STOP under the old key carries the group: it returns when the STOP completes.
  const std::vector<uint64_t> stops = executor_.StopRidsOn(WorkerId("w1"));
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(executor_.Find(stops[0])->group_id, group);
  ASSERT_NE(groups_.Find(group), nullptr);
  actors_.OnStopDone(*executor_.Find(stops[0]));
  EXPECT_EQ(groups_.Find(group), nullptr);
  EXPECT_EQ(groups_.NumInUse(), 0);
}

// A RESET answer whose "reset" is not a boolean (a worker's bytes) is a
// refusal with a clear error, not an exception out of the head loop.
TEST_F(TrialLauncherTest, AMalformedResetAnswerIsARefusalNotACrash) {
  AddWorker("w1", {"noop"});
  Experiment& e = AddExperiment(Json{{"reuse_actors", true}});
  Trial& old = Queued(e, 0.1);
  Trial& next = Queued(e, 0.2);
  StartAndCache(old, e);
  launcher_.StartReadyTrials();
  ASSERT_EQ(next.phase, TrialPhase::kResetting);
  protocol::Reply reply;
  reply.ok = true;
  reply.data = Json{{"reset", 1}};
  EXPECT_NO_THROW(launcher_.OnResetReply(next, reply));
  EXPECT_EQ(next.status, TrialStatus::kError);
  EXPECT_EQ(next.error, "actor reuse failed: the worker's RESET answer has no boolean \"reset\"");
  lifecycle_.CheckInvariants(next);
}

// A cached actor serves only a trial of its own trainable whose experiment
// reuses actors: a waiting trial of another trainable, or of an experiment
// without reuse_actors, of the same shape and ahead in the queue, is not
// handed it (it was: RESET carries no trainable, so that trial ran the
// cached actor's code).
TEST_F(TrialLauncherTest, ACachedActorServesOnlyItsTrainableAndOnlyWithReuse) {
  AddWorker("w1", {"noop", "other"});
  Experiment& a = AddExperiment(Json{{"reuse_actors", true}});
  Experiment& b = AddExperiment(Json{{"trainable", "other"}, {"reuse_actors", true}});
  Experiment& c = AddExperiment();  // noop, without reuse_actors
  EXPECT_NE(a.request_key, b.request_key);
  EXPECT_NE(a.request_key, c.request_key);
  Trial& old = Queued(a, 0.1);
  Trial& other = Queued(b);
  Trial& plain = Queued(c);
  Trial& next = Queued(a, 0.2);
  StartAndCache(old, a);
  launcher_.StartReadyTrials();
  EXPECT_EQ(other.status, TrialStatus::kPending);
  EXPECT_EQ(plain.status, TrialStatus::kPending);
  EXPECT_EQ(next.phase, TrialPhase::kResetting) << "its own experiment's trial takes it";
  const std::vector<Sent> sent = sink_.TakeAll();
  ASSERT_EQ(Names(sent), (std::vector<std::string>{"RESET@w1"}));
  EXPECT_EQ(std::get<protocol::Reset>(sent[0].message.body).new_trial_id, next.trial_id.str());
}

}  // namespace
}  // namespace ztune::head
