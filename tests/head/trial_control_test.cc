// TrialControl: what clients may change, checked and applied. Submit refuses
// a bad spec (and, with workers registered, a trainable no worker hosts or a
// request no worker can hold, and a search bigger than the head allows)
// without changing anything; AddTrial checks the experiment, the config, the
// bound and restore_from in order; Stop ends an experiment or a trial; a
// user's pause holds a trial until Resume. Over the real parts
// (runner_parts_fixture.h) with strict invariants.
#include "head/trial_control.h"
#include "storage/in_memory_store.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "head/worker_registry.h"
#include "storage/keys.h"
#include "tests/head/runner_parts_fixture.h"

namespace ztune::head {
namespace {

constexpr uint64_t kMaxTrials = 10;

class TrialControlTest : public RunnerPartsTest {
 protected:
  TrialControlTest() : RunnerPartsTest(/*strict_invariants=*/true) {}

  // Submits `spec` (which must be accepted) and returns its experiment.
  Experiment& Submitted(const Json& spec) {
    Result<Json> r = control_.Submit(spec);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return *book_.FindExperiment(r.value()["experiment_id"].get<std::string>());
  }

  // Adds a trial to `e` (which must be accepted) and returns it.
  Trial& Added(const Experiment& e, const TrialId& restore_from = TrialId()) {
    Result<TrialId> id = control_.AddTrial(e.experiment_id, Json::object(), restore_from);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return book_.TrialRef(id.value());
  }

  // Starts `t` as the launcher does: out of the queue, RUNNING, the next
  // attempt, an actor on w1 in a fresh group, phase starting.
  void Start(Trial& t) {
    const Experiment& e = book_.ExperimentOf(t);
    groups_.Stage(e.spec.resources);
    groups_.Update();
    const std::optional<uint64_t> group = groups_.TakeReady(e.request_key, t.trial_id);
    ASSERT_TRUE(group.has_value());
    lifecycle_.Dequeue(t);
    ASSERT_TRUE(lifecycle_.SetPhase(t, TrialPhase::kStarting));
    t.attempt++;
    actors_.Hold(t, WorkerId("w1"), *group);
    ASSERT_TRUE(lifecycle_.SetStatus(t, TrialStatus::kRunning));
    lifecycle_.CheckInvariants(t);
  }

  static void ExpectRefused(const Status& s, StatusCode code, const std::string& part) {
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(part), std::string::npos) << s.ToString();
  }

