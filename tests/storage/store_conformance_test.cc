// One typed suite for every Store implementation: whatever the head is tested
// against (InMemoryStore) must behave like what it runs on (RocksDbStore).
#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "storage/fault_injecting_store.h"
#include "storage/in_memory_store.h"
#include "storage/keys.h"
#include "storage/rocksdb_store.h"
#include "storage/store.h"
#include "tests/fakes/temp_dir.h"

namespace ztune::storage {
namespace {

using namespace std::string_literals;
using KV = std::pair<std::string, std::string>;

// Backends: each makes one empty store in Init() and exposes it as Store&.
struct InMemoryBackend {
  Status Init() { return Status::Ok(); }
  Store& store() { return store_; }
  InMemoryStore store_;
};

struct RocksDbBackend {
  Status Init() {
    auto opened = RocksDbStore::Open(dir_.Sub("db"));
    if (!opened.ok()) return opened.status();
    store_ = std::move(opened).value();
    return Status::Ok();
  }
  Store& store() { return *store_; }
  testing::TempDir dir_;
  std::unique_ptr<RocksDbStore> store_;
};

// The decorator with no fault armed must be transparent.
struct PassThroughFaultInjectingBackend {
  Status Init() { return Status::Ok(); }
  Store& store() { return faulty_; }
  InMemoryStore base_;
  FaultInjectingStore faulty_{base_};
};

// A store that implements only what Store requires: Last is Store's default,
// built on Scan.
class ScanOnlyStore final : public Store {
 public:
  Status Commit(const WriteBatch& batch) override { return base_.Commit(batch); }
  Result<std::optional<std::string>> Get(Family f, std::string_view key) override {
    return base_.Get(f, key);
  }
  Status Scan(Family f, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override {
    return base_.Scan(f, prefix, fn);
  }

 private:
  InMemoryStore base_;
};

struct DefaultLastBackend {
  Status Init() { return Status::Ok(); }
  Store& store() { return store_; }
  ScanOnlyStore store_;
};

template <typename Backend>
class StoreConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = backend_.Init();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  Store& store() { return backend_.store(); }

