// How a trial is stored (head/trial_records.h): the record without the
// growing lists, one child record per checkpoint and per error, schema-1
// records with inline lists, and damage in any of them.
#include "head/trial_records.h"

#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "head/client_service.h"
#include "head/store_check.h"
#include "head/stored_result.h"
#include "storage/in_memory_store.h"
#include "storage/keys.h"
#include "tests/head/trial_runner_fixture.h"

namespace ztune::head {
namespace {

Trial MakeTrial(const TrialId& id, int checkpoints, int errors) {
  Trial t;
  t.trial_id = id;
  t.experiment_id = "e0001";
  t.seq = 1;
  t.config = Json{{"lr", 0.1}};
  t.status = TrialStatus::kTerminated;
  t.iteration = 7;
  for (int i = 1; i <= checkpoints; ++i) {
    t.checkpoints.push_back(CheckpointRecord{static_cast<uint64_t>(i), i, true, -0.5 * i, {}});
  }
  t.next_checkpoint_id = static_cast<uint64_t>(checkpoints) + 1;
  for (int i = 1; i <= errors; ++i) {
    t.error_log.push_back("Failure # " + std::to_string(i) + " (occurred at x)\nboom");
  }
  t.num_failures = errors;
  return t;
}

void Store(storage::Store& store, const Trial& t) {
  storage::WriteBatch b;
  PutTrialRecord(b, t);
  PutChildRecords(b, t);
  ASSERT_TRUE(store.Commit(b).ok());
}

std::vector<StoredTrial> ScanAll(storage::Store& store) {
  std::vector<StoredTrial> out;
  EXPECT_TRUE(ScanTrials(store, [&](StoredTrial& s) {
                out.push_back(std::move(s));
                return true;
              }).ok());
  return out;
}

void Put(storage::Store& store, const std::string& key, const std::string& value) {
  storage::WriteBatch b;
  b.Put(storage::Family::kTrials, key, value);
  ASSERT_TRUE(store.Commit(b).ok());
}

// The record is written without a DOM (Trial::ToRecordText); its bytes must
// be the DOM's, with every optional member present or not.
TEST(TrialRecordsTest, TheRecordTextIsTheDomDumped) {
  Trial plain = MakeTrial(TrialId("t0001"), 0, 0);
  Trial full = MakeTrial(TrialId("t0002"), 2, 1);
  full.config =
      Json{{"lr", 0.25}, {"net", {{"layers", {64, 32}}, {"act", "relu"}}}, {"z", nullptr}};
  full.last_result = Json{{"loss", 1.5},
                          {"training_iteration", 7},
                          {"done", false},
                          {"note", "caf\u00e9 \"quoted\"\n"}};
  full.error = "Failure # 1: \u2603 \\ \t";
  full.status = TrialStatus::kRunning;
  full.attempt = 3;
  full.start_time = 1.7e9 + 0.25;
  full.end_time = 0;
  full.num_restores = 2;
  full.checkpoints_given_up_through = 4;
  full.held = true;
  full.restore_from = TrialId("t0001");
  full.restarted_as = TrialId("t0003");
  full.actor_worker = WorkerId("w-12345678");
  full.NoteAttemptHost(WorkerId("w-12345678"));
  full.exports = Json{{"json", "{}"}};
  full.scheduler_state = Json{{"rung", 2}};
  full.exploits.push_back(
      ExploitRecord{4, TrialId("t0001"), 4, Json{{"lr", 0.1}}, Json{{"lr", 0.25}}, 1.7e9});
  full.checkpoint_requested = true;
  full.pause_requested = true;
  for (const Trial* t : {&plain, &full}) {
    SCOPED_TRACE(t->trial_id.str());
    EXPECT_EQ(t->ToRecordText(), t->ToJson().dump());
  }
  Trial pausing = plain;
  pausing.phase = TrialPhase::kPausing;
  EXPECT_EQ(pausing.ToRecordText(), pausing.ToJson().dump());
  EXPECT_NE(pausing.ToRecordText().find("\"pause_requested\":true"), std::string::npos);
}

TEST(TrialRecordsTest, ATrialComesBackWithItsCheckpointsAndErrors) {
  storage::InMemoryStore store;
  Trial t = MakeTrial("e0001_00000", 3, 2);
  t.checkpoints[1].score = -std::numeric_limits<double>::infinity();  // a loss of +inf, mode min
  Store(store, t);
  Store(store, MakeTrial("e0001_00001", 0, 0));
  auto all = ScanAll(store);
  ASSERT_EQ(all.size(), 2u);
  ASSERT_TRUE(all[0].trial.ok()) << all[0].trial.status().ToString();
  EXPECT_FALSE(all[0].inline_lists);
  const Trial& back = *all[0].trial;
  ASSERT_EQ(back.checkpoints.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.checkpoints[i].id, t.checkpoints[i].id);
    EXPECT_EQ(back.checkpoints[i].iteration, t.checkpoints[i].iteration);
    EXPECT_EQ(back.checkpoints[i].score, t.checkpoints[i].score);
  }
  EXPECT_EQ(back.error_log, t.error_log);
  ASSERT_TRUE(all[1].trial.ok());
  EXPECT_TRUE(all[1].trial->checkpoints.empty());
}

// The record a result rewrites does not grow with the trial's checkpoints
// and failures (it held both lists: a trial's life was quadratic).
TEST(TrialRecordsTest, TheTrialRecordDoesNotGrowWithItsLists) {
  Trial few = MakeTrial("e0001_00000", 1, 1);
  Trial many = MakeTrial("e0001_00000", 5000, 1);
  many.error_log.resize(1);
  few.next_checkpoint_id = many.next_checkpoint_id;
  EXPECT_EQ(few.ToJson().dump().size(), many.ToJson().dump().size());
  EXPECT_FALSE(many.ToJson().contains("checkpoints"));
  EXPECT_FALSE(many.ToJson().contains("error_log"));
}

TEST(TrialRecordsTest, ASchemaOneRecordWithInlineListsIsRead) {
  storage::InMemoryStore store;
  Trial t = MakeTrial("e0001_00000", 2, 1);
  Json legacy = t.ToJson();
  legacy["checkpoints"] = Json::array();
  for (const auto& c : t.checkpoints) legacy["checkpoints"].push_back(CheckpointRecordToJson(c));
  legacy["checkpoints"][1]["score"] = nullptr;  // how schema 1 wrote an infinite score
  legacy["error_log"] = t.error_log;
  Put(store, t.trial_id, legacy.dump());
  auto all = ScanAll(store);
  ASSERT_EQ(all.size(), 1u);
  ASSERT_TRUE(all[0].trial.ok()) << all[0].trial.status().ToString();
  EXPECT_TRUE(all[0].inline_lists);
  ASSERT_EQ(all[0].trial->checkpoints.size(), 2u);
  EXPECT_FALSE(all[0].trial->checkpoints[1].score_valid) << "its sign is lost: no score";
  EXPECT_EQ(all[0].trial->error_log, t.error_log);
}

// A start keeps each trial's last result as the stored text (no DOM) and
// reads the experiment's metric from it; whatever that path does not take
// (repeated keys, damage, schema 1) is parsed in full. Either way the trial
// is the one Trial::FromJson makes of the whole record.
TEST(TrialRecordsTest, TheLastResultIsKeptAsTheStoredTextAndReadsAsTheDomWould) {
  Trial base = MakeTrial(TrialId("e0001_00000"), 1, 1);
  base.last_result = Json{{"eval", {{"loss", 0.125}, {"acc", 0.5}}},
                          {"done", true},
                          {"training_iteration", 7},
                          {"note", "caf\u00e9 {\"}"}};
  const std::string text = base.ToRecordText();
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = text;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? s : s.replace(at, from.size(), to);
  };
  Json legacy = base.ToJson();
  legacy["checkpoints"] = Json::array({CheckpointRecordToJson(base.checkpoints[0])});
  legacy["error_log"] = base.error_log;
  struct Case {
    std::string name;
    std::string record;
  };
  const std::vector<Case> cases = {
      {"as written", text},
      {"spaces", replaced("\"last_result\":{", "\"last_result\" :  {  ")},
      {"the metric repeated", replaced("{\"acc\":0.5,", "{\"acc\":0.5,\"loss\":9,")},
      {"done repeated", replaced("\"done\":true", "\"done\":false,\"done\":true")},
      {"done not a boolean", replaced("\"done\":true", "\"done\":1")},
      {"last_result twice",
       replaced("\"last_result\":{", "\"last_result\":{\"x\":1},\"last_result\":{")},
      {"an escaped key", replaced("\"held\":", "\"h\\u0065ld\":")},
      {"damage after it", replaced("\"next_checkpoint_id\":2", "\"next_checkpoint_id\":2x")},
      {"damage inside it", replaced("\"training_iteration\":7", "\"training_iteration\":7x")},
      {"not an object", replaced("\"last_result\":{", "\"last_result\":[{") + "]"},
      {"schema 1", legacy.dump()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + ": " + c.record);
    storage::InMemoryStore store;
    Put(store, "e0001_00000", c.record);
    std::vector<StoredTrial> all;
    const MetricKeys metrics = {{"e0001", "eval/loss"}};
    ASSERT_TRUE(ScanTrials(
                    store,
                    [&](StoredTrial& st) {
                      all.push_back(std::move(st));
                      return true;
                    },
                    &metrics)
                    .ok());
    ASSERT_EQ(all.size(), 1u);
    const Json j = Json::parse(c.record, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      EXPECT_EQ(all[0].trial.status().message(), "record is not JSON");
      continue;
    }
    Result<Trial> expected = Trial::FromJson(j);
    ASSERT_EQ(all[0].trial.ok(), expected.ok()) << all[0].trial.status().ToString();
    if (!expected.ok()) {
      EXPECT_EQ(all[0].trial.status().message(), expected.status().message());
      continue;
    }
    const Trial& got = *all[0].trial;
    EXPECT_EQ(all[0].inline_lists, c.name == "schema 1");
    EXPECT_EQ(got.last_result.Get(), expected->last_result.Get());
    EXPECT_EQ(got.last_result.Metric("eval/loss"), expected->last_result.Metric("eval/loss"));
    EXPECT_EQ(got.last_result.Metric("eval/acc"), expected->last_result.Metric("eval/acc"));
    EXPECT_EQ(got.config, expected->config);
    EXPECT_EQ(got.ToJson(), expected->ToJson());
  }
  // The record as written comes back byte for byte.
  storage::InMemoryStore store;
  Put(store, "e0001_00000", text);
  auto all = ScanAll(store);
  ASSERT_EQ(all.size(), 1u);
  ASSERT_TRUE(all[0].trial.ok());
  EXPECT_EQ(all[0].trial->ToRecordText(), text);
  EXPECT_EQ(all[0].trial->last_result.Metric("eval/loss"), 0.125);
}

