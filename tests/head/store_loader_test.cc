// StoreLoader: what a starting head reads back (epoch, experiments with their
// search spaces, trials in creation order, the schema-1 trials to rewrite)
// and the damage it refuses, naming the record.
#include "head/store_loader.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "head/stored_result.h"
#include "head/trial_records.h"
#include "storage/in_memory_store.h"
#include "storage/keys.h"

namespace ztune::head {
namespace {

Experiment MakeExperiment(const std::string& id, uint64_t next_variant, uint64_t total) {
  Experiment e;
  e.experiment_id = id;
  auto spec = ExperimentSpec::Parse(
      Json{{"trainable", "noop"}, {"param_space", {{"lr", {{"uniform", {0, 1}}}}}}}, 7);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  e.spec = *spec;
  e.next_variant = next_variant;
  e.total_variants = total;
  e.next_trial_index = 10;
  return e;
}

Trial MakeTrial(const std::string& exp, const TrialId& id, uint64_t seq) {
  Trial t;
  t.trial_id = id;
  t.experiment_id = exp;
  t.seq = seq;
  t.config = Json{{"lr", 0.5}};
  return t;
}

void Put(storage::Store& store, storage::Family family, const std::string& key,
         const std::string& value) {
  storage::WriteBatch b;
  b.Put(family, key, value);
  ASSERT_TRUE(store.Commit(b).ok());
}

void PutExperiment(storage::Store& store, const Experiment& e) {
  Put(store, storage::Family::kExperiments, e.experiment_id, e.ToJson().dump());
}

void PutTrial(storage::Store& store, const Trial& t) {
  storage::WriteBatch b;
  PutTrialRecord(b, t);
  PutChildRecords(b, t);
  ASSERT_TRUE(store.Commit(b).ok());
}

TEST(StoreLoaderTest, AnEmptyStoreStartsTheFirstEpoch) {
  storage::InMemoryStore store;
  auto loaded = LoadStore(store);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->epoch, 1u);
  EXPECT_TRUE(loaded->experiments.empty());
  EXPECT_TRUE(loaded->trials.empty());
  EXPECT_FALSE(loaded->schema_upgrade_from.has_value());
}

TEST(StoreLoaderTest, TheEpochFollowsTheStoredOneAndRefusesAnUnreadableOne) {
  storage::InMemoryStore store;
  Put(store, storage::Family::kMeta, storage::kMetaHeadEpoch, "41");
  auto loaded = LoadStore(store);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->epoch, 42u);
  for (const char* bad : {"", "x1", "12 ", "-1", "18446744073709551616", "18446744073709551615"}) {
    Put(store, storage::Family::kMeta, storage::kMetaHeadEpoch, bad);
    auto refused = LoadStore(store);
    ASSERT_FALSE(refused.ok()) << "'" << bad << "'";
    EXPECT_EQ(refused.status().code(), StatusCode::kCorruption);
    EXPECT_NE(refused.status().message().find("head_epoch"), std::string::npos);
  }
}

// Trials come back in creation order whatever their keys' order; only the
// experiments whose search may go on keep a search space.
TEST(StoreLoaderTest, TrialsComeBackInCreationOrderAndOnlyOpenSearchesKeepTheirSpace) {
  storage::InMemoryStore store;
  PutExperiment(store, MakeExperiment("e0001", 2, 4));  // searching
  PutExperiment(store, MakeExperiment("e0002", 4, 4));  // search done
  Experiment stopped = MakeExperiment("e0003", 1, 4);
  stopped.stopped = true;
  PutExperiment(store, stopped);
  PutTrial(store, MakeTrial("e0002", "e0002_00000", 3));
  PutTrial(store, MakeTrial("e0001", "e0001_00001", 2));
  PutTrial(store, MakeTrial("e0001", "e0001_00000", 1));
  auto loaded = LoadStore(store);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->experiments.size(), 3u);
  EXPECT_EQ(loaded->experiments[0].experiment_id, "e0001");
  ASSERT_EQ(loaded->searching.size(), 1u);
  EXPECT_EQ(loaded->searching.begin()->first, "e0001");
  std::vector<std::string> ids;
  for (const Trial& t : loaded->trials) ids.push_back(t.trial_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"e0001_00000", "e0001_00001", "e0002_00000"}));
  EXPECT_TRUE(loaded->inline_lists.empty());
}