  void Commit(const WriteBatch& batch) {
    const Status s = store().Commit(batch);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  std::optional<std::string> Get(Family f, std::string_view key) {
    auto r = store().Get(f, key);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::nullopt;
  }

  // Every (key, value) under `prefix`, in scan order.
  std::vector<KV> ScanAll(Family f, std::string_view prefix) {
    std::vector<KV> out;
    const Status s = store().Scan(f, prefix, [&](std::string_view k, std::string_view v) {
      out.emplace_back(std::string(k), std::string(v));
      return true;
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }

  Backend backend_;
};

struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, InMemoryBackend>) return "InMemory";
    if (std::is_same_v<T, RocksDbBackend>) return "RocksDb";
    if (std::is_same_v<T, DefaultLastBackend>) return "DefaultLast";
    return "FaultInjectingPassThrough";
  }
};

using Backends = ::testing::Types<InMemoryBackend, RocksDbBackend, PassThroughFaultInjectingBackend,
                                  DefaultLastBackend>;
TYPED_TEST_SUITE(StoreConformanceTest, Backends, BackendNames);

TYPED_TEST(StoreConformanceTest, GetReturnsNulloptWhenKeyIsAbsent) {
  EXPECT_EQ(this->Get(Family::kTrials, "nope"), std::nullopt);
  EXPECT_EQ(this->Get(Family::kCheckpoints, ""), std::nullopt);
}

TYPED_TEST(StoreConformanceTest, GetReturnsLatestValueWhenKeyIsPutOverwrittenAndDeleted) {
  WriteBatch b;
  b.Put(Family::kTrials, "t1", R"({"status":"PENDING"})");
  this->Commit(b);
  EXPECT_EQ(this->Get(Family::kTrials, "t1"), R"({"status":"PENDING"})");

  b.Clear();
  b.Put(Family::kTrials, "t1", R"({"status":"RUNNING"})");
  this->Commit(b);
  EXPECT_EQ(this->Get(Family::kTrials, "t1"), R"({"status":"RUNNING"})");

  b.Clear();
  b.Delete(Family::kTrials, "t1");
  b.Delete(Family::kTrials, "never-existed");  // deleting an absent key is fine
  this->Commit(b);
  EXPECT_EQ(this->Get(Family::kTrials, "t1"), std::nullopt);
}

TYPED_TEST(StoreConformanceTest, FamiliesAreSeparateWhenKeysAreEqual) {
  WriteBatch b;
  for (int i = 0; i < kNumFamilies; ++i) {
    b.Put(static_cast<Family>(i), "same", FamilyName(static_cast<Family>(i)));
  }
  this->Commit(b);
  for (int i = 0; i < kNumFamilies; ++i) {
    EXPECT_EQ(this->Get(static_cast<Family>(i), "same"), FamilyName(static_cast<Family>(i)));
  }
  b.Clear();
  b.Delete(Family::kResults, "same");
  this->Commit(b);
  EXPECT_EQ(this->Get(Family::kResults, "same"), std::nullopt);
  EXPECT_EQ(this->Get(Family::kTrials, "same"), "trials");
}

TYPED_TEST(StoreConformanceTest, CommitAppliesWholeBatchWhenItSpansAllFamilies) {
  WriteBatch setup;
  setup.Put(Family::kTrials, "old", "x");
  setup.Put(Family::kCheckpoints, CheckpointKey("old", 1), "x");
  this->Commit(setup);

  // One head turn: a new experiment and trial, a result, a checkpoint, the
  // removal of an old trial's records, and a meta counter.
  WriteBatch turn;
  turn.Put(Family::kExperiments, "e1", R"({"name":"exp"})");
  turn.Put(Family::kTrials, "t1", R"({"status":"RUNNING"})");
  turn.Put(Family::kResults, ResultKey("t1", 1), R"({"training_iteration":1})");
  turn.Put(Family::kCheckpoints, CheckpointKey("t1", 7), std::string(1000, 'c'));
  turn.Put(Family::kMeta, kMetaNextExperiment, "2");
  turn.Delete(Family::kTrials, "old");
  turn.Delete(Family::kCheckpoints, CheckpointKey("old", 1));
  this->Commit(turn);

  EXPECT_EQ(this->Get(Family::kExperiments, "e1"), R"({"name":"exp"})");
  EXPECT_EQ(this->Get(Family::kTrials, "t1"), R"({"status":"RUNNING"})");
  EXPECT_EQ(this->Get(Family::kResults, ResultKey("t1", 1)), R"({"training_iteration":1})");
  EXPECT_EQ(this->Get(Family::kCheckpoints, CheckpointKey("t1", 7)), std::string(1000, 'c'));
  EXPECT_EQ(this->Get(Family::kMeta, kMetaNextExperiment), "2");
  EXPECT_EQ(this->Get(Family::kTrials, "old"), std::nullopt);
  EXPECT_EQ(this->Get(Family::kCheckpoints, CheckpointKey("old", 1)), std::nullopt);
}

TYPED_TEST(StoreConformanceTest, LaterOpsWinWhenBatchTouchesKeyTwice) {
  WriteBatch b;
  b.Put(Family::kTrials, "a", "1");
  b.Delete(Family::kTrials, "a");
  b.Put(Family::kTrials, "a", "2");
  b.Put(Family::kTrials, "b", "1");
  b.Delete(Family::kTrials, "b");
  this->Commit(b);
  EXPECT_EQ(this->Get(Family::kTrials, "a"), "2");
  EXPECT_EQ(this->Get(Family::kTrials, "b"), std::nullopt);
}

TYPED_TEST(StoreConformanceTest, CommitSucceedsWhenBatchIsEmpty) {
  this->Commit(WriteBatch());
  EXPECT_TRUE(this->ScanAll(Family::kTrials, "").empty());
}

TYPED_TEST(StoreConformanceTest, ScanReturnsResultsInIterationOrderWhenWrittenShuffled) {
  std::vector<uint64_t> iterations;
  for (uint64_t i = 0; i <= 300; ++i) iterations.push_back(i);
  iterations.push_back(65535);
  iterations.push_back(65536);
  iterations.push_back(uint64_t{1} << 32);
  std::vector<uint64_t> shuffled = iterations;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(42));
  // Spread over several commits so RocksDB's answer merges several sources.
  WriteBatch b;
  for (size_t i = 0; i < shuffled.size(); ++i) {
    b.Put(Family::kResults, ResultKey("t1", shuffled[i]), std::to_string(shuffled[i]));
    if (i % 50 == 49) {
      this->Commit(b);
      b.Clear();
    }
  }
  this->Commit(b);