  storage::InMemoryStore store_;
  CodeStore code_{store_, batch_, clock_, CodeStoreOptions{}};
  TrialControl control_{
      TrialControl::Parts{book_, lifecycle_, searcher_, registry_, ledger_, code_, batch_},
      kMaxTrials};
};

// With a worker registered, Submit refuses an unknown key, a bad search space,
// a trainable no worker hosts, a request no worker can hold and too many
// trials, and none of these changes anything.
TEST_F(TrialControlTest, SubmitRefusesABadSpecAndChangesNothing) {
  AddWorker("w1", {"noop"}, /*cpus=*/4, {{"noop", {"json"}}});

  ExpectRefused(control_.Submit(Json{{"trainable", "noop"}, {"bogus", 1}}).status(),
                StatusCode::kInvalidArgument, "unknown key 'bogus'");
  ExpectRefused(control_
                    .Submit(Json{{"trainable", "noop"},
                                 {"param_space", {{"lr", {{"uniform", {2, 1}}}}}}})
                    .status(),
                StatusCode::kInvalidArgument, "param_space.lr");
  const Status unhosted = control_.Submit(Json{{"trainable", "other"}}).status();
  EXPECT_EQ(unhosted.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(unhosted.message(),
            "spec.trainable: no registered worker hosts trainable 'other' (workers offer: noop)");
  ExpectRefused(control_
                    .Submit(Json{{"trainable", "noop"},
                                 {"resources", {{"bundles", Json::array({{{"CPU", 8}}})}}}})
                    .status(),
                StatusCode::kFailedPrecondition, "infeasible resource request");
  ExpectRefused(
      control_.Submit(Json{{"trainable", "noop"}, {"export_formats", {"json", "onnx"}}}).status(),
      StatusCode::kInvalidArgument,
      "spec.export_formats: trainable 'noop' cannot export 'onnx' (its workers export: json)");
  ExpectRefused(control_
                    .Submit(Json{{"trainable", "noop"},
                                 {"param_space", {{"a", {{"grid_search", {1, 2, 3, 4}}}}}},
                                 {"num_samples", 3}})
                    .status(),
                StatusCode::kInvalidArgument,
                "4 grid combinations x num_samples 3 = 12 trials, more than this head allows "
                "per experiment (10;");

  EXPECT_TRUE(book_.experiments().empty());
  EXPECT_TRUE(batch_.empty()) << batch_.size() << " writes";
  EXPECT_EQ(searcher_.NumSearching(), 0u);
  EXPECT_EQ(book_.next_experiment(), 1u) << "no experiment id was spent";
}

// A valid Submit adds the experiment (its search started, no trial generated)
// and writes next_experiment into the turn's batch; the bound is inclusive.
TEST_F(TrialControlTest, AValidSubmitCreatesTheExperimentAndWritesNextExperiment) {
  AddWorker("w1", {"noop"});
  Result<Json> r = control_.Submit(Json{{"trainable", "noop"},
                                        {"name", "grid"},
                                        {"param_space", {{"a", {{"grid_search", {1, 2}}}}}},
                                        {"num_samples", 5}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (Json{{"experiment_id", "e0001"}, {"total_trials", 10}}));
  const Experiment* e = book_.FindExperiment("e0001");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->spec.name, "grid");
  EXPECT_EQ(e->spec.trainable, "noop");
  EXPECT_EQ(e->total_variants, 10u);
  EXPECT_EQ(e->next_variant, 0u);
  EXPECT_EQ(e->added_trials, 0u);
  EXPECT_TRUE(e->trial_ids.empty()) << "trials are generated by the runner's turn";
  EXPECT_EQ(book_.num_trials(), 0u);
  EXPECT_TRUE(searcher_.Searching("e0001"));
  ASSERT_EQ(batch_.size(), 1u);
  EXPECT_EQ(batch_.ops()[0].family, storage::Family::kMeta);
  EXPECT_EQ(batch_.ops()[0].key, storage::kMetaNextExperiment);
  EXPECT_EQ(batch_.ops()[0].value, "2");

  Result<Json> second = control_.Submit(Json{{"trainable", "noop"}});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ((*second)["experiment_id"], "e0002");
  EXPECT_EQ((*second)["total_trials"], 1);
  const auto* next = batch_.NewestWrite(storage::Family::kMeta, storage::kMetaNextExperiment);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->value, "3");
}

// With no worker registered the trainable and resources are not checked (a
// worker may register later); the bound on trials still is.
TEST_F(TrialControlTest, WithoutWorkersOnlyTheSpecAndTheBoundAreChecked) {
  Result<Json> r = control_.Submit(
      Json{{"trainable", "anything"}, {"resources", {{"bundles", Json::array({{{"CPU", 64}}})}}}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["experiment_id"], "e0001");
  ExpectRefused(control_.Submit(Json{{"trainable", "anything"}, {"num_samples", 11}}).status(),
                StatusCode::kInvalidArgument, "= 11 trials");
  EXPECT_EQ(book_.experiments().size(), 1u);
}

// AddTrial checks the experiment, then the config, then the experiment's
// state and bound; an added trial is PENDING and queued, counted in
// added_trials, and leaves the search cursor alone.
TEST_F(TrialControlTest, AddTrialChecksInOrderAndLeavesTheSearchAlone) {
  Experiment& e = Submitted(Json{{"trainable", "noop"},
                                 {"param_space", {{"a", {{"grid_search", {1, 2, 3}}}}}},
                                 {"num_samples", 3}});  // 9 of the 10 allowed
  ExpectRefused(control_.AddTrial("e0042", Json::array(), TrialId()).status(),
                StatusCode::kNotFound, "unknown experiment 'e0042'");
  ExpectRefused(control_.AddTrial("e0001", Json::array({1}), TrialId()).status(),
                StatusCode::kInvalidArgument, "config must be a JSON object");

  Result<TrialId> id = control_.AddTrial("e0001", Json{{"a", 7}}, TrialId());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, TrialId("e0001_00000"));
  const Trial& t = book_.TrialRef(*id);
  EXPECT_EQ(t.status, TrialStatus::kPending);
  EXPECT_EQ(t.config, (Json{{"a", 7}}));
  EXPECT_TRUE(t.restore_from.empty());
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 1u) << "queued";
  EXPECT_EQ(e.added_trials, 1u);
  EXPECT_EQ(e.next_variant, 0u) << "the search cursor does not move";
  EXPECT_EQ(e.total_variants, 9u);
  EXPECT_EQ(e.TotalTrials(), 10u);
  EXPECT_EQ(e.next_trial_index, 1u);
  lifecycle_.CheckInvariants(t);

