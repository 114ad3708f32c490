#include "head/store_check.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "head/checkpoint_files.h"
#include "head/stored_result.h"
#include "head/trial_runner.h"
#include "storage/in_memory_store.h"
#include "storage/keys.h"
#include "tests/fakes/fake_worker_fleet.h"
#include "tests/fakes/recording_command_sink.h"
#include "tests/fakes/temp_dir.h"

namespace ztune::head {
namespace {

class StoreCheckTest : public ::testing::Test {
 protected:
  // A store written by a real run: 2 trials x 10 iterations, checkpoints every 4.
  void SetUp() override {
    testing::RecordingCommandSink sink;
    FakeClock clock;
    RunnerOptions options;
    options.strict_invariants = true;
    TrialRunner runner(store_, sink, clock, options);
    ASSERT_TRUE(runner.Load().ok());
    testing::FakeWorkerFleet fleet(runner, sink, store_);
    fleet.Register("w", 2);
    auto r = runner.Submit(Json::parse(R"({"trainable": "quadratic", "num_samples": 2,
        "stop": {"training_iteration": 10}, "checkpoint": {"frequency": 4}})"));
    ASSERT_TRUE(r.ok());
    exp_ = (*r)["experiment_id"];
    for (int i = 0; i < 40; ++i) fleet.Turn();
    ASSERT_TRUE(runner.FindExperiment(exp_)->finished);
    trial_ = runner.FindExperiment(exp_)->trial_ids[0];
  }

  void Apply(storage::WriteBatch batch) { ASSERT_TRUE(store_.Commit(batch).ok()); }

