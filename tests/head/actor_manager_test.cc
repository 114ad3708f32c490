// ActorManager: where each trial's actor lives, and what becomes of an actor
// when its attempt ends (cached for a waiting trial of its shape, or stopped;
// both keys stopped while a RESET is in flight), and what a dead worker takes
// with it.
#include "head/actor_manager.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/head/runner_parts_fixture.h"

namespace ztune::head {
namespace {

class ActorManagerTest : public RunnerPartsTest {
 protected:
  ActorManagerTest() {
    ledger_.AddWorker(WorkerId("w1"), ResourceSet::FromDoubles({{"CPU", 4}}), {});
    ledger_.AddWorker(WorkerId("w2"), ResourceSet::FromDoubles({{"CPU", 4}}), {});
    Experiment e;
    e.experiment_id = "e0001";
    e.spec.resources = PlacementRequest::FromJson(Json::parse(R"({"bundles":[{"CPU":1}]})")).value();
    exp_ = &book_.AddExperiment(std::move(e));
  }

  // A trial of the experiment holding an actor on `worker` in a fresh group.
  Trial& Running(const std::string& worker) {
    Trial& t = book_.AddTrial(*exp_, Json::object());
    t.attempt = 1;
    groups_.Stage(exp_->spec.resources);
    groups_.Update();
    const uint64_t group = groups_.TakeReady(exp_->request_key, t.trial_id).value();
    actors_.Hold(t, WorkerId(worker), group);
    return t;
  }

  // A trial waiting for the experiment's shape: the demand a cached actor serves.
  void Waiting() {
    Trial& t = book_.AddTrial(*exp_, Json::object());
    scheduler_.OnTrialAdd(t, exp_->request_key, exp_->spec.resources);
  }