struct Damage {
  const char* name;
  std::function<void(storage::Store&)> apply;
  const char* message;
};

// The scan parses trials in batches, on two threads: over several batches
// every trial still comes back once, in key order, with its own children, and
// damage stays with the trial it is in (also at a batch's edge); a callback
// that says stop is not called again.
TEST(TrialRecordsTest, AScanOfThousandsOfTrialsKeepsOrderChildrenAndDamageAcrossBatches) {
  storage::InMemoryStore store;
  constexpr int kTrials = 9000;  // more than two parse batches
  auto id_of = [](int i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "e0001_%05d", i);
    return TrialId(buf);
  };
  storage::WriteBatch b;
  for (int i = 0; i < kTrials; ++i) {
    const Trial t = MakeTrial(id_of(i), i % 3, i % 2);
    PutTrialRecord(b, t);
    PutChildRecords(b, t);
  }
  ASSERT_TRUE(store.Commit(b).ok());
  Put(store, id_of(4096).str(), "{x");  // the first trial of the second batch
  // Children of a trial that has no record, sorting between two trials.
  const TrialId orphan("e0001_04095z");
  Put(store, storage::TrialChildKey(orphan, 'c', 1),
      CheckpointRecordToJson({1, 1, false, 0, {}}).dump());

  const std::vector<StoredTrial> all = ScanAll(store);
  ASSERT_EQ(all.size(), static_cast<size_t>(kTrials + 1));
  for (size_t k = 1; k < all.size(); ++k) ASSERT_LT(all[k - 1].key, all[k].key);
  size_t damaged = 0;
  for (const StoredTrial& st : all) {
    if (st.key == orphan.str()) {
      ASSERT_FALSE(st.trial.ok());
      EXPECT_NE(st.trial.status().message().find("without their trial record"), std::string::npos);
      ++damaged;
      continue;
    }
    if (st.key == id_of(4096).str()) {
      ASSERT_FALSE(st.trial.ok());
      EXPECT_NE(st.trial.status().message().find("not JSON"), std::string::npos);
      ++damaged;
      continue;
    }
    ASSERT_TRUE(st.trial.ok()) << st.key << ": " << st.trial.status().ToString();
    const int i = std::stoi(st.key.substr(6));
    EXPECT_EQ(st.trial->trial_id, id_of(i));
    EXPECT_EQ(st.trial->checkpoints.size(), static_cast<size_t>(i % 3)) << st.key;
    EXPECT_EQ(st.trial->error_log.size(), static_cast<size_t>(i % 2)) << st.key;
  }
  EXPECT_EQ(damaged, 2u);

  int calls = 0;
  ASSERT_TRUE(ScanTrials(store, [&](StoredTrial&) { return ++calls < 5000; }).ok());
  EXPECT_EQ(calls, 5000);
}

