// PbtScheduler (Ray Tune's asynchronous PopulationBasedTraining): quantiles
// as Ray slices them, explore (neighbours, resampling with the given
// probability, factors, ints kept ints, nested keys) seeded and repeatable,
// who checkpoints and who exploits whom at a perturbation, that nothing is
// cloned from a trial without a checkpoint, and the state a restarted head
// rebuilds from.
#include "head/pbt_scheduler.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <random>

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

using D = SchedulerDecision;

TrialId Id(int i) {
  return TrialId("e0001_" + std::string(5 - std::to_string(i).size(), '0') + std::to_string(i));
}

const StoredResultsReader kNoResults = [] {
  return Result<std::vector<Json>>(std::vector<Json>());
};

PbtOptions Options(double interval = 2, double quantile = 0.25, double resample = 0.25) {
  PbtOptions o;
  o.metric = "m";
  o.maximize = true;
  o.time_attr = "training_iteration";
  o.perturbation_interval = interval;
  o.quantile_fraction = quantile;
  o.resample_probability = resample;
  o.hyperparam_mutations = Json{{"lr", {{"loguniform", {1e-4, 1e-1}}}}, {"bs", {16, 32, 64, 128}}};
  o.seed = 3;
  return o;
}

// Trials with a config, results handed in one at a time, and the stored
// checkpoints the runner would have (a top trial's checkpoint is taken).
struct Harness {
  explicit Harness(PbtOptions o, int n) : options(o), pbt(std::make_unique<PbtScheduler>(o)) {
    for (int i = 0; i < n; ++i) {
      Trial t;
      t.experiment_id = "e0001";
      t.trial_id = Id(i);
      t.status = TrialStatus::kRunning;
      t.config = Json{{"lr", 0.01 * (i + 1)}, {"bs", 32}, {"x", i}};
      EXPECT_TRUE(pbt->AddTrial(t, kNoResults).ok());
      trials[i] = std::move(t);
    }
  }
  D Report(int i, int64_t iteration, double m, size_t waiting = 0) {
    Trial& t = trials.at(i);
    ExperimentView view;
    view.num_waiting = waiting;
    view.has_checkpoint = [&](const TrialId& id, int64_t it) {
      return checkpoints.count({id.str(), it}) > 0;
    };
    const D d = pbt->OnTrialResult(t, Json{{"training_iteration", iteration}, {"m", m}}, view);
    t.iteration = iteration;
    if (d == D::kCheckpointContinue || d == D::kCheckpointPause) {
      checkpoints.insert({t.trial_id.str(), iteration});
    }
    if (d == D::kExploit) {
      auto x = pbt->TakeExploit(t.trial_id);
      EXPECT_TRUE(x.has_value());
      if (x) {
        exploits.push_back(*x);
        t.config = x->new_config;
      }
    }
    return d;
  }
  std::unique_ptr<PbtScheduler> Restarted() const {
    auto fresh = std::make_unique<PbtScheduler>(options);
    for (const auto& [i, t] : trials) {
      Trial copy = t;
      EXPECT_TRUE(fresh->AddTrial(copy, kNoResults).ok()) << t.trial_id;
    }
    return fresh;
  }
  PbtOptions options;
  std::unique_ptr<PbtScheduler> pbt;
  std::map<int, Trial> trials;
  std::set<std::pair<std::string, int64_t>> checkpoints;
  std::vector<Exploit> exploits;
};

TEST(PbtSchedulerTest, QuantilesAreRaysSlices) {
  Harness h(Options(1, 0.25), 8);
  for (int i = 0; i < 8; ++i) h.Report(i, 1, 10 - i);  // trial 7 worst, 0 best
  const auto [lower, upper] = h.pbt->Quantiles();
  EXPECT_EQ(lower, (std::vector<TrialId>{Id(7), Id(6)}));  // ceil(8 x 0.25) = 2
  EXPECT_EQ(upper, (std::vector<TrialId>{Id(1), Id(0)}));
  // 5 trials at 0.5: ceil(2.5) = 3 is more than half, so floor(2.5) = 2.
  Harness half(Options(1, 0.5), 5);
  for (int i = 0; i < 5; ++i) half.Report(i, 1, i);
  EXPECT_EQ(half.pbt->Quantiles().first.size(), 2u);
  // quantile_fraction 0: Ray's trials[-0:] is every trial (all top).
  Harness zero(Options(1, 0), 3);
  for (int i = 0; i < 3; ++i) zero.Report(i, 1, i);
  EXPECT_TRUE(zero.pbt->Quantiles().first.empty());
  EXPECT_EQ(zero.pbt->Quantiles().second.size(), 3u);
  // One scored trial: no quantiles at all.
  Harness one(Options(1), 3);
  one.Report(0, 1, 1);
  EXPECT_TRUE(one.pbt->Quantiles().second.empty());
}