  ExpectRefused(control_.AddTrial("e0001", Json::object(), TrialId()).status(),
                StatusCode::kFailedPrecondition, "has 10 trials");
  EXPECT_EQ(e.trial_ids.size(), 1u);
  EXPECT_EQ(e.added_trials, 1u);

  Experiment& stopped = Submitted(Json{{"trainable", "noop"}});
  ASSERT_TRUE(control_.Stop(stopped.experiment_id).ok());
  ExpectRefused(control_.AddTrial("e0002", Json::array(), TrialId()).status(),
                StatusCode::kInvalidArgument, "config must be a JSON object");
  ExpectRefused(control_.AddTrial("e0002", Json::object(), TrialId()).status(),
                StatusCode::kFailedPrecondition, "experiment e0002 is stopped");
  Experiment& finished = Submitted(Json{{"trainable", "noop"}});
  finished.finished = true;
  ExpectRefused(control_.AddTrial("e0003", Json::object(), TrialId()).status(),
                StatusCode::kFailedPrecondition, "experiment e0003 is finished");
  EXPECT_EQ(book_.num_trials(), 1u);
}

// restore_from must name a known trial with a persistent checkpoint that runs
// the same trainable (of any experiment); the added trial records it.
TEST_F(TrialControlTest, RestoreFromMustNameATrialWithACheckpointOfTheSameTrainable) {
  Experiment& e = Submitted(Json{{"trainable", "noop"}, {"num_samples", 5}});
  Experiment& other = Submitted(Json{{"trainable", "other"}});
  Experiment& same = Submitted(Json{{"trainable", "noop"}});
  Trial& source = Added(e);

  ExpectRefused(control_.AddTrial("e0001", Json::object(), TrialId("e0001_00099")).status(),
                StatusCode::kNotFound, "restore_from: unknown trial 'e0001_00099'");
  ExpectRefused(control_.AddTrial("e0001", Json::object(), source.trial_id).status(),
                StatusCode::kFailedPrecondition,
                "restore_from: trial e0001_00000 has no persistent checkpoint");
  source.checkpoints.push_back(CheckpointRecord{/*id=*/1, /*iteration=*/4, false, 0, {}});
  source.next_checkpoint_id = 2;
  const Status wrong = control_.AddTrial("e0002", Json::object(), source.trial_id).status();
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.message(), "restore_from: trial e0001_00000 runs trainable 'noop', not 'other'");
  EXPECT_TRUE(other.trial_ids.empty());
  EXPECT_EQ(other.added_trials, 0u);
  EXPECT_EQ(e.trial_ids.size(), 1u) << "the refusals added nothing";

  Trial& restored = Added(e, source.trial_id);
  EXPECT_EQ(restored.restore_from, source.trial_id);
  Trial& across = Added(same, source.trial_id);
  EXPECT_EQ(across.restore_from, source.trial_id);
  EXPECT_EQ(e.added_trials, 2u);
  EXPECT_EQ(same.added_trials, 1u);
}