  const std::vector<KV> got = this->ScanAll(Family::kResults, TrialPrefix("t1"));
  ASSERT_EQ(got.size(), iterations.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(KeySuffixNumber(got[i].first), iterations[i]) << "position " << i;
    EXPECT_EQ(got[i].second, std::to_string(iterations[i]));
  }
}

TYPED_TEST(StoreConformanceTest, ScanStopsWhenFnReturnsFalse) {
  WriteBatch b;
  for (uint64_t i = 1; i <= 10; ++i) b.Put(Family::kResults, ResultKey("t1", i), "r");
  this->Commit(b);

  std::vector<uint64_t> seen;
  const Status s = this->store().Scan(Family::kResults, TrialPrefix("t1"),
                                      [&](std::string_view k, std::string_view) {
                                        seen.push_back(*KeySuffixNumber(k));
                                        return seen.size() < 3;
                                      });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 3}));
}

TYPED_TEST(StoreConformanceTest, ScanSeesOnlyOneTrialWhenIdsShareAPrefix) {
  // "t1" is a string prefix of "t10" and "t1x"; the '\0' separator keeps
  // their records apart.
  WriteBatch b;
  for (const char* trial : {"t", "t1", "t10", "t1x", "t2"}) {
    for (uint64_t i = 0; i < 3; ++i) {
      b.Put(Family::kResults, ResultKey(trial, i), trial);
      b.Put(Family::kCheckpoints, CheckpointKey(trial, i), trial);
    }
  }
  b.Put(Family::kResults, "t1", "a key without separator");
  this->Commit(b);

  for (Family f : {Family::kResults, Family::kCheckpoints}) {
    const std::vector<KV> got = this->ScanAll(f, TrialPrefix("t1"));
    ASSERT_EQ(got.size(), 3u) << FamilyName(f);
    for (uint64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i].first, ResultKey("t1", i));
      EXPECT_EQ(got[i].second, "t1");
    }
  }
  EXPECT_EQ(this->ScanAll(Family::kResults, TrialPrefix("t10")).size(), 3u);
  EXPECT_EQ(this->ScanAll(Family::kResults, TrialPrefix("t3")).size(), 0u);
  EXPECT_EQ(this->ScanAll(Family::kResults, "t1").size(), 10u);  // raw prefix: t1, t10, t1x
}

TYPED_TEST(StoreConformanceTest, ScanVisitsWholeFamilyInByteOrderWhenPrefixIsEmpty) {
  WriteBatch b;
  // Includes bytes >= 0x80, which must sort after ASCII (unsigned order).
  for (const std::string& k : {"b"s, "\xff"s, "a"s, "\x80"s, ""s, "\0"s, "ab"s}) {
    b.Put(Family::kExperiments, k, "v" + k);
  }
  b.Put(Family::kTrials, "other family", "x");
  this->Commit(b);

  const std::vector<KV> got = this->ScanAll(Family::kExperiments, "");
  std::vector<std::string> keys;
  for (const KV& kv : got) keys.push_back(kv.first);
  EXPECT_EQ(keys, (std::vector<std::string>{""s, "\0"s, "a"s, "ab"s, "b"s, "\x80"s, "\xff"s}));
}

TYPED_TEST(StoreConformanceTest, ScanWorksWhenPrefixEndsInFfBytes) {
  // The prefix has no short successor; the scan must still be bounded.
  WriteBatch b;
  b.Put(Family::kResults, "\xfe\xff", "1");
  b.Put(Family::kResults, "\xff\xff", "2");
  b.Put(Family::kResults, "\xff\xff\x01", "3");
  b.Put(Family::kResults, "\xff\xff\xff", "4");
  b.Put(Family::kResults, "\xfe\xff\xff", "5");
  this->Commit(b);

  const std::vector<KV> got = this->ScanAll(Family::kResults, "\xff\xff");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].second, "2");
  EXPECT_EQ(got[1].second, "3");
  EXPECT_EQ(got[2].second, "4");
  const std::vector<KV> fe = this->ScanAll(Family::kResults, "\xfe\xff");
  ASSERT_EQ(fe.size(), 2u);
  EXPECT_EQ(fe[0].second, "1");
  EXPECT_EQ(fe[1].second, "5");
}