TEST(StoreLoaderTest, ASchemaOneStoreNamesTheTrialsWhoseListsMove) {
  storage::InMemoryStore store;
  Put(store, storage::Family::kMeta, storage::kMetaSchema, "1");
  PutExperiment(store, MakeExperiment("e0001", 1, 1));
  Trial t = MakeTrial("e0001", "e0001_00000", 1);
  t.error_log.push_back("Failure # 1 (occurred at x)\nboom");
  Json inline_record = t.ToJson();
  inline_record["error_log"] = t.error_log;  // a schema-1 record kept its lists inline
  inline_record["checkpoints"] = Json::array();
  Put(store, storage::Family::kTrials, t.trial_id, inline_record.dump());
  PutTrial(store, MakeTrial("e0001", "e0001_00001", 2));
  auto loaded = LoadStore(store);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->schema_upgrade_from, std::optional<std::string>("1"));
  EXPECT_EQ(loaded->inline_lists, (std::set<TrialId>{"e0001_00000"}));
  EXPECT_EQ(loaded->trials[0].error_log, t.error_log);
}

// Each kind of damage is refused with the record named, never loaded as less.
// Results are committed without the trial record: a live trial's progress is
// its newest stored result; a finished trial's record was written with its
// last result and is taken as it is (no read of its results).
// Results as schema 3 stores them (msgpack) and as a store written by
// schema 2 holds them (JSON text): a start reads both.
class StoreLoaderResultsTest : public ::testing::TestWithParam<bool> {
 protected:
  std::string Value(const Json& result) const {
    return GetParam() ? StoredResultValue(result) : result.dump();
  }
};

TEST_P(StoreLoaderResultsTest, ALiveTrialsProgressIsItsNewestStoredResult) {
  storage::InMemoryStore store;
  PutExperiment(store, MakeExperiment("e0001", 3, 3));
  Trial running = MakeTrial("e0001", "e0001_00000", 1);
  running.status = TrialStatus::kRunning;
  running.iteration = 2;
  running.last_result = Json{{"training_iteration", 2}, {"loss", 2.0}};
  Trial paused = MakeTrial("e0001", "e0001_00001", 2);
  paused.status = TrialStatus::kPaused;
  Trial finished = MakeTrial("e0001", "e0001_00002", 3);
  finished.status = TrialStatus::kTerminated;
  finished.iteration = 1;
  finished.last_result = Json{{"training_iteration", 1}, {"done", true}};
  for (const Trial* t : {&running, &paused, &finished}) PutTrial(store, *t);
  for (int64_t i = 1; i <= 5; ++i) {
    Put(store, storage::Family::kResults, storage::ResultKey(running.trial_id, i),
        Value(Json{{"training_iteration", i}, {"loss", 1.0 / i}}));
  }
  Put(store, storage::Family::kResults, storage::ResultKey(paused.trial_id, 1),
      Value(Json{{"training_iteration", 1}, {"should_checkpoint", true}}));
  // Damage under a finished trial's key is not read at load (--check sees it).
  Put(store, storage::Family::kResults, storage::ResultKey(finished.trial_id, 2), "{");

  auto loaded = LoadStore(store);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->trials.size(), 3u);
  EXPECT_EQ(loaded->trials[0].iteration, 5);
  EXPECT_EQ(loaded->trials[0].last_result.Get(), (Json{{"training_iteration", 5}, {"loss", 0.2}}));
  EXPECT_EQ(loaded->trials[1].iteration, 1);
  EXPECT_EQ(loaded->trials[1].last_result.Get().value("should_checkpoint", false), true);
  EXPECT_EQ(loaded->trials[2].iteration, 1);
  EXPECT_EQ(loaded->trials[2].last_result.Get(), finished.last_result.Get());
}