// A store whose scans fail after `n` entries (a read error halfway).
class ScanFailingStore : public storage::Store {
 public:
  ScanFailingStore(storage::Store& base, int n) : base_(base), n_(n) {}
  Status Commit(const storage::WriteBatch& batch) override { return base_.Commit(batch); }
  Result<std::optional<std::string>> Get(storage::Family f, std::string_view key) override {
    return base_.Get(f, key);
  }
  Status Scan(storage::Family f, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override {
    int seen = 0;
    bool failed = false;
    RETURN_IF_ERROR(base_.Scan(f, prefix, [&](std::string_view k, std::string_view v) {
      if (++seen > n_) {
        failed = true;
        return false;
      }
      return fn(k, v);
    }));
    return failed ? Status::IOError("injected read error") : Status::Ok();
  }

 private:
  storage::Store& base_;
  const int n_;
};

// A read error while a batch is still being parsed: the scan returns the
// error, the parse is abandoned (its thread joined), and nothing of the
// unfinished batches reaches the callback.
TEST(TrialRecordsTest, AReadErrorDuringTheScanAbandonsTheBatchesInFlight) {
  storage::InMemoryStore store;
  storage::WriteBatch b;
  for (int i = 0; i < 6000; ++i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "e0001_%05d", i);
    PutTrialRecord(b, MakeTrial(TrialId(buf), 0, 0));
  }
  ASSERT_TRUE(store.Commit(b).ok());
  ScanFailingStore failing(store, 5000);  // the first batch (4,096) is being parsed by then
  int calls = 0;
  const Status st = ScanTrials(failing, [&](StoredTrial&) {
    ++calls;
    return true;
  });
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.ToString();
  EXPECT_EQ(calls, 0);
}

