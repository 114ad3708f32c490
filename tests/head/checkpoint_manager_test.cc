// CheckpointManager on an InMemoryStore: when a checkpoint is due, retention
// by score, and which checkpoint a start restores.
#include "head/checkpoint_manager.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "storage/in_memory_store.h"
#include "storage/keys.h"
#include "tests/fakes/recording_command_sink.h"
#include "tests/fakes/temp_dir.h"

namespace ztune::head {
namespace {

class CheckpointManagerTest : public ::testing::Test {
 protected:
  CheckpointManagerTest() {
    t_.trial_id = "e0001_00000";
    t_.experiment_id = "e0001";
  }

  // A result at `iteration` with `loss`, as the runner stores it.
  void Result(int64_t iteration, double loss, bool done = false, bool should = false) {
    t_.iteration = iteration;
    Json last{{"training_iteration", iteration}, {"loss", loss}, {"done", done}};
    if (should) last["should_checkpoint"] = true;
    t_.last_result = last;
  }
  void Commit() {
    ASSERT_TRUE(store_.Commit(batch_).ok());
    batch_.Clear();
  }
  std::vector<uint64_t> Ids() const {
    std::vector<uint64_t> ids;
    for (const auto& c : t_.checkpoints) ids.push_back(c.id);
    return ids;
  }
  bool Stored(uint64_t id) {
    auto r = store_.Get(storage::Family::kCheckpoints, storage::CheckpointKey(t_.trial_id, id));
    return r.ok() && r->has_value();
  }

  storage::InMemoryStore store_;
  storage::WriteBatch batch_;
  testing::RecordingCommandSink sink_;
  CheckpointManager manager_{store_, batch_, sink_};
  Trial t_;
};

TEST_F(CheckpointManagerTest, DueByFrequencyAtEndAndRequestOnceEach) {
  CheckpointPolicy p;
  p.frequency = 3;
  Result(2, 1.0);
  EXPECT_FALSE(CheckpointManager::Due(t_, p));
  Result(3, 1.0);
  EXPECT_TRUE(CheckpointManager::Due(t_, p));
  manager_.Add(t_, p, "c3", 3);
  EXPECT_FALSE(CheckpointManager::Due(t_, p)) << "already taken at 3";
  Result(4, 1.0, /*done=*/true);
  EXPECT_FALSE(CheckpointManager::Due(t_, p));
  p.at_end = true;
  EXPECT_TRUE(CheckpointManager::Due(t_, p));
  Result(5, 1.0, false, /*should=*/true);
  EXPECT_TRUE(CheckpointManager::Due(t_, CheckpointPolicy{}));
}

TEST_F(CheckpointManagerTest, RetentionKeepsTheBestByScoreAndAlwaysTheNewest) {
  CheckpointPolicy p;
  p.num_to_keep = 2;
  p.score_attribute = "loss";
  p.score_max = false;  // lower loss is better
  const double losses[] = {0.5, 0.1, 0.9, 0.3, 0.8};
  for (int i = 0; i < 5; ++i) {
    Result(i + 1, losses[i]);
    manager_.Add(t_, p, "c" + std::to_string(i + 1), i + 1);
    Commit();
  }
  // Best two by loss: 2 (0.1) and 4 (0.3); the newest, 5, is kept too.
  EXPECT_EQ(Ids(), (std::vector<uint64_t>{2, 4, 5}));
  for (uint64_t id : {1, 3}) EXPECT_FALSE(Stored(id)) << id;
  for (uint64_t id : {2, 4, 5}) EXPECT_TRUE(Stored(id)) << id;
}

TEST_F(CheckpointManagerTest, AStartRestoresMemoryThenNewestThenTheSource) {
  CheckpointPolicy p;
  std::string bytes;
  EXPECT_EQ(manager_.ForStart(t_, nullptr, bytes), nullptr) << "nothing yet: from scratch";

  Trial source;
  source.trial_id = "e0001_00009";
  source.checkpoints.push_back({7, 12, false, 0, {}});
  storage::WriteBatch b;
  b.Put(storage::Family::kCheckpoints, storage::CheckpointKey(source.trial_id, 7), "src");
  ASSERT_TRUE(store_.Commit(b).ok());
  ASSERT_NE(manager_.ForStart(t_, &source, bytes), nullptr);
  EXPECT_EQ(bytes, "src");
  EXPECT_EQ(t_.resume_iteration, 12);

  Result(4, 1.0);
  manager_.Add(t_, p, "own4", 4);  // not committed: read from the turn's batch
  ASSERT_NE(manager_.ForStart(t_, &source, bytes), nullptr);
  EXPECT_EQ(bytes, "own4");
  EXPECT_EQ(t_.resume_iteration, 4);

  t_.memory_checkpoint = "memory";
  Result(6, 1.0);
  ASSERT_NE(manager_.ForStart(t_, &source, bytes), nullptr);
  EXPECT_EQ(bytes, "memory");
  EXPECT_EQ(t_.resume_iteration, 6);
  EXPECT_TRUE(t_.memory_checkpoint.empty()) << "consumed";
  EXPECT_EQ(t_.num_restores, 3);
}

TEST_F(CheckpointManagerTest, GivenUpCheckpointsAreNotRestoredButLaterOnesAre) {
  CheckpointPolicy p;
  std::string bytes;
  Result(3, 1.0);
  manager_.Add(t_, p, "c3", 3);
  Commit();
  t_.restore_from = "e0001_00009";
  manager_.GiveUpCurrent(t_);
  EXPECT_EQ(manager_.ForStart(t_, nullptr, bytes), nullptr);
  EXPECT_EQ(t_.resume_iteration, 0);
  EXPECT_TRUE(t_.restore_from.empty());
  Result(5, 1.0);
  manager_.Add(t_, p, "c5", 5);
  Commit();
  ASSERT_NE(manager_.ForStart(t_, nullptr, bytes), nullptr);
  EXPECT_EQ(bytes, "c5");
}

TEST_F(CheckpointManagerTest, AMissingCheckpointStartsFromScratch) {
  t_.checkpoints.push_back({1, 3, false, 0, {}});  // its bytes were never stored
  t_.iteration = 5;
  std::string bytes;
  EXPECT_EQ(manager_.ForStart(t_, nullptr, bytes), nullptr);
  EXPECT_EQ(t_.resume_iteration, 0);
  EXPECT_EQ(t_.num_restores, 0);
}

// Checkpoint files: a recorded file is adopted and named by its record;
// retention removes a dropped one only once the batch is committed
// (RemovePending, after the commit); a clone is its own file; a pause's
// memory checkpoint file goes when dropped or restored from; a delivered
// file no trial adopts goes at the end of the turn.
class CheckpointManagerFilesTest : public CheckpointManagerTest {
 protected:
  CheckpointManagerFilesTest() {
    EXPECT_TRUE(files_.Open().ok());
    manager_.set_files(&files_);
  }

