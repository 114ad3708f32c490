// WorkerRegistry on a fake clock: liveness, and the bound on dead workers kept.
#include "head/worker_registry.h"

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

}  // namespace
}  // namespace ztune::head