TEST(TrialRecordsTest, DamagedChildrenMakeTheirTrialCorruptAndTheScanGoesOn) {
  const TrialId id = "e0001_00000";
  auto child = [&](char kind, uint64_t n) { return storage::TrialChildKey(id, kind, n); };
  const std::vector<Damage> cases = {
      {"orphan",
       [&](storage::Store& s) {
         Put(s, child('c', 1), CheckpointRecordToJson({1, 1, false, 0, {}}).dump());
       },
       "without their trial record"},
      {"not json",
       [&](storage::Store& s) {
         Store(s, MakeTrial(id, 1, 0));
         Put(s, child('c', 1), "{x");
       },
       "is not a JSON object"},
      {"id past next",
       [&](storage::Store& s) {
         Store(s, MakeTrial(id, 1, 0));
         Put(s, child('c', 9), CheckpointRecordToJson({9, 1, false, 0, {}}).dump());
       },
       "next checkpoint id"},
      {"id differs from key",
       [&](storage::Store& s) {
         Store(s, MakeTrial(id, 2, 0));
         Put(s, child('c', 1), CheckpointRecordToJson({2, 1, false, 0, {}}).dump());
       },
       "names checkpoint 2"},
      {"missing error",
       [&](storage::Store& s) {
         Store(s, MakeTrial(id, 0, 0));
         Put(s, child('e', 2), Json{{"entry", "x"}}.dump());
       },
       "an entry is missing"},
      {"error not a string",
       [&](storage::Store& s) {
         Store(s, MakeTrial(id, 0, 0));
         Put(s, child('e', 1), Json{{"entry", 5}}.dump());
       },
       "no string"},
      {"malformed key",
       [&](storage::Store& s) {
         Store(s, MakeTrial(id, 0, 0));
         Put(s, id + std::string("\0z", 2), "{}");
       },
       "malformed child record key"},
      {"inline and children",
       [&](storage::Store& s) {
         Trial t = MakeTrial(id, 1, 0);
         Json legacy = t.ToJson();
         legacy["error_log"] = Json::array();
         Put(s, id, legacy.dump());
         Put(s, child('c', 1), CheckpointRecordToJson(t.checkpoints[0]).dump());
       },
       "both inline lists"},
      {"record under another key",
       [&](storage::Store& s) { Put(s, id, MakeTrial("e0001_00009", 0, 0).ToJson().dump()); },
       "names trial e0001_00009"},
  };
  for (const Damage& d : cases) {
    storage::InMemoryStore store;
    d.apply(store);
    Store(store, MakeTrial("e0001_00001", 1, 1));  // an intact trial after it
    auto all = ScanAll(store);
    ASSERT_EQ(all.size(), 2u) << d.name;
    EXPECT_EQ(all[0].key, id.str()) << d.name;
    ASSERT_FALSE(all[0].trial.ok()) << d.name;
    EXPECT_EQ(all[0].trial.status().code(), StatusCode::kCorruption) << d.name;
    EXPECT_NE(all[0].trial.status().message().find(d.message), std::string::npos)
        << d.name << ": " << all[0].trial.status().message();
    EXPECT_TRUE(all[1].trial.ok()) << d.name << ": " << all[1].trial.status().ToString();
  }
}