  // An upload of `n` bytes, finished and delivered as the payload streams do.
  std::string Upload(size_t n) {
    auto upload = files_.Begin(n);
    EXPECT_TRUE(upload.ok());
    EXPECT_TRUE((*upload)->Append(std::string(n, 'c')).ok());
    auto ref = (*upload)->Finish();
    EXPECT_TRUE(ref.ok());
    files_.Delivered(ref->name);
    return EncodeCheckpointFileRef(*ref);
  }
  bool Exists(const std::string& ref_bytes) {
    auto ref = DecodeCheckpointFileRef(ref_bytes);
    return ref.ok() && ref->has_value() && std::filesystem::exists(dir_ / (*ref)->name);
  }

  testing::TempDir tmp_;
  std::filesystem::path dir_{tmp_.path()};
  CheckpointFiles files_{dir_.string()};
};

TEST_F(CheckpointManagerFilesTest, RetentionRemovesADroppedFileOnlyAfterTheCommit) {
  CheckpointPolicy keep_one;
  keep_one.num_to_keep = 1;
  Result(1, 5.0);
  const std::string first = Upload(100);
  manager_.Add(t_, keep_one, first, 1);
  ASSERT_EQ(t_.checkpoints.size(), 1u);
  EXPECT_FALSE(t_.checkpoints[0].file.empty());
  files_.RemovePending();
  EXPECT_TRUE(Exists(first)) << "adopted: it stays";
  Commit();

  Result(2, 4.0);
  const std::string second = Upload(200);
  manager_.Add(t_, keep_one, second, 2);
  EXPECT_EQ(Ids(), std::vector<uint64_t>{2});
  EXPECT_TRUE(Exists(first)) << "its deletion is not committed yet";
  Commit();
  files_.RemovePending();
  EXPECT_FALSE(Exists(first));
  EXPECT_TRUE(Exists(second));
  std::set<std::string> in_use;
  CheckpointManager::CollectFiles(t_, in_use);
  EXPECT_EQ(in_use.size(), 1u);
  auto read = manager_.Read(t_.trial_id, 2);
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ(**read, second) << "the store holds the reference";
}

TEST_F(CheckpointManagerFilesTest, CloneMemoryAndStaleFilesEachGoWhenNothingHoldsThem) {
  const std::string donor = Upload(64);
  files_.Adopt(DecodeCheckpointFileRef(donor)->value().name);
  const std::string copy = manager_.CopyForAnotherTrial(donor);
  ASSERT_NE(copy, donor);
  EXPECT_TRUE(Exists(copy));
  EXPECT_EQ(DecodeCheckpointFileRef(copy)->value().size, 64u);

  // A pause's checkpoint: adopted, restored from, then gone after the turn.
  const std::string paused = Upload(32);
  manager_.Adopt(paused);
  t_.memory_checkpoint = paused;
  std::string storage;
  std::string* restored = manager_.ForStart(t_, nullptr, storage);
  ASSERT_NE(restored, nullptr);
  EXPECT_EQ(*restored, paused);
  EXPECT_TRUE(t_.memory_checkpoint.empty());
  EXPECT_TRUE(Exists(paused)) << "until the RESTORE that streams it has opened it";
  files_.RemovePending();
  EXPECT_FALSE(Exists(paused));

  // Dropped without a restart (the trial failed): gone the same way.
  const std::string dropped = Upload(16);
  manager_.Adopt(dropped);
  t_.memory_checkpoint = dropped;
  manager_.DropMemoryCheckpoint(t_);
  files_.RemovePending();
  EXPECT_FALSE(Exists(dropped));

  // Delivered, never adopted (a stale SAVE reply): gone at the end of the turn.
  const std::string stale = Upload(8);
  files_.RemovePending();
  EXPECT_FALSE(Exists(stale));
  EXPECT_TRUE(Exists(donor));
  EXPECT_TRUE(Exists(copy));
}

}  // namespace
}  // namespace ztune::head