TYPED_TEST(StoreConformanceTest, LastIsTheNewestKeyOfAPrefixAndNothingOutsideIt) {
  WriteBatch b;
  for (const char* trial : {"t1", "t10", "t2"}) {
    for (uint64_t i = 1; i <= 3; ++i) {
      b.Put(Family::kResults, ResultKey(trial, i), std::string(trial) + "#" + std::to_string(i));
    }
  }
  // Iteration 256 sorts after 3 only as a big-endian number.
  b.Put(Family::kResults, ResultKey("t1", 256), "t1#256");
  b.Put(Family::kResults, ResultKey("t2", 3), "t2#3 overwritten");
  b.Delete(Family::kResults, ResultKey("t10", 3));
  b.Put(Family::kTrials, "t3", "another family");
  this->Commit(b);

  auto last = [&](std::string_view prefix) -> std::optional<Store::Entry> {
    auto r = this->store().Last(Family::kResults, prefix);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::nullopt;
  };
  std::optional<Store::Entry> t1 = last(TrialPrefix("t1"));
  ASSERT_TRUE(t1.has_value());
  EXPECT_EQ(t1->key, ResultKey("t1", 256));
  EXPECT_EQ(t1->value, "t1#256");
  std::optional<Store::Entry> t10 = last(TrialPrefix("t10"));
  ASSERT_TRUE(t10.has_value());
  EXPECT_EQ(t10->value, "t10#2") << "a deleted key is not the last";
  std::optional<Store::Entry> t2 = last(TrialPrefix("t2"));
  ASSERT_TRUE(t2.has_value());
  EXPECT_EQ(t2->value, "t2#3 overwritten");
  EXPECT_FALSE(last(TrialPrefix("t3")).has_value()) << "only the trials family has t3";
  EXPECT_FALSE(last(TrialPrefix("t0")).has_value());
  std::optional<Store::Entry> whole = last("");
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->value, "t2#3 overwritten") << "the empty prefix: the family's last key";
}

TYPED_TEST(StoreConformanceTest, LastWorksWhenPrefixEndsInFfBytes) {
  WriteBatch b;
  b.Put(Family::kResults, "\xff\xff", "1");
  b.Put(Family::kResults, "\xff\xff\xff", "2");
  b.Put(Family::kResults, "\xfe\xff\xff", "3");
  this->Commit(b);
  auto ff = this->store().Last(Family::kResults, "\xff\xff");
  ASSERT_TRUE(ff.ok() && ff->has_value());
  EXPECT_EQ((*ff)->value, "2");
  auto fe = this->store().Last(Family::kResults, "\xfe");
  ASSERT_TRUE(fe.ok() && fe->has_value());
  EXPECT_EQ((*fe)->value, "3");
  auto none = this->store().Last(Family::kResults, "\xfd");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TYPED_TEST(StoreConformanceTest, ValuesRoundTripWhenBinaryOrLarge) {
  std::string binary;
  for (int i = 0; i < 512; ++i) binary.push_back(static_cast<char>(i % 256));
  // Larger than RocksDbStore's blob threshold (64 KiB): goes to a blob file.
  std::string big(1 << 20, '\0');
  std::mt19937 rng(7);
  for (char& c : big) c = static_cast<char>(rng());

  WriteBatch b;
  b.Put(Family::kCheckpoints, CheckpointKey("t1", 1), binary);
  b.Put(Family::kCheckpoints, CheckpointKey("t1", 2), big);
  b.Put(Family::kCheckpoints, CheckpointKey("t1", 3), "");
  this->Commit(b);

  EXPECT_EQ(this->Get(Family::kCheckpoints, CheckpointKey("t1", 1)), binary);
  EXPECT_EQ(this->Get(Family::kCheckpoints, CheckpointKey("t1", 2)), big);
  EXPECT_EQ(this->Get(Family::kCheckpoints, CheckpointKey("t1", 3)), "");
  const std::vector<KV> got = this->ScanAll(Family::kCheckpoints, TrialPrefix("t1"));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1].second, big);
}

}  // namespace
}  // namespace ztune::storage