  storage::InMemoryStore store_;
  std::string exp_;
  std::string trial_;
};

TEST_F(StoreCheckTest, AcceptsAConsistentStore) {
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->ToText();
  EXPECT_EQ(report->experiments, 1);
  EXPECT_EQ(report->trials, 2);
  EXPECT_EQ(report->results, 20);
  EXPECT_EQ(report->checkpoints, 4);
}

// Found by tests/fuzz/fuzz_store_records: an experiment whose
// next_trial_index is not past its stored trials would issue a stored id
// again, and the head that loaded it aborted on the duplicate at its next new
// trial. --check reports it, and the head refuses to start on it.
TEST_F(StoreCheckTest, ReportsATrialIdItsExperimentWouldIssueAgain) {
  auto record = store_.Get(storage::Family::kExperiments, exp_);
  ASSERT_TRUE(record.ok() && record->has_value());
  Json e = Json::parse(**record);
  e["next_trial_index"] = 1;
  storage::WriteBatch b;
  b.Put(storage::Family::kExperiments, exp_, e.dump());
  Apply(std::move(b));
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  ASSERT_FALSE(report->ok());
  EXPECT_NE(report->ToText().find("is at index 1, but experiment " + exp_ +
                                  " issues its next trial at 1 (the id would repeat)"),
            std::string::npos)
      << report->ToText();

  testing::RecordingCommandSink sink;
  FakeClock clock;
  RunnerOptions options;
  options.strict_invariants = true;
  TrialRunner restarted(store_, sink, clock, options);
  const Status loaded = restarted.Load();
  EXPECT_EQ(loaded.code(), StatusCode::kCorruption);
  EXPECT_NE(loaded.message().find("the id would repeat"), std::string::npos) << loaded.ToString();
}

TEST_F(StoreCheckTest, ReportsAGapInResults) {
  storage::WriteBatch b;
  b.Delete(storage::Family::kResults, storage::ResultKey(trial_, 5));
  Apply(std::move(b));
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  ASSERT_FALSE(report->ok());
  EXPECT_NE(report->ToText().find("jump from iteration 4 to 6"), std::string::npos)
      << report->ToText();
}

// A batch of results is committed without the trial record: a live trial's
// record may be behind its results, never ahead; a finished trial's record
// holds its last iteration.
TEST_F(StoreCheckTest, ALiveTrialsRecordMayBeBehindItsResultsOnly) {
  auto record = store_.Get(storage::Family::kTrials, trial_);
  ASSERT_TRUE(record.ok() && record->has_value());
  const Json stored = Json::parse(**record);
  auto check_with = [&](const char* status, int64_t iteration) {
    Json t = stored;
    t["status"] = status;
    t["iteration"] = iteration;
    storage::WriteBatch b;
    b.Put(storage::Family::kTrials, trial_, t.dump());
    Apply(std::move(b));
    auto report = CheckStore(store_);
    EXPECT_TRUE(report.ok());
    return report.ok() ? report->ToText() : report.status().ToString();
  };
  const std::string says = "records iteration";
  EXPECT_EQ(check_with("PAUSED", 7).find(says), std::string::npos) << "behind: results went on";
  EXPECT_NE(check_with("PAUSED", 11)
                .find("(PAUSED) records iteration 11 but its stored results "
                      "end at 10"),
            std::string::npos);
  EXPECT_NE(check_with("TERMINATED", 7).find("(TERMINATED) records iteration 7"),
            std::string::npos);
  EXPECT_EQ(check_with("TERMINATED", 10).find(says), std::string::npos);
}

TEST_F(StoreCheckTest, ReportsMissingAndOrphanedCheckpoints) {
  storage::WriteBatch b;
  b.Delete(storage::Family::kCheckpoints, storage::CheckpointKey(trial_, 1));
  b.Put(storage::Family::kCheckpoints, storage::CheckpointKey("e0009_00000", 3), "x");
  Apply(std::move(b));
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  std::string text = report->ToText();
  EXPECT_NE(text.find("bytes are missing"), std::string::npos) << text;
  EXPECT_NE(text.find("not retained"), std::string::npos) << text;
}

// A checkpoint kept as a file: consistent when its file has the recorded
// size and its record names it; each departure is reported by name.
TEST_F(StoreCheckTest, ChecksCheckpointFilesAgainstTheirReferencesAndRecords) {
  const testing::TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string name = "00ab-1.ckpt";
  auto write_file = [&](size_t n) {
    std::ofstream(dir + "/" + name, std::ios::binary | std::ios::trunc) << std::string(n, 'c');
  };
  const std::string record_key = storage::TrialChildKey(trial_, storage::kTrialCheckpointRecord, 1);
  auto stored = store_.Get(storage::Family::kTrials, record_key);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  Json record = Json::parse(**stored);
  auto refer = [&](const std::string& file_in_record) {
    storage::WriteBatch b;
    b.Put(storage::Family::kCheckpoints, storage::CheckpointKey(trial_, 1),
          EncodeCheckpointFileRef({name, 5000}));
    Json r = record;
    if (!file_in_record.empty()) r["file"] = file_in_record;
    b.Put(storage::Family::kTrials, record_key, r.dump());
    Apply(std::move(b));
  };
  auto check = [&] {
    auto report = CheckStore(store_, dir);
    EXPECT_TRUE(report.ok());
    return report.ok() ? *report : StoreCheckReport{};
  };

  refer(name);
  write_file(5000);
  StoreCheckReport good = check();
  EXPECT_TRUE(good.ok()) << good.ToText();
  EXPECT_EQ(good.checkpoint_files, 1);

  write_file(4000);
  EXPECT_NE(check().ToText().find("its file " + name + " holds 4000 bytes; 5000 were recorded"),
            std::string::npos)
      << check().ToText();
  std::filesystem::remove(dir + "/" + name);
  EXPECT_NE(check().ToText().find("its file " + name + " is missing"), std::string::npos)
      << check().ToText();
  write_file(5000);
  refer("");  // the record says the bytes are inline
  EXPECT_NE(check().ToText().find("names file '', the store holds file '" + name + "'"),
            std::string::npos)
      << check().ToText();
}

TEST_F(StoreCheckTest, ReportsUnreadableRecordsAndResultMismatch) {
  storage::WriteBatch b;
  b.Put(storage::Family::kTrials, "broken", "{not json");
  b.Put(storage::Family::kResults, storage::ResultKey(trial_, 3), R"({"training_iteration": 7})");
  Apply(std::move(b));
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  std::string text = report->ToText();
  EXPECT_NE(text.find("trial broken"), std::string::npos) << text;
  EXPECT_NE(text.find("does not match its key"), std::string::npos) << text;
}

// Found by tests/fuzz/fuzz_store_records: a stored integer field holding a
// float out of the integer's range (1e30) was converted with a plain cast,
// undefined behaviour, instead of making the record unreadable.
TEST(StoredRecordTest, FloatWhereAnIntegerIsStoredIsCorruption) {
  Trial t;
  t.trial_id = "e0001_00000";
  t.experiment_id = "e0001";
  t.placement.bundles.push_back({"w", ResourceSet::FromDoubles({{"CPU", 1}}), {0}});
  t.checkpoints.push_back({1, 4, true, 4.0, {}});
  const Json good = t.ToJson();
  ASSERT_TRUE(Trial::FromJson(good).ok());
  for (const char* key :
       {"seq", "attempt", "num_failures", "iteration", "next_checkpoint_id", "num_restores"}) {
    Json bad = good;
    bad[key] = 1e30;
    auto r = Trial::FromJson(bad);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << key;
  }
  // Found by the long run of fuzz_store_records: a last result whose `done`
  // is not a boolean threw out of the runner at the head's restart.
  for (Json last : {Json{{"done", Json::object()}}, Json{{"should_checkpoint", 1}},
                    Json::array(), Json("x")}) {
    Json bad = good;
    bad["last_result"] = last;
    EXPECT_EQ(Trial::FromJson(bad).status().code(), StatusCode::kCorruption) << last.dump();
  }
  Json bad = good;
  bad["placement"][0]["gpu_ids"] = Json::array({1e30});
  EXPECT_EQ(Trial::FromJson(bad).status().code(), StatusCode::kCorruption);
  bad = good;
  bad["checkpoints"][0]["id"] = -1e30;
  EXPECT_EQ(Trial::FromJson(bad).status().code(), StatusCode::kCorruption);

  Experiment e;
  e.experiment_id = "e0001";
  e.spec = ExperimentSpec::Parse(Json{{"trainable", "noop"}}, 1).value();
  const Json stored = e.ToJson();
  ASSERT_TRUE(Experiment::FromJson(stored).ok());
  for (const char* key : {"next_variant", "total_variants", "added_trials", "next_trial_index"}) {
    Json b = stored;
    b[key] = 1e30;
    EXPECT_EQ(Experiment::FromJson(b).status().code(), StatusCode::kCorruption) << key;
  }
  Json before_added_trials = stored;  // as heads before the field wrote it
  before_added_trials.erase("added_trials");
  auto old = Experiment::FromJson(before_added_trials);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->added_trials, 0u);
}

// Found by tests/fuzz/fuzz_store_records: a result whose training_iteration
// is a float out of int64's range was read with a plain cast (undefined
// behaviour); a trial_id that is not a string threw out of --check.
TEST_F(StoreCheckTest, ReportsResultFieldsOfTheWrongType) {
  for (const char* body : {R"({"training_iteration": 1e30, "trial_id": "T"})",
                           R"({"training_iteration": -1e30, "trial_id": "T"})",
                           R"({"training_iteration": 3.0, "trial_id": "T"})",
                           R"({"training_iteration": -3, "trial_id": "T"})",
                           R"({"training_iteration": 3, "trial_id": 5})",
                           R"({"training_iteration": "3", "trial_id": null})"}) {
    std::string stored = body;
    if (auto at = stored.find("\"T\""); at != std::string::npos) {
      stored.replace(at, 3, "\"" + trial_ + "\"");
    }
    // As a schema-2 store holds it (JSON text) and as schema 3 does.
    for (const std::string& value : {stored, StoredResultValue(Json::parse(stored))}) {
      storage::WriteBatch b;
      b.Put(storage::Family::kResults, storage::ResultKey(trial_, 3), value);
      Apply(std::move(b));
      auto report = CheckStore(store_);
      ASSERT_TRUE(report.ok()) << body;
      EXPECT_NE(report->ToText().find("result 3 of " + trial_ + " does not match its key"),
                std::string::npos)
          << body << "\n"
          << report->ToText();
    }
  }
}

TEST_F(StoreCheckTest, ReportsAResultThatIsNeitherJsonNorMsgpack) {
  for (const std::string& value :
       {std::string("\x81\xa1"), std::string("\x91\x01"), std::string("[1]"), std::string()}) {
    storage::WriteBatch b;
    b.Put(storage::Family::kResults, storage::ResultKey(trial_, 3), value);
    Apply(std::move(b));
    auto report = CheckStore(store_);
    ASSERT_TRUE(report.ok());
    EXPECT_NE(
        report->ToText().find("result 3 of " + trial_ + " is neither JSON text nor a msgpack map"),
        std::string::npos)
        << report->ToText();
  }
}

// Found by tests/fuzz/fuzz_store_records: a key that is not UTF-8 (or holds
// an escape sequence) in a corrupt store made `--check --json` abort.
TEST_F(StoreCheckTest, ReportsKeysThatAreNotUtf8OrPrintable) {
  storage::WriteBatch batch;
  batch.Put(storage::Family::kTrials, std::string("bad\xff\x1b[2J", 8), "not json");
  Apply(std::move(batch));
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->ok());
  std::string json;
  EXPECT_NO_THROW(json = report->ToJson().dump(2));
  EXPECT_EQ(report->ToText().find('\x1b'), std::string::npos) << report->ToText();
  EXPECT_NE(json.find("\\\\x1b"), std::string::npos) << json;
}

}  // namespace
}  // namespace ztune::head