TEST(PbtSchedulerTest, TheTopCheckpointsAndTheBottomClonesATopTrialWithACheckpoint) {
  Harness h(Options(2, 0.25), 4);  // quantiles of 1
  // Before the interval nothing happens.
  EXPECT_EQ(h.Report(0, 1, 5), D::kContinue);
  // At 2: trial 0 alone scored: no quantiles yet.
  EXPECT_EQ(h.Report(0, 2, 5), D::kContinue);
  EXPECT_EQ(h.Report(1, 2, 9), D::kCheckpointContinue) << "best of two: top";
  EXPECT_EQ(h.Report(2, 2, 7, /*waiting=*/1), D::kPause) << "middle, others wait: it yields";
  // Trial 3 is worst: it clones trial 1, the only top trial, whose checkpoint
  // at 2 exists.
  EXPECT_EQ(h.Report(3, 2, 1), D::kExploit);
  ASSERT_EQ(h.exploits.size(), 1u);
  EXPECT_EQ(h.exploits[0].donor, Id(1));
  EXPECT_EQ(h.exploits[0].donor_iteration, 2);
  EXPECT_EQ(h.exploits[0].old_config["lr"], 0.04);
  EXPECT_EQ(h.exploits[0].new_config["x"], 1) << "the donor's config, explored";
  EXPECT_EQ(h.pbt->num_exploits(), 1u);
  const Json state = h.trials.at(3).scheduler_state;
  EXPECT_EQ(state["exploits"], 1);
  EXPECT_EQ(state["perturbed_at"], 2.0) << "the donor's";
  EXPECT_TRUE(state["checkpoint"].is_null());
  EXPECT_EQ(h.trials.at(1).scheduler_state["checkpoint"], 2);
}

TEST(PbtSchedulerTest, NothingIsClonedFromATrialWithoutACheckpoint) {
  Harness h(Options(2, 0.25), 4);
  h.Report(0, 2, 5);
  h.Report(1, 2, 9);
  h.checkpoints.clear();  // trial 1's checkpoint is not stored (yet)
  EXPECT_EQ(h.Report(3, 2, 1), D::kContinue);
  EXPECT_TRUE(h.exploits.empty());
}

TEST(PbtSchedulerTest, ExploreMovesListValuesToANeighbourOrResamples) {
  // Resampling never: a list value moves one place (and stays in the list);
  // a sampled value is scaled by 1.2 or 0.8.
  PbtScheduler keep(Options(1, 0.25, /*resample=*/0));
  std::set<Json> seen_bs;
  std::set<double> factors;
  for (uint64_t k = 0; k < 200; ++k) {
    const Json c = keep.Explore(Json{{"lr", 0.01}, {"bs", 32}, {"x", 1}}, 1, k);
    seen_bs.insert(c["bs"]);
    factors.insert(std::round(c["lr"].get<double>() / 0.01 * 1000) / 1000);
    EXPECT_EQ(c["x"], 1) << "keys without a mutation stay";
  }
  EXPECT_EQ(seen_bs, (std::set<Json>{16, 64}));
  EXPECT_EQ(factors, (std::set<double>{0.8, 1.2}));
  // At the ends of the list the move is clamped.
  std::set<Json> from_end;
  for (uint64_t k = 0; k < 100; ++k) {
    from_end.insert(keep.Explore(Json{{"lr", 0.01}, {"bs", 128}}, 1, k)["bs"]);
  }
  EXPECT_EQ(from_end, (std::set<Json>{64, 128}));
  // Always resampling: values come from the list and the sampler's range.
  PbtScheduler fresh(Options(1, 0.25, /*resample=*/1));
  std::set<Json> resampled;
  for (uint64_t k = 0; k < 200; ++k) {
    const Json c = fresh.Explore(Json{{"lr", 0.01}, {"bs", 32}}, 1, k);
    resampled.insert(c["bs"]);
    EXPECT_GE(c["lr"].get<double>(), 1e-4);
    EXPECT_LE(c["lr"].get<double>(), 1e-1);
  }
  EXPECT_EQ(resampled, (std::set<Json>{16, 32, 64, 128}));
}

TEST(PbtSchedulerTest, ResamplingHappensWithTheGivenProbability) {
  PbtOptions o = Options(1, 0.25, /*resample=*/0.25);
  o.hyperparam_mutations = Json{{"lr", {{"uniform", {0, 1}}}}};
  PbtScheduler s(o);
  int resampled = 0;
  const int n = 4000;
  for (int k = 0; k < n; ++k) {
    const double v = s.Explore(Json{{"lr", 0.5}}, 2, static_cast<uint64_t>(k))["lr"];
    if (std::fabs(v - 0.6) > 1e-12 && std::fabs(v - 0.4) > 1e-12) ++resampled;
  }
  // 1000 expected; 4.5 standard deviations (27) either side.
  EXPECT_NEAR(resampled, n / 4, 125) << resampled;
}

