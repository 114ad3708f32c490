#include "storage/fault_injecting_store.h"

#include <gtest/gtest.h>

#include "storage/in_memory_store.h"
#include "storage/keys.h"

namespace ztune::storage {
namespace {

class FaultInjectingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteBatch b;
    b.Put(Family::kTrials, "t1", "PENDING");
    b.Put(Family::kCheckpoints, CheckpointKey("t1", 1), "ckpt");
    ASSERT_TRUE(faulty_.Commit(b).ok());
  }

  // A mixed turn: overwrites, a new result, a delete.
  static WriteBatch Turn() {
    WriteBatch b;
    b.Put(Family::kTrials, "t1", "RUNNING");
    b.Put(Family::kResults, ResultKey("t1", 1), "{}");
    b.Delete(Family::kCheckpoints, CheckpointKey("t1", 1));
    return b;
  }

  void ExpectTurnNotApplied() {
    EXPECT_EQ(*base_.Get(Family::kTrials, "t1"), "PENDING");
    EXPECT_EQ(*base_.Get(Family::kResults, ResultKey("t1", 1)), std::nullopt);
    EXPECT_EQ(*base_.Get(Family::kCheckpoints, CheckpointKey("t1", 1)), "ckpt");
  }

  InMemoryStore base_;
  FaultInjectingStore faulty_{base_};
};

TEST_F(FaultInjectingStoreTest, FailedCommitAppliesNothingWhenNthCommitIsArmed) {
  faulty_.FailNthCommit(2);
  ASSERT_TRUE(faulty_.Commit(WriteBatch()).ok());  // 1st from now

  const Status s = faulty_.Commit(Turn());  // 2nd: fails
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  ExpectTurnNotApplied();
  EXPECT_EQ(*faulty_.Get(Family::kTrials, "t1"), "PENDING");  // reads go through
  EXPECT_EQ(faulty_.commits_failed(), 1u);

  ASSERT_TRUE(faulty_.Commit(Turn()).ok());  // one-shot: the retry succeeds
  EXPECT_EQ(*base_.Get(Family::kTrials, "t1"), "RUNNING");
  EXPECT_EQ(*base_.Get(Family::kCheckpoints, CheckpointKey("t1", 1)), std::nullopt);
  EXPECT_EQ(faulty_.commits_attempted(), 4u);  // including SetUp's
}

TEST_F(FaultInjectingStoreTest, EveryCommitFailsWhenFailAllIsSet) {
  faulty_.FailAllCommits(true);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(faulty_.Commit(Turn()).code(), StatusCode::kIOError);
  ExpectTurnNotApplied();
  faulty_.FailAllCommits(false);
  EXPECT_TRUE(faulty_.Commit(Turn()).ok());
  EXPECT_EQ(faulty_.commits_failed(), 3u);
}

TEST_F(FaultInjectingStoreTest, NothingFailsWhenArmedCommitIsCancelled) {
  faulty_.FailNthCommit(1);
  faulty_.FailNthCommit(0);
  EXPECT_TRUE(faulty_.Commit(Turn()).ok());
  EXPECT_EQ(faulty_.commits_failed(), 0u);
}

}  // namespace
}  // namespace ztune::storage