INSTANTIATE_TEST_SUITE_P(Schemas, StoreLoaderResultsTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Msgpack" : "JsonText"; });

TEST(StoreLoaderTest, DamageIsRefusedNamingTheRecord) {
  struct Case {
    const char* name;
    std::function<void(storage::Store&)> damage;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"experiment not JSON",
       [](storage::Store& s) { Put(s, storage::Family::kExperiments, "e0009", "{"); },
       "experiments record 'e0009'"},
      {"experiment stored twice",
       [](storage::Store& s) {
         Put(s, storage::Family::kExperiments, "e0009",
             MakeExperiment("e0001", 1, 1).ToJson().dump());
       },
       "stored twice"},
      {"search space that does not parse",
       [](storage::Store& s) {
         Json j = MakeExperiment("e0002", 0, 1).ToJson();
         j["spec"]["param_space"] = Json{{"lr", {{"uniform", {1}}}}};
         Put(s, storage::Family::kExperiments, "e0002", j.dump());
       },
       "experiments record 'e0002'"},
      {"trial of no experiment",
       [](storage::Store& s) { PutTrial(s, MakeTrial("e0077", "e0077_00000", 5)); },
       "unknown experiment e0077"},
      {"trial at an index its experiment issues again",
       [](storage::Store& s) { PutTrial(s, MakeTrial("e0001", "e0001_00010", 5)); },
       "issues its next trial at 10 (the id would repeat)"},
      {"trial id its experiment never issues",
       [](storage::Store& s) { PutTrial(s, MakeTrial("e0001", "e0001_7", 5)); },
       "trial id 'e0001_7' is not an id experiment e0001 issues"},
      {"trial not JSON",
       [](storage::Store& s) { Put(s, storage::Family::kTrials, "e0001_00005", "[1,"); },
       "trials record 'e0001_00005'"},
      {"a live trial's newest result not JSON",
       [](storage::Store& s) {
         Put(s, storage::Family::kResults, storage::ResultKey("e0001_00000", 1), "{");
       },
       "result 1 of trial e0001_00000 is not JSON"},
      {"a live trial's newest result under another iteration's key",
       [](storage::Store& s) {
         Put(s, storage::Family::kResults, storage::ResultKey("e0001_00000", 2),
             R"({"training_iteration": 3})");
       },
       "result 2 of trial e0001_00000 does not name its iteration"},
      {"a live trial's newest result with a flag that is not a boolean",
       [](storage::Store& s) {
         Put(s, storage::Family::kResults, storage::ResultKey("e0001_00000", 1),
             R"({"training_iteration": 1, "done": 1})");
       },
       "result 1 of trial e0001_00000.done is not a boolean"},
      {"a live trial's newest result neither JSON nor msgpack",
       [](storage::Store& s) {
         Put(s, storage::Family::kResults, storage::ResultKey("e0001_00000", 1), "\x82\xa1");
       },
       "result 1 of trial e0001_00000 is neither JSON text nor a msgpack map"},
      {"a live trial's newest msgpack result with a flag that is not a boolean",
       [](storage::Store& s) {
         Put(s, storage::Family::kResults, storage::ResultKey("e0001_00000", 1),
             StoredResultValue(Json{{"training_iteration", 1}, {"done", 1}}));
       },
       "result 1 of trial e0001_00000.done is not a boolean"},
  };
  for (const Case& c : cases) {
    storage::InMemoryStore store;
    PutExperiment(store, MakeExperiment("e0001", 1, 1));
    PutTrial(store, MakeTrial("e0001", "e0001_00000", 1));
    c.damage(store);
    auto loaded = LoadStore(store);
    ASSERT_FALSE(loaded.ok()) << c.name;
    EXPECT_EQ(loaded.status().code(), StatusCode::kCorruption) << c.name;
    EXPECT_NE(loaded.status().message().find(c.says), std::string::npos)
        << c.name << ": " << loaded.status().message();
  }
}

}  // namespace
}  // namespace ztune::head