class TrialStorageTest : public TrialRunnerTest {
 protected:
  // Child records of `id` of `kind` in the store.
  size_t Children(const std::string& id, char kind) {
    size_t n = 0;
    EXPECT_TRUE(store_
                    .Scan(storage::Family::kTrials, storage::TrialPrefix(id),
                          [&](std::string_view k, std::string_view) {
                            auto parts = storage::ParseTrialChildKey(k);
                            n += parts && parts->kind == kind ? 1 : 0;
                            return true;
                          })
                    .ok());
    return n;
  }
  Json Record(const std::string& id) {
    auto v = store_.Get(storage::Family::kTrials, id);
    EXPECT_TRUE(v.ok() && v->has_value());
    return v.ok() && v->has_value() ? Json::parse(**v) : Json();
  }
};

// A result rewrites the trial record only, and that record stays the same
// size however many checkpoints the trial keeps.
TEST_F(TrialStorageTest, AResultRewritesARecordOfConstantSize) {
  fleet_->Register("w1", 1);
  const std::string exp = Submit(R"({"trainable": "quadratic",
      "stop": {"training_iteration": 300}, "checkpoint": {"frequency": 1}})");
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  RunUntilIteration(id, 20);
  Commit();
  const size_t early = Record(id).dump().size();
  RunToEnd(exp);
  EXPECT_EQ(runner_->FindTrial(id)->checkpoints.size(), 300u);
  EXPECT_EQ(Children(id, storage::kTrialCheckpointRecord), 300u);
  // Only the numbers in it grow (iteration 20 -> 300, times, ids).
  EXPECT_LT(Record(id).dump().size(), early + 64);
}

