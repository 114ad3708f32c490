// WorkerRegistry on a fake clock: liveness, and the bound on dead workers kept.
#include "head/worker_registry.h"

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

protocol::Register Reg(const std::string& id) {
  protocol::Register r;
  r.worker_id = id;
  r.resources = {{"CPU", 1}};
  return r;
}

TEST(WorkerRegistryTest, SilentWorkersDieAndAreForgottenBeyondTheBound) {
  FakeClock clock;
  WorkerRegistry registry(clock, /*expiry_ms=*/300);
  const size_t n = WorkerRegistry::kMaxDeadWorkers + 50;
  for (size_t i = 0; i < n; ++i) registry.Register(Reg("w" + std::to_string(i)));
  registry.Register(Reg("live"));
  clock.AdvanceMs(200);
  registry.Touch("live");
  clock.AdvanceMs(200);
  EXPECT_EQ(registry.ExpireSilent().size(), n);
  EXPECT_EQ(registry.NumAlive(), 1u);
  EXPECT_NE(registry.FindAlive("live"), nullptr);
  EXPECT_EQ(registry.workers().size(), WorkerRegistry::kMaxDeadWorkers + 1);
  // The longest dead went first; a worker that comes back is alive again.
  EXPECT_EQ(registry.Find("w0"), nullptr);
  registry.Register(Reg("w0"));
  EXPECT_NE(registry.FindAlive("w0"), nullptr);
  registry.MarkDead("w0");
  registry.MarkDead("w0");  // once
  EXPECT_EQ(registry.workers().size(), WorkerRegistry::kMaxDeadWorkers + 1);
  EXPECT_NE(registry.Find("w0"), nullptr) << "the newest dead stays";
}

// What a REGISTER offers is checked before anything is recorded: the amounts
// (ResourceSet's rules) and the device ids.
TEST(WorkerRegistryTest, AnOfferIsCheckedBeforeItIsRecorded) {
  protocol::Register r = Reg("w1");
  r.gpu_ids = {0, 1};
  r.resources = {{"CPU", 4}, {"GPU", 2}};
  auto offered = WorkerRegistry::CheckOffer(r);
  ASSERT_TRUE(offered.ok()) << offered.status().ToString();
  EXPECT_EQ(offered->ToString(), ResourceSet::FromDoublesChecked(r.resources)->ToString());
  for (double bad : {-1.0, std::nan(""), HUGE_VAL, 1e12}) {
    r.resources = {{"CPU", bad}};
    EXPECT_FALSE(WorkerRegistry::CheckOffer(r).ok()) << bad;
  }
  r.resources = {{"CPU", 4}};
  const std::vector<std::vector<int64_t>> bad_ids = {
      {0, 0}, {-1}, std::vector<int64_t>(WorkerRegistry::kMaxGpuIds + 1)};
  for (auto ids : bad_ids) {
    if (ids.size() > 2) std::iota(ids.begin(), ids.end(), 0);
    r.gpu_ids = ids;
    auto refused = WorkerRegistry::CheckOffer(r);
    ASSERT_FALSE(refused.ok()) << ids.size();
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("gpu_ids"), std::string::npos);
  }
}

}  // namespace
}  // namespace ztune::head