TEST(PbtSchedulerTest, IntsStayIntsNestedKeysAndFactorsAreOptions) {
  PbtOptions o = Options(1, 0.25, /*resample=*/0);
  o.perturbation_factors = {2.0};
  o.hyperparam_mutations =
      Json{{"layers", {{"randint", {1, 10}}}}, {"opt", {{"momentum", {0.8, 0.9, 0.99}}}}};
  PbtScheduler s(o);
  const Json c =
      s.Explore(Json{{"layers", 3}, {"opt", {{"momentum", 0.9}, {"nesterov", true}}}}, 0, 0);
  EXPECT_TRUE(c["layers"].is_number_integer());
  EXPECT_EQ(c["layers"], 6);
  EXPECT_TRUE(c["opt"]["momentum"] == 0.8 || c["opt"]["momentum"] == 0.99) << c.dump();
  EXPECT_EQ(c["opt"]["nesterov"], true);
  // A factor that would leave int64 is held at its edge, not undefined.
  o.perturbation_factors = {1e300};
  const Json big = PbtScheduler(o).Explore(Json{{"layers", 3}, {"opt", {{"momentum", 0.9}}}}, 0, 0);
  EXPECT_TRUE(big["layers"].is_number_integer());
  EXPECT_GT(big["layers"].get<int64_t>(), int64_t{9'000'000'000'000'000'000});
}

TEST(PbtSchedulerTest, TheSameSeedExploresAlikeAnotherDoesNot) {
  PbtScheduler a(Options()), b(Options());
  PbtOptions other = Options();
  other.seed = 4;
  PbtScheduler c(other);
  const Json config{{"lr", 0.01}, {"bs", 32}};
  int differ = 0;
  for (uint64_t k = 0; k < 20; ++k) {
    EXPECT_EQ(a.Explore(config, 5, k), b.Explore(config, 5, k));
    differ += a.Explore(config, 5, k) != c.Explore(config, 5, k);
  }
  EXPECT_GT(differ, 0);
}

TEST(PbtSchedulerTest, WaitingTrialsStartLeastTrainedFirst) {
  Harness h(Options(2), 3);
  h.Report(0, 4, 1);
  h.Report(1, 2, 1);
  EXPECT_EQ(h.pbt->QueuePriority(h.trials.at(0)), 4);
  EXPECT_EQ(h.pbt->QueuePriority(h.trials.at(1)), 2);
  EXPECT_EQ(h.pbt->QueuePriority(h.trials.at(2)), 0);
}

// A scripted population: every trial reports each iteration in turn for 12
// iterations with values drawn from a seeded generator; after any step the
// scheduler is rebuilt from the trials' stored state and configs, and from
// then on decides exactly as the uninterrupted one (decisions, exploits).
TEST(PbtSchedulerTest, StateRebuiltAfterAnyStepDecidesAsTheUninterruptedRun) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> value(0, 10);
  struct Step {
    int trial;
    int64_t iteration;
    double m;
  };
  std::vector<Step> steps;
  for (int64_t it = 1; it <= 12; ++it) {
    for (int i = 0; i < 6; ++i) steps.push_back({i, it, value(rng)});
  }
  Harness reference(Options(3, 0.34), 6);
  std::vector<D> expected;
  for (const Step& s : steps) expected.push_back(reference.Report(s.trial, s.iteration, s.m));
  ASSERT_GE(reference.exploits.size(), 3u) << "the run must exploit";
  for (size_t crash = 0; crash <= steps.size(); crash += 5) {
    Harness run(Options(3, 0.34), 6);
    for (size_t k = 0; k < crash; ++k) run.Report(steps[k].trial, steps[k].iteration, steps[k].m);
    run.pbt = run.Restarted();
    for (size_t k = crash; k < steps.size(); ++k) {
      ASSERT_EQ(run.Report(steps[k].trial, steps[k].iteration, steps[k].m), expected[k])
          << "crash after step " << crash << ", step " << k;
    }
    ASSERT_EQ(run.exploits.size(), reference.exploits.size());
    for (size_t k = 0; k < run.exploits.size(); ++k) {
      EXPECT_EQ(run.exploits[k].donor, reference.exploits[k].donor);
      EXPECT_EQ(run.exploits[k].new_config, reference.exploits[k].new_config);
    }
  }
}

