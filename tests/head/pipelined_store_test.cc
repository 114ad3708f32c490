#include "head/pipelined_store.h"

#include <poll.h>

#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/fakes/gated_store.h"

namespace ztune::head {
namespace {

using storage::Family;
using storage::WriteBatch;
using testing::GatedStore;

WriteBatch Put(const std::string& key, const std::string& value) {
  WriteBatch b;
  b.Put(Family::kMeta, key, value);
  return b;
}

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// Waits for the next ended commits (the thread's, so not at once).
std::vector<PipelinedStore::Ended> AwaitEnded(PipelinedStore& store) {
  pollfd p{store.ended_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 10'000), 1) << "no commit ended within 10 s";
  return store.TakeEnded();
}

TEST(PipelinedStoreTest, ACommitHandedOverEndsBehindTheCallerAndSignalsItsFd) {
  GatedStore base;
  base.SetOpen(false);
  PipelinedStore store(base, nullptr);
  ASSERT_GE(store.ended_fd(), 0);
  EXPECT_FALSE(store.outstanding());
  const PipelinedStore::Ticket t = store.CommitLater(Put("a", "1"));
  EXPECT_EQ(t, 1u);
  EXPECT_TRUE(store.outstanding());
  base.AwaitEntered(1);  // running, held at the gate: CommitLater did not wait for it
  EXPECT_FALSE(Readable(store.ended_fd()));
  EXPECT_TRUE(store.TakeEnded().empty());
  base.SetOpen(true);
  std::vector<PipelinedStore::Ended> ended = AwaitEnded(store);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].through, 1u);
  EXPECT_TRUE(ended[0].status.ok());
  EXPECT_LE(ended[0].start_us, ended[0].end_us);
  EXPECT_FALSE(store.outstanding());
  EXPECT_FALSE(Readable(store.ended_fd())) << "TakeEnded leaves the fd readable";
}

TEST(PipelinedStoreTest, BatchesHandedOverWhileOneCommitRunsGoTogetherInOrder) {
  GatedStore base;
  base.SetOpen(false);
  PipelinedStore store(base, nullptr);
  store.CommitLater(Put("k", "first"));
  base.AwaitEntered(1);
  store.CommitLater(Put("k", "second"));
  WriteBatch two = Put("k", "third");
  two.Put(Family::kMeta, "other", "x");
  store.CommitLater(std::move(two));
  base.SetOpen(true);
  store.Drain();
  // The first alone, then the two that waited as one, in the order handed over.
  EXPECT_EQ(base.committed_sizes(), (std::vector<size_t>{1, 3}));
  std::vector<PipelinedStore::Ended> ended = store.TakeEnded();
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_EQ(ended[0].through, 1u);
  EXPECT_EQ(ended[1].through, 3u);
  EXPECT_FALSE(store.outstanding());
  auto value = base.Get(Family::kMeta, "k");
  ASSERT_TRUE(value.ok() && value->has_value());
  EXPECT_EQ(**value, "third");
}

TEST(PipelinedStoreTest, ReadsWaitForEverythingHandedOver) {
  GatedStore base;
  base.SetOpen(false);
  PipelinedStore store(base, nullptr);
  store.CommitLater(Put("a", "1"));
  base.AwaitEntered(1);
  store.CommitLater(Put("b", "2"));  // waits behind the first
  // A read that did not wait would return at once, before the gate opens,
  // and miss "b".
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    base.SetOpen(true);
  });
  Result<std::optional<std::string>> b = store.Get(Family::kMeta, "b");
  opener.join();
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->has_value()) << "the read ran before the batch handed over ahead of it";
  EXPECT_EQ(**b, "2");
  int seen = 0;
  ASSERT_TRUE(store
                  .Scan(Family::kMeta, "",
                        [&](std::string_view, std::string_view) {
                          ++seen;
                          return true;
                        })
                  .ok());
  EXPECT_EQ(seen, 2);
  auto last = store.Last(Family::kMeta, "");
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_EQ((*last)->key, "b");
}

TEST(PipelinedStoreTest, ASynchronousCommitGoesAfterEverythingHandedOver) {
  GatedStore base;
  PipelinedStore store(base, nullptr);
  store.CommitLater(Put("k", "handed over"));
  ASSERT_TRUE(store.Commit(Put("k", "direct")).ok());
  auto value = base.Get(Family::kMeta, "k");
  ASSERT_TRUE(value.ok() && value->has_value());
  EXPECT_EQ(**value, "direct");
  EXPECT_EQ(store.TakeEnded().size(), 1u);  // the handed-over one is still reported
}