// Retention deletes a dropped checkpoint's record with its bytes, and each
// failure adds one error record.
TEST_F(TrialStorageTest, RetentionAndFailuresKeepTheChildRecordsExact) {
  fleet_->Register("w1", 1);
  const std::string exp = Submit(R"({"trainable": "quadratic", "max_failures": 2,
      "stop": {"training_iteration": 12},
      "checkpoint": {"frequency": 2, "num_to_keep": 2}})");
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  fleet_->FailAt(id, 11, /*once=*/false);  // 5 checkpoints, then 3 failures: ERROR
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->status, TrialStatus::kError);
  EXPECT_EQ(t->num_failures, 3);
  EXPECT_EQ(Children(id, storage::kTrialErrorRecord), 3u);
  ASSERT_EQ(t->checkpoints.size(), 2u);
  EXPECT_EQ(Children(id, storage::kTrialCheckpointRecord), 2u);
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->ToText();
}

// A schema-1 store (lists inline, schema "1"): the next head moves every
// trial's lists to records of their own in its first commit, with schema 2;
// nothing is lost and --check agrees.
TEST_F(TrialStorageTest, ALoadMigratesASchemaOneStore) {
  fleet_->Register("w1", 2);
  const std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "max_failures": 2, "stop": {"training_iteration": 8}, "checkpoint": {"frequency": 2}})");
  const auto ids = runner_->FindExperiment(exp)->trial_ids;
  fleet_->FailAt(ids[0], 3);
  RunToEnd(exp);
  std::map<std::string, Trial> before;
  storage::WriteBatch legacy;
  for (const auto& id : ids) {
    const Trial& t = *runner_->FindTrial(id);
    before.emplace(id, t);
    Json j = t.ToJson();
    j["checkpoints"] = Json::array();
    for (const auto& c : t.checkpoints) j["checkpoints"].push_back(CheckpointRecordToJson(c));
    j["error_log"] = t.error_log;
    legacy.Put(storage::Family::kTrials, id, j.dump());
    for (const auto& c : t.checkpoints) {
      legacy.Delete(storage::Family::kTrials,
                    storage::TrialChildKey(id, storage::kTrialCheckpointRecord, c.id));
    }
    for (size_t n = 1; n <= t.error_log.size(); ++n) {
      legacy.Delete(storage::Family::kTrials,
                    storage::TrialChildKey(id, storage::kTrialErrorRecord, n));
    }
  }
  legacy.Put(storage::Family::kMeta, storage::kMetaSchema, "1");
  ASSERT_TRUE(store_.Commit(legacy).ok());
  ASSERT_EQ(Children(ids[0], storage::kTrialCheckpointRecord), 0u);

  for (int restart = 0; restart < 2; ++restart) {
    Reset();  // a new head on the same store (its Load is committed)
    EXPECT_EQ(*store_.Get(storage::Family::kMeta, storage::kMetaSchema),
              std::to_string(storage::kSchemaVersion));
    for (const auto& id : ids) {
      const Trial& was = before.at(id);
      const Trial& now = *runner_->FindTrial(id);
      EXPECT_EQ(now.error_log, was.error_log) << id;
      ASSERT_EQ(now.checkpoints.size(), was.checkpoints.size()) << id;
      for (size_t i = 0; i < was.checkpoints.size(); ++i) {
        EXPECT_EQ(now.checkpoints[i].id, was.checkpoints[i].id) << id;
      }
      EXPECT_FALSE(Record(id).contains("checkpoints")) << id;
      EXPECT_FALSE(Record(id).contains("error_log")) << id;
      EXPECT_EQ(Children(id, storage::kTrialCheckpointRecord), was.checkpoints.size()) << id;
      EXPECT_EQ(Children(id, storage::kTrialErrorRecord), was.error_log.size()) << id;
    }
  }
  EXPECT_EQ(before.at(ids[0]).error_log.size(), 1u);
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->ToText();
}