  Experiment* exp_ = nullptr;
};

TEST_F(ActorManagerTest, HoldAndClearKeepTheIndexOfActorsByWorker) {
  Trial& a = Running("w1");
  Trial& b = Running("w1");
  EXPECT_EQ(a.worker_id, "w1");
  EXPECT_EQ(a.actor_worker, "w1");
  EXPECT_NE(a.group_id, 0u);
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w1")), 2);
  actors_.Clear(a);
  EXPECT_EQ(a.worker_id, "");
  EXPECT_EQ(a.group_id, 0u);
  EXPECT_EQ(actors_.TrialsOn(WorkerId("w1")), std::vector<TrialId>{b.trial_id});
  actors_.Clear(b);
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w1")), 0);
  EXPECT_TRUE(actors_.TrialsOn(WorkerId("w1")).empty());
  EXPECT_TRUE(Stops().empty()) << "Clear forgets; it never stops";
}

TEST_F(ActorManagerTest, AReusableActorIsCachedOnlyForAWaitingTrialOfItsShape) {
  Trial& a = Running("w1");
  const TrialId id = a.trial_id;
  actors_.Release(a, /*reusable=*/true, /*max_cached=*/16);
  EXPECT_EQ(Stops(), (std::set<std::string>{"w1/" + id.str() + "/1"})) << "nobody waits: stopped";
  EXPECT_EQ(actors_.NumCached(exp_->request_key), 0u);

  Waiting();
  Trial& b = Running("w2");
  actors_.Release(b, /*reusable=*/true, 16);
  EXPECT_TRUE(Stops().empty());
  EXPECT_TRUE(actors_.IsCached(WorkerId("w2"), b.trial_id, b.attempt));
  EXPECT_EQ(b.worker_id, "") << "the trial no longer holds it";

  Trial& c = Running("w2");  // one waits and one is cached: no demand left
  actors_.Release(c, /*reusable=*/true, 16);
  EXPECT_EQ(Stops().size(), 1u);
  EXPECT_EQ(actors_.NumCached(exp_->request_key), 1u);
}

TEST_F(ActorManagerTest, TheCacheHoldsAtMostMaxCachedActors) {
  Waiting();
  Waiting();
  Trial& a = Running("w1");
  actors_.Release(a, /*reusable=*/true, /*max_cached=*/0);
  EXPECT_EQ(Stops().size(), 1u);
  EXPECT_EQ(actors_.NumCached(exp_->request_key), 0u);
}

TEST_F(ActorManagerTest, AnActorWhoseResetIsInFlightIsStoppedUnderBothKeysAndNeverCached) {
  Waiting();
  Waiting();
  Trial& old = Running("w1");
  actors_.Release(old, /*reusable=*/true, 16);
  const CachedActor cached = actors_.TakeCached(exp_->request_key).value();
  Trial& fresh = book_.AddTrial(*exp_, Json::object());
  fresh.attempt = 1;
  actors_.BeginReset(fresh.trial_id, cached);
  actors_.Hold(fresh, cached.worker_id, cached.group_id);
  ASSERT_NE(actors_.ResetOf(fresh.trial_id), nullptr);
  EXPECT_EQ(actors_.ResetOf(fresh.trial_id)->trial_id, old.trial_id);
  actors_.Release(fresh, /*reusable=*/true, 16);
  EXPECT_EQ(Stops(), (std::set<std::string>{"w1/" + old.trial_id.str() + "/1",
                                            "w1/" + fresh.trial_id.str() + "/1"}));
  EXPECT_EQ(actors_.ResetOf(fresh.trial_id), nullptr);
  EXPECT_EQ(actors_.NumCached(exp_->request_key), 0u);
}

TEST_F(ActorManagerTest, TrimCacheStopsWhatNoWaitingTrialWants) {
  Waiting();
  Trial& a = Running("w1");
  actors_.Release(a, /*reusable=*/true, 16);
  ASSERT_EQ(actors_.NumCached(exp_->request_key), 1u);
  actors_.TrimCache();
  EXPECT_TRUE(Stops().empty()) << "a trial still waits for it";
  for (const TrialId& id : exp_->trial_ids) scheduler_.OnTrialRemove(book_.TrialRef(id));
  actors_.TrimCache();
  EXPECT_EQ(Stops(), (std::set<std::string>{"w1/" + a.trial_id.str() + "/1"}));
  EXPECT_EQ(actors_.NumCached(exp_->request_key), 0u);
}

TEST_F(ActorManagerTest, ADeadWorkerTakesItsActorsAndItsCachedActorsGroups) {
  Waiting();
  Waiting();
  Trial& on_dead = Running("w1");
  Trial& cached_on_dead = Running("w1");
  Trial& cached_elsewhere = Running("w2");
  Trial& on_live = Running("w2");
  const uint64_t dead_cached_group = cached_on_dead.group_id;
  const uint64_t broken_group = cached_elsewhere.group_id;
  const TrialId elsewhere_id = cached_elsewhere.trial_id;
  actors_.Release(cached_on_dead, true, 16);
  actors_.Release(cached_elsewhere, true, 16);
  ASSERT_TRUE(Stops().empty());
  ASSERT_EQ(actors_.NumCached(exp_->request_key), 2u);

  const std::vector<TrialId> victims =
      actors_.OnWorkerGone(WorkerId("w1"), std::set<uint64_t>{broken_group});
  EXPECT_EQ(victims, std::vector<TrialId>{on_dead.trial_id});
  EXPECT_EQ(actors_.NumCached(exp_->request_key), 0u);
  // The cached actor elsewhere in a broken group is stopped; the one on the
  // dead worker is not (nothing to stop), and its group is returned now.
  EXPECT_EQ(Stops(), (std::set<std::string>{"w2/" + elsewhere_id.str() + "/1"}));
  EXPECT_EQ(groups_.Find(dead_cached_group), nullptr);
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w1")), 0);
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w2")), 1) << on_live.trial_id;
}

TEST_F(ActorManagerTest, TheKillDeadlineIsTheExperimentsOrTheHeadsDefault) {
  EXPECT_EQ(actors_.KillAfterMs(*exp_), 600'000);
  exp_->spec.force_cleanup_s = 2.5;
  EXPECT_EQ(actors_.KillAfterMs(*exp_), 2500);
}

}  // namespace
}  // namespace ztune::head