TEST(PipelinedStoreTest, AFailedCommitStopsThePipeline) {
  GatedStore base;
  base.SetOpen(false);
  base.SetFail(true);
  PipelinedStore store(base, nullptr);
  store.CommitLater(Put("a", "1"));
  base.AwaitEntered(1);
  store.CommitLater(Put("b", "2"));
  base.SetOpen(true);
  store.Drain();  // returns: nothing more will be committed
  std::vector<PipelinedStore::Ended> ended = store.TakeEnded();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].through, 1u);
  EXPECT_EQ(ended[0].status.code(), StatusCode::kIOError);
  EXPECT_TRUE(store.outstanding()) << "a failed commit's tickets never end";
  base.SetFail(false);
  auto b = base.Get(Family::kMeta, "b");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->has_value()) << "a batch handed over after a failed commit was committed";
  EXPECT_TRUE(base.committed_sizes().empty());
}

TEST(PipelinedStoreTest, ARefusedCommitIsHeldWithWhatCameAfterUntilCommitHeld) {
  GatedStore base;
  base.SetOpen(false);
  base.SetRefuse(true);
  PipelinedStore store(base, nullptr);
  store.CommitLater(Put("a", "1"));
  base.AwaitEntered(1);
  store.CommitLater(Put("b", "2"));
  base.SetOpen(true);
  store.Drain();
  std::vector<PipelinedStore::Ended> ended = store.TakeEnded();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(store.outstanding());
  // Reads see what is held, newest first.
  store.CommitLater(Put("a", "1 again"));
  auto a = store.Get(Family::kMeta, "a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ(**a, "1 again");
  auto b = store.Get(Family::kMeta, "b");
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ(**b, "2");
  auto base_b = base.Get(Family::kMeta, "b");
  ASSERT_TRUE(base_b.ok());
  EXPECT_FALSE(base_b->has_value()) << "a held batch reached the store";
  // Still no space: held again.
  EXPECT_EQ(store.CommitHeld().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(store.TakeEnded().empty());
  store.CommitLater(Put("c", "3"));  // comes after the held ones
  base.SetRefuse(false);
  ASSERT_TRUE(store.CommitHeld().ok());
  EXPECT_EQ(base.committed_sizes(), (std::vector<size_t>{4}));
  ended = store.TakeEnded();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].through, 4u);
  a = base.Get(Family::kMeta, "a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ(**a, "1 again");
  EXPECT_TRUE(ended[0].status.ok());
  EXPECT_FALSE(store.outstanding());
  // And the pipeline runs again.
  store.CommitLater(Put("d", "4"));
  store.Drain();
  EXPECT_EQ(store.TakeEnded().size(), 1u);
  EXPECT_EQ(base.committed_sizes(), (std::vector<size_t>{4, 1}));
}

TEST(PipelinedStoreTest, DestructionCommitsWhatWasHandedOver) {
  GatedStore base;
  base.SetOpen(false);
  std::thread opener;
  {
    PipelinedStore store(base, nullptr);
    store.CommitLater(Put("a", "1"));
    store.CommitLater(Put("b", "2"));
    opener = std::thread([&] {
      base.AwaitEntered(1);
      base.SetOpen(true);
    });
  }  // the destructor waits for both
  opener.join();
  auto b = base.Get(Family::kMeta, "b");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->has_value());
}

TEST(PipelinedStoreTest, DrainLendsTheHeartbeatsWhileItWaits) {
  std::atomic<int> rounds{0};
  HeartbeatKeeper keeper(1, [&] { rounds.fetch_add(1); });
  GatedStore base;
  base.SetOpen(false);
  PipelinedStore store(base, &keeper);
  store.CommitLater(Put("a", "1"));
  base.AwaitEntered(1);
  std::thread opener([&] {
    // Opens once the keeper has sent while Drain waits: a Drain that did
    // not lend would wait here forever (the test's timeout).
    while (rounds.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    base.SetOpen(true);
  });
  store.Drain();
  opener.join();
  EXPECT_GE(rounds.load(), 3);
  const int after = rounds.load();
  store.Drain();  // nothing outstanding: no loan, returns at once
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(rounds.load(), after);
}

}  // namespace
}  // namespace ztune::head