// Stop of a trial terminates it alone; of an experiment, every unfinished
// trial (a running one's actor is stopped) and its search; of an unknown id,
// NotFound.
TEST_F(TrialControlTest, StopEndsATrialOrAWholeExperiment) {
  ledger_.AddWorker(WorkerId("w1"), ResourceSet::FromDoubles({{"CPU", 4}}), {});
  Experiment& e = Submitted(Json{{"trainable", "noop"}, {"num_samples", 5}});
  Trial& running = Added(e);
  Trial& pending = Added(e);
  Trial& single = Added(e);
  Start(running);
  sink_.TakeAll();

  Result<std::vector<TrialId>> one = control_.Stop(single.trial_id);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(*one, std::vector<TrialId>{single.trial_id});
  EXPECT_EQ(single.status, TrialStatus::kTerminated);
  EXPECT_EQ(pending.status, TrialStatus::kPending);
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 1u) << "only the stopped trial left the queue";
  EXPECT_FALSE(e.stopped);
  Result<std::vector<TrialId>> again = control_.Stop(single.trial_id);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << "already finished: nothing stopped";
  ExpectRefused(control_.Stop("e0009").status(), StatusCode::kNotFound,
                "no experiment or trial 'e0009'");

  Result<std::vector<TrialId>> all = control_.Stop("e0001");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, (std::vector<TrialId>{running.trial_id, pending.trial_id}));
  EXPECT_EQ(running.status, TrialStatus::kTerminated);
  EXPECT_EQ(pending.status, TrialStatus::kTerminated);
  EXPECT_EQ(running.phase, TrialPhase::kIdle);
  EXPECT_EQ(Stops(), (std::set<std::string>{"w1/" + running.trial_id.str() + "/1"}));
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w1")), 0);
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 0u);
  EXPECT_TRUE(e.stopped);
  EXPECT_TRUE(e.finished);
  EXPECT_FALSE(searcher_.Searching("e0001"));
  for (const TrialId& id : e.trial_ids) lifecycle_.CheckInvariants(book_.TrialRef(id));
}

// Stopping an experiment that already finished changes nothing: it stays
// finished, not "stopped" (which add-trial then reported).
TEST_F(TrialControlTest, StoppingAFinishedExperimentChangesNothing) {
  Experiment& e = Submitted(Json{{"trainable", "noop"}});
  Trial& t = Added(e);
  ASSERT_TRUE(control_.Stop(t.trial_id).ok());
  e.next_variant = e.total_variants;  // the search has yielded everything
  lifecycle_.MaybeFinishExperiment(e);
  ASSERT_TRUE(e.finished);
  batch_.Clear();
  Result<std::vector<TrialId>> r = control_.Stop(e.experiment_id);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->empty());
  EXPECT_FALSE(e.stopped);
  ExpectRefused(control_.AddTrial(e.experiment_id, Json::object(), {}).status(),
                StatusCode::kFailedPrecondition, "is finished");
}

