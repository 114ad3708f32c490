// TrialBook: ids, counts through every status change, and the turn's changed
// records.
#include "head/trial_book.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/in_memory_store.h"
#include "storage/keys.h"

namespace ztune::head {
namespace {

Experiment Exp(const std::string& id) {
  Experiment e;
  e.experiment_id = id;
  return e;
}

int64_t CountOf(const Experiment& e, TrialStatus s) {
  auto it = e.counts.find(s);
  return it == e.counts.end() ? 0 : it->second;
}

std::vector<std::string> Written(TrialBook& book, storage::Family family) {
  storage::WriteBatch batch;
  book.WriteDirty(batch);
  std::vector<std::string> keys;
  for (const auto& op : batch.ops()) {
    if (op.family == family) keys.push_back(op.key);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

TEST(TrialBookTest, CountsFollowEveryStatusChange) {
  TrialBook book;
  Experiment& e = book.AddExperiment(Exp(book.NextExperimentId()));
  EXPECT_EQ(e.experiment_id, "e0001");
  Trial& a = book.AddTrial(e, Json{{"lr", 0.1}});
  Trial& b = book.AddTrial(e, Json{{"lr", 0.2}});
  EXPECT_EQ(a.trial_id, "e0001_00000");
  EXPECT_EQ(b.trial_id, "e0001_00001");
  EXPECT_LT(a.seq, b.seq);
  EXPECT_EQ(book.num_pending(), 2);
  EXPECT_EQ(e.live_trials, 2);
  book.SetStatus(a, TrialStatus::kRunning);
  EXPECT_EQ(book.num_pending(), 1);
  EXPECT_EQ(book.num_running(), 1);
  book.SetStatus(a, TrialStatus::kTerminated);
  book.SetStatus(b, TrialStatus::kError);
  EXPECT_EQ(book.num_running(), 0);
  EXPECT_EQ(book.num_pending(), 0);
  EXPECT_EQ(e.live_trials, 0);
  EXPECT_EQ(CountOf(e, TrialStatus::kTerminated), 1);
  EXPECT_EQ(CountOf(e, TrialStatus::kError), 1);
  book.SetStatus(b, TrialStatus::kPending);  // resume --errored retry
  EXPECT_EQ(e.live_trials, 1);
  EXPECT_EQ(book.num_pending(), 1);
  EXPECT_EQ(CountOf(e, TrialStatus::kError), 0);
  EXPECT_GT(book.NextSeq(), b.seq);
}

TEST(TrialBookTest, LoadedRecordsAreCountedAndIdsGoOnPastThem) {
  TrialBook book;
  book.AddExperiment(Exp("e0007"), /*loaded=*/true);
  Trial t;
  t.trial_id = "e0007_00003";
  t.experiment_id = "e0007";
  t.seq = 41;
  t.status = TrialStatus::kRunning;
  book.AddLoadedTrial(t, /*changed=*/false);
  EXPECT_EQ(book.num_running(), 1);
  EXPECT_EQ(book.FindExperiment("e0007")->live_trials, 1);
  EXPECT_TRUE(Written(book, storage::Family::kTrials).empty()) << "a loaded record is not rewritten";
  EXPECT_TRUE(Written(book, storage::Family::kExperiments).empty());
  EXPECT_EQ(book.NextExperimentId(), "e0008");
  EXPECT_EQ(book.next_experiment(), 9u);
  EXPECT_EQ(book.NextSeq(), 42u);
}

TEST(TrialBookTest, WriteDirtyWritesEachChangedRecordOnceAndForgetsThem) {
  TrialBook book;
  Experiment& e = book.AddExperiment(Exp(book.NextExperimentId()));
  Trial& a = book.AddTrial(e, Json::object());
  book.AddTrial(e, Json::object());
  book.SetStatus(a, TrialStatus::kRunning);
  EXPECT_EQ(Written(book, storage::Family::kTrials),
            (std::vector<std::string>{"e0001_00000", "e0001_00001"}));
  EXPECT_TRUE(Written(book, storage::Family::kTrials).empty()) << "forgotten after the write";
  book.SetStatus(a, TrialStatus::kRunning);  // no change: nothing to write
  EXPECT_TRUE(Written(book, storage::Family::kTrials).empty());
  book.MarkDirty(a);
  EXPECT_EQ(Written(book, storage::Family::kTrials), (std::vector<std::string>{"e0001_00000"}));
}

// Progress alone rewrites no record; under VerifyRecords a record change that
// was not marked dirty (lost at a restart, since only results are written)
// aborts at the next WriteDirty after the trial's results.
TEST(TrialBookTest, ProgressWritesNoRecordAndAnUnmarkedChangeAborts) {
  for (const bool verify : {false, true}) {
    TrialBook book;
    if (verify) book.VerifyRecords();
    Experiment& e = book.AddExperiment(Exp(book.NextExperimentId()));
    Trial& t = book.AddTrial(e, Json::object());
    EXPECT_EQ(Written(book, storage::Family::kTrials), std::vector<std::string>{t.trial_id});
    t.iteration = 1;
    t.last_result = Json{{"training_iteration", 1}};
    book.NoteProgress(t);
    EXPECT_TRUE(Written(book, storage::Family::kTrials).empty()) << "verify " << verify;
    t.num_failures = 1;  // marked: written, and the new baseline
    book.MarkDirty(t);
    book.NoteProgress(t);
    EXPECT_EQ(Written(book, storage::Family::kTrials), std::vector<std::string>{t.trial_id});
    t.num_restores = 1;  // not marked
    book.NoteProgress(t);
    if (verify) {
      EXPECT_DEATH(Written(book, storage::Family::kTrials), "");  // CHECK logs to stdout
    } else {
      EXPECT_TRUE(Written(book, storage::Family::kTrials).empty());
    }
  }
}

TEST(TrialBookTest, LookupsOfUnknownIdsAreNullAndTheCheckedOnesAbort) {
  TrialBook book;
  EXPECT_EQ(book.FindTrial("nope"), nullptr);
  EXPECT_EQ(book.FindExperiment("nope"), nullptr);
  EXPECT_DEATH(book.TrialRef("nope"), "");
}

// The best trial by the experiment's metric and mode over last results;
// results without the metric, with a non-number or NaN are passed over, and
// the first of equals wins.
TEST(TrialBookTest, TheBestTrialFollowsMetricAndModeAndSkipsWhatIsNotANumber) {
  TrialBook book;
  Experiment ex = Exp(book.NextExperimentId());
  Experiment& e = book.AddExperiment(std::move(ex));
  EXPECT_EQ(book.BestTrial(e), nullptr) << "no metric";
  e.spec.metric = "m/loss";  // a nested key, flattened as Ray does
  e.spec.mode = "min";
  const std::vector<Json> lasts = {
      Json(),                                           // no result yet
      Json{{"m", {{"loss", 0.5}}}},                     // best so far
      Json{{"m", {{"loss", "low"}}}},                   // not a number
      Json{{"m", {{"loss", std::nan("")}}}},            // NaN
      Json{{"other", 0.0}},                             // metric missing
      Json{{"m", {{"loss", 0.5}}}},                     // a tie: the first stays
      Json{{"m", {{"loss", 2.0}}}},
  };
  std::vector<TrialId> ids;
  for (const Json& last : lasts) {
    Trial& t = book.AddTrial(e, Json::object());
    t.last_result = last;
    ids.push_back(t.trial_id);
  }
  ASSERT_NE(book.BestTrial(e), nullptr);
  EXPECT_EQ(book.BestTrial(e)->trial_id, ids[1]);
  e.spec.mode = "max";
  EXPECT_EQ(book.BestTrial(e)->trial_id, ids[6]);
  e.spec.metric = "missing";
  EXPECT_EQ(book.BestTrial(e), nullptr);
}

// A result from a worker keeps its metric beside its text (read from the
// bytes it came in), so the best trial is found without parsing any text;
// the kept value agrees with the text: an infinity is stored as null and
// passed over. Another key falls back to the text.
TEST(TrialBookTest, TheBestTrialUsesTheMetricKeptWithTheStoredText) {
  TrialBook book;
  Experiment ex = Exp(book.NextExperimentId());
  Experiment& e = book.AddExperiment(std::move(ex));
  e.spec.metric = "loss";
  e.spec.mode = "min";
  struct Stored {
    std::string text;
    std::optional<double> loss;
  };
  const std::vector<Stored> stored = {
      {R"({"acc":0.1,"loss":3.0})", 3.0},
      {R"({"acc":0.9,"loss":null})", -std::numeric_limits<double>::infinity()},
      {R"({"acc":0.5,"loss":1.0})", 1.0},
      {R"({"acc":0.7})", std::nullopt},
  };
  std::vector<TrialId> ids;
  for (const Stored& r : stored) {
    Trial& t = book.AddTrial(e, Json::object());
    t.last_result.SetStored(r.text, "loss", r.loss);
    ids.push_back(t.trial_id);
  }
  ASSERT_NE(book.BestTrial(e), nullptr);
  EXPECT_EQ(book.BestTrial(e)->trial_id, ids[2]);
  EXPECT_EQ(book.TrialRef(ids[1]).last_result.Metric("loss"), std::nullopt);
  e.spec.metric = "acc";
  e.spec.mode = "max";
  EXPECT_EQ(book.BestTrial(e)->trial_id, ids[1]) << "parsed from the text";
  EXPECT_EQ(book.TrialRef(ids[3]).last_result.Metric("acc"), 0.7);
  // A new result replaces the kept value.
  book.TrialRef(ids[3]).last_result.SetStored(R"({"acc":0.95})", "acc", 0.95);
  book.NoteLastResult(e, book.TrialRef(ids[3]));
  EXPECT_EQ(book.BestTrial(e)->trial_id, ids[3]);
}

// The best trial is kept as results arrive, not found by walking every
// trial at each read: against a walk after every one of 20,000 random results
// (improving, worsening, ties, no metric, NaN) on 50 trials, for both modes.
TEST(TrialBookTest, TheKeptBestTrialIsTheOneAWalkFinds) {
  for (const char* mode : {"min", "max"}) {
    SCOPED_TRACE(mode);
    TrialBook book;
    Experiment ex = Exp(book.NextExperimentId());
    ex.spec.metric = "loss";
    ex.spec.mode = mode;
    Experiment& e = book.AddExperiment(std::move(ex));
    std::vector<Trial*> trials;
    for (int i = 0; i < 50; ++i) trials.push_back(&book.AddTrial(e, Json::object()));
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<int> pick(0, 49);
    std::uniform_int_distribution<int> kind(0, 9);
    std::uniform_int_distribution<int> level(0, 30);  // few levels: many ties
    size_t walks_saved = 0;
    for (int n = 0; n < 20'000; ++n) {
      Trial& t = *trials[pick(rng)];
      const int k = kind(rng);
      if (k == 0) {
        t.last_result.SetStored(R"({"acc":1})", "loss", std::nullopt);  // no metric
      } else if (k == 1) {
        t.last_result.SetStored(R"({"loss":null})", "loss", std::nan(""));
      } else {
        const double v = level(rng) / 4.0;
        t.last_result.SetStored(R"({"loss":)" + std::to_string(v) + "}", "loss", v);
      }
      book.NoteLastResult(e, t);
      const bool kept = e.best.known;
      // The reference: the first trial with the best finite metric.
      const Trial* want = nullptr;
      for (const Trial* c : trials) {
        const std::optional<double> v = c->last_result.Metric("loss");
        if (!v) continue;
        const double w = want == nullptr ? 0 : *want->last_result.Metric("loss");
        if (want == nullptr || (e.spec.mode == "max" ? *v > w : *v < w)) want = c;
      }
      ASSERT_EQ(book.BestTrial(e), want) << "after result " << n;
      if (kept) ++walks_saved;
    }
    // Most results leave the best where it was or move it to their trial.
    EXPECT_GT(walks_saved, 10'000u);
  }
}

// With VerifyRecords (the runner's strict invariants, in tests) every read
// checks the kept best trial against a walk: a change of a last result that
// was not noted aborts.
TEST(TrialBookTest, AnUnnotedLastResultAbortsUnderVerifyRecords) {
  TrialBook book;
  book.VerifyRecords();
  Experiment ex = Exp(book.NextExperimentId());
  ex.spec.metric = "loss";
  ex.spec.mode = "min";
  Experiment& e = book.AddExperiment(std::move(ex));
  Trial& a = book.AddTrial(e, Json::object());
  Trial& b = book.AddTrial(e, Json::object());
  a.last_result.SetStored(R"({"loss":1.0})", "loss", 1.0);
  book.NoteLastResult(e, a);
  b.last_result.SetStored(R"({"loss":2.0})", "loss", 2.0);
  book.NoteLastResult(e, b);
  EXPECT_EQ(book.BestTrial(e), &a);
  b.last_result.SetStored(R"({"loss":0.5})", "loss", 0.5);  // not noted
  EXPECT_DEATH(book.BestTrial(e), "");                    // CHECK logs to stdout
  book.NoteLastResult(e, b);
  EXPECT_EQ(book.BestTrial(e), &b);
}

}  // namespace
}  // namespace ztune::head