TEST(PbtSchedulerTest, DamagedStateIsRefused) {
  PbtScheduler s(Options());
  const Json good{
      {"score", 1.0}, {"perturbed_at", 2}, {"trained_at", 2}, {"checkpoint", 2}, {"exploits", 0}};
  for (const auto& [key, bad] : std::vector<std::pair<std::string, Json>>{
           {"score", "x"}, {"perturbed_at", "2"}, {"checkpoint", -1}, {"exploits", 1.5}}) {
    Trial t;
    t.experiment_id = "e0001";
    t.trial_id = Id(1);
    t.scheduler_state = good;
    t.scheduler_state[key] = bad;
    const Status st = s.AddTrial(t, kNoResults);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << key;
    EXPECT_NE(st.message().find(key), std::string::npos) << st.message();
  }
  Trial t;
  t.experiment_id = "e0001";
  t.trial_id = Id(1);
  t.scheduler_state = good;
  EXPECT_TRUE(s.AddTrial(t, kNoResults).ok());
}

}  // namespace
}  // namespace ztune::head

namespace ztune::head {
namespace {

// Synchronous PBT: each trial that reaches the sync point checkpoints and
// pauses, held; nothing is ranked until the last one's pause completes;
// then the bottom clones a top trial (an exploit action), everyone is
// released, and the sync point moves on by the interval. A head restart
// rebuilds the sync point from the stored states.
TEST(PbtSchedulerTest, SynchronousWaitsForEveryTrialThenExploitsAndReleasesAll) {
  PbtOptions o = Options(2, 0.25);
  o.synch = true;
  Harness h(o, 4);
  h.pbt->set_checkpoint_lookup([&](const TrialId& id, int64_t it) {
    return h.checkpoints.count({id.str(), it}) > 0;
  });
  EXPECT_EQ(h.pbt->next_sync(), 2);
  EXPECT_EQ(h.Report(0, 1, 5), D::kContinue);  // before the sync point
  const double scores[] = {5, 9, 1, 7};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(h.Report(i, 2, scores[i]), D::kCheckpointPause) << i;
    EXPECT_FALSE(h.pbt->MayStart(h.trials[i])) << "held at the sync point";
  }
  for (int i = 0; i < 3; ++i) {
    h.trials[i].status = TrialStatus::kPaused;
    h.pbt->OnTrialPaused(h.trials[i]);
    EXPECT_TRUE(h.pbt->TakeActions().empty()) << "trial 3 has not paused yet";
  }
  h.trials[3].status = TrialStatus::kPaused;
  h.pbt->OnTrialPaused(h.trials[3]);
  EXPECT_EQ(h.pbt->next_sync(), 4);
  const std::vector<SchedulerAction> actions = h.pbt->TakeActions();
  // Trial 2 (m 1) is the bottom quantile; trial 1 (m 9) the top: it clones 1.
  // Trial 3 paused last: the runner queues it itself, no release.
  ASSERT_EQ(actions.size(), 3u);
  std::map<std::string, SchedulerAction::Kind> kinds;
  for (const SchedulerAction& a : actions) {
    kinds[a.trial_id.str()] = a.kind;
    EXPECT_EQ(a.state["sync"], 4) << a.trial_id;
  }
  EXPECT_EQ(kinds[Id(0).str()], SchedulerAction::Kind::kRelease);
  EXPECT_EQ(kinds[Id(1).str()], SchedulerAction::Kind::kRelease);
  EXPECT_EQ(kinds[Id(2).str()], SchedulerAction::Kind::kExploit);
  EXPECT_EQ(h.trials[3].scheduler_state["sync"], 4);
  auto x = h.pbt->TakeExploit(Id(2));
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->donor, Id(1));
  EXPECT_EQ(x->donor_iteration, 2);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(h.pbt->MayStart(h.trials[i])) << i;

  // Restarted with the states the actions carry: the same sync point.
  for (const SchedulerAction& a : actions)
    h.trials[std::stoi(a.trial_id.str().substr(6))].scheduler_state = a.state;
  EXPECT_EQ(h.Restarted()->next_sync(), 4);
}

TEST(PbtSchedulerTest, SynchronousSyncsWhenTheLastTrialWaitedForEnds) {
  PbtOptions o = Options(2, 0.25);
  o.synch = true;
  Harness h(o, 3);
  h.pbt->set_checkpoint_lookup([](const TrialId&, int64_t) { return true; });
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(h.Report(i, 2, i), D::kCheckpointPause);
    h.trials[i].status = TrialStatus::kPaused;
    h.pbt->OnTrialPaused(h.trials[i]);
  }
  EXPECT_TRUE(h.pbt->TakeActions().empty());
  h.trials[2].status = TrialStatus::kTerminated;
  h.pbt->OnTrialComplete(h.trials[2]);
  const std::vector<SchedulerAction> actions = h.pbt->TakeActions();
  ASSERT_EQ(actions.size(), 2u);  // two left: one clones the other
  EXPECT_EQ(actions[0].kind, SchedulerAction::Kind::kExploit);
  EXPECT_EQ(actions[1].kind, SchedulerAction::Kind::kRelease);
}

}  // namespace
}  // namespace ztune::head
