#include "head/heartbeat_keeper.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

using std::chrono::milliseconds;

// What the keeper's callback saw: whether it ever ran while the loop held
// what it lends, and whether a Reclaim returned while it was running.
struct Probe {
  std::atomic<bool> loop_owns{true};
  std::atomic<bool> in_callback{false};
  std::atomic<int> calls{0};
  std::atomic<bool> ran_while_loop_owned{false};
};

TEST(HeartbeatKeeperTest, SendsOnlyDuringALoanAndReclaimWaitsForARoundInProgress) {
  Probe p;
  HeartbeatKeeper keeper(1, [&] {
    p.in_callback = true;
    if (p.loop_owns.load()) p.ran_while_loop_owned = true;
    p.calls.fetch_add(1);
    std::this_thread::sleep_for(milliseconds(2));  // a round that takes a while
    p.in_callback = false;
  });
  // Outside loans: never, however long.
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(p.calls.load(), 0);

  // A long loan (a stalled commit): rounds every period.
  // The flag marks a little less than the loop's ownership (cleared before
  // Lend, set after Reclaim), so that it can only miss a violation, never
  // report one that did not happen.
  p.loop_owns = false;
  keeper.Lend();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (p.calls.load() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  keeper.Reclaim();
  EXPECT_FALSE(p.in_callback.load()) << "Reclaim returned while a round was running";
  p.loop_owns = true;
  EXPECT_GE(p.calls.load(), 3);
  EXPECT_GE(keeper.rounds(), 3u);

  // Many short loans (the usual commits), each ended while a round may be
  // running: never overlapping the loop's ownership.
  for (int i = 0; i < 2000; ++i) {
    p.loop_owns = false;
    {
      HeartbeatKeeper::Loan loan(keeper);
      if (i % 100 == 0) std::this_thread::sleep_for(milliseconds(3));
    }
    EXPECT_FALSE(p.in_callback.load()) << "a loan ended while a round was running";
    p.loop_owns = true;
  }
  EXPECT_FALSE(p.ran_while_loop_owned.load());
}

}  // namespace
}  // namespace ztune::head