// A user's pause of a RUNNING trial is a request (it stays RUNNING); Resume
// before the pause completes cancels it; once completed it is PAUSED, held
// out of the queue until Resume queues it.
TEST_F(TrialControlTest, PauseOfARunningTrialHoldsItUntilResume) {
  ledger_.AddWorker(WorkerId("w1"), ResourceSet::FromDoubles({{"CPU", 4}}), {});
  Experiment& e = Submitted(Json{{"trainable", "noop"}, {"num_samples", 5}});
  Trial& t = Added(e);
  Start(t);

  ASSERT_TRUE(control_.PauseTrial(t.trial_id, /*hold=*/true).ok());
  EXPECT_EQ(t.status, TrialStatus::kRunning);
  EXPECT_TRUE(t.pause_requested);
  EXPECT_TRUE(t.held);
  ASSERT_TRUE(control_.Resume(t.trial_id).ok());
  EXPECT_FALSE(t.pause_requested) << "not paused yet: carries on";
  EXPECT_FALSE(t.held);
  ExpectRefused(control_.Resume(t.trial_id), StatusCode::kFailedPrecondition,
                "is RUNNING, not PAUSED");

  ASSERT_TRUE(control_.PauseTrial(t.trial_id, /*hold=*/true).ok());
  lifecycle_.CheckInvariants(t);
  lifecycle_.StartPause(t);  // the runner, at the end of the step
  lifecycle_.FinishPause(t, "memory-bytes");
  EXPECT_EQ(t.status, TrialStatus::kPaused);
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 0u) << "held: not queued";
  ASSERT_TRUE(control_.Resume(t.trial_id).ok());
  EXPECT_EQ(t.status, TrialStatus::kPaused);
  EXPECT_FALSE(t.held);
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 1u);
  EXPECT_EQ(t.memory_checkpoint, "memory-bytes");
  lifecycle_.CheckInvariants(t);
}

// A waiting trial: a pause without hold changes nothing, with hold it is
// PAUSED out of the queue until Resume; a finished trial cannot be paused or
// resumed, an unknown one is NotFound.
TEST_F(TrialControlTest, PauseAndResumeOfWaitingAndFinishedTrials) {
  Experiment& e = Submitted(Json{{"trainable", "noop"}, {"num_samples", 5}});
  Trial& t = Added(e);
  Trial& other = Added(e);
  Trial& done = Added(e);
  ASSERT_TRUE(control_.Stop(done.trial_id).ok());

  ASSERT_TRUE(control_.PauseTrial(t.trial_id, /*hold=*/false).ok());
  EXPECT_EQ(t.status, TrialStatus::kPending);
  EXPECT_FALSE(t.held);
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 2u);
  ASSERT_TRUE(control_.PauseTrial(t.trial_id, /*hold=*/true).ok());
  EXPECT_EQ(t.status, TrialStatus::kPaused);
  EXPECT_TRUE(t.held);
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 1u);
  EXPECT_EQ(scheduler_.ChooseTrialToRun([](const std::string&) { return true; }),
            std::optional<TrialId>(other.trial_id));
  lifecycle_.CheckInvariants(t);

  ASSERT_TRUE(control_.Resume(t.trial_id).ok());
  EXPECT_FALSE(t.held);
  EXPECT_EQ(t.status, TrialStatus::kPaused);
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 2u);
  ASSERT_TRUE(control_.Resume(t.trial_id).ok()) << "PAUSED and not held: nothing to do";
  EXPECT_EQ(scheduler_.NumWaiting(e.request_key), 2u) << "queued once";
  ExpectRefused(control_.Resume(other.trial_id), StatusCode::kFailedPrecondition,
                "is PENDING, not PAUSED");

  ExpectRefused(control_.PauseTrial(done.trial_id, true), StatusCode::kFailedPrecondition,
                "is TERMINATED");
  ExpectRefused(control_.Resume(done.trial_id), StatusCode::kFailedPrecondition,
                "is TERMINATED, not PAUSED");
  EXPECT_FALSE(done.held);
  ExpectRefused(control_.PauseTrial(TrialId("e0001_00077"), true), StatusCode::kNotFound,
                "unknown trial 'e0001_00077'");
  ExpectRefused(control_.Resume(TrialId("e0001_00077")), StatusCode::kNotFound,
                "unknown trial 'e0001_00077'");
}

}  // namespace
}  // namespace ztune::head