// A schema-2 store (results as JSON text): the next head writes schema 3 in
// its first commit and rewrites nothing. Clients read the old results as
// before, a trial that goes on after the restart adds msgpack results
// beside its JSON ones, and --check agrees.
TEST_F(TrialStorageTest, ASchemaTwoStoreKeepsItsJsonResultsBesideNewMsgpackOnes) {
  fleet_->Register("w1", 2);
  const std::string done_exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "stop": {"training_iteration": 4}})");
  RunToEnd(done_exp);
  const std::string live_exp = Submit(R"({"trainable": "quadratic",
      "stop": {"training_iteration": 6}})");
  const TrialId live = runner_->FindExperiment(live_exp)->trial_ids[0];
  RunUntilIteration(live, 3);
  Commit();
  std::vector<TrialId> ids = runner_->FindExperiment(done_exp)->trial_ids;
  ids.push_back(live);
  auto results_of = [&](const TrialId& id) {
    ClientService clients(*runner_);
    return clients.Handle(Json{{"op", "results"}, {"trial_id", id}}, ClientCaller::Anonymous());
  };
  std::map<TrialId, Json> read_before;
  storage::WriteBatch as_schema_two;
  for (const TrialId& id : ids) {
    read_before[id] = results_of(id);
    ASSERT_TRUE(store_
                    .Scan(storage::Family::kResults, storage::TrialPrefix(id),
                          [&](std::string_view k, std::string_view v) {
                            EXPECT_FALSE(IsStoredAsJsonText(v)) << "schema 3 writes msgpack";
                            as_schema_two.Put(storage::Family::kResults, std::string(k),
                                              StoredResultText(v).value());
                            return true;
                          })
                    .ok());
  }
  as_schema_two.Put(storage::Family::kMeta, storage::kMetaSchema, "2");
  ASSERT_TRUE(store_.Commit(as_schema_two).ok());

  CrashHead();  // a new head on the same store (its Load is committed)
  EXPECT_EQ(*store_.Get(storage::Family::kMeta, storage::kMetaSchema), "3");
  fleet_->Reregister("w1", 2);
  for (const TrialId& id : ids) EXPECT_EQ(results_of(id), read_before[id]) << id;
  RunToEnd(live_exp);
  std::vector<bool> json_text;
  ASSERT_TRUE(store_
                  .Scan(storage::Family::kResults, storage::TrialPrefix(live),
                        [&](std::string_view, std::string_view v) {
                          json_text.push_back(IsStoredAsJsonText(v));
                          return true;
                        })
                  .ok());
  EXPECT_EQ(json_text, (std::vector<bool>{true, true, true, false, false, false}));
  const Json after = results_of(live);
  ASSERT_EQ(after["results"].size(), 6u) << after.dump();
  for (size_t i = 0; i < 6; ++i) {
    const Json& r = after["results"][i];
    EXPECT_EQ(r["training_iteration"], i + 1);
    EXPECT_EQ(r["trial_id"], live.str());
    EXPECT_EQ(r["done"], i == 5);
    if (i < 3) {
      EXPECT_EQ(r, read_before[live]["results"][i]);
    }
  }
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->ToText();
}

}  // namespace
}  // namespace ztune::head
