#include "head/resource_ledger.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "head/placement_group_manager.h"

namespace ztune::head {
namespace {

PlacementRequest Req(const char* json) { return PlacementRequest::FromJson(Json::parse(json)).value(); }

TEST(ResourceLedgerTest, ReservesAndReleasesExactly) {
  ResourceLedger l;
  l.AddWorker("a", ResourceSet::FromDoubles({{"CPU", 2}}), {});
  auto p1 = l.TryReserve(Req(R"({"bundles": [{"CPU": 1}]})"));
  auto p2 = l.TryReserve(Req(R"({"bundles": [{"CPU": 1}]})"));
  ASSERT_TRUE(p1 && p2);
  EXPECT_FALSE(l.TryReserve(Req(R"({"bundles": [{"CPU": 1}]})")));
  l.Release(*p1);
  EXPECT_DOUBLE_EQ(l.Available().Get("CPU"), 1);
  l.Release(*p2);
  EXPECT_EQ(l.Available(), l.Total());
}

TEST(ResourceLedgerTest, FractionalGpusShareADevice) {
  ResourceLedger l;
  l.AddWorker("a", ResourceSet::FromDoubles({{"CPU", 8}, {"GPU", 2}}), {0, 1});
  auto h1 = l.TryReserve(Req(R"({"bundles": [{"CPU": 1, "GPU": 0.5}]})"));
  auto h2 = l.TryReserve(Req(R"({"bundles": [{"CPU": 1, "GPU": 0.5}]})"));
  auto whole = l.TryReserve(Req(R"({"bundles": [{"CPU": 1, "GPU": 1}]})"));
  ASSERT_TRUE(h1 && h2 && whole);
  EXPECT_EQ(h1->bundles[0].gpu_ids, h2->bundles[0].gpu_ids);
  EXPECT_NE(whole->bundles[0].gpu_ids, h1->bundles[0].gpu_ids);
  EXPECT_FALSE(l.TryReserve(Req(R"({"bundles": [{"GPU": 0.1}]})")));
  l.Release(*h1);
  auto again = l.TryReserve(Req(R"({"bundles": [{"GPU": 0.5}]})"));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->bundles[0].gpu_ids, h2->bundles[0].gpu_ids);
}

TEST(ResourceLedgerTest, StrategiesPlaceBundlesAcrossWorkers) {
  ResourceLedger l;
  for (const char* w : {"a", "b", "c", "d"}) l.AddWorker(w, ResourceSet::FromDoubles({{"CPU", 1}}), {});
  auto spread = l.TryReserve(Req(
      R"({"bundles": [{"CPU": 1}, {"CPU": 1}, {"CPU": 1}, {"CPU": 1}], "strategy": "SPREAD"})"));
  ASSERT_TRUE(spread);
  std::set<std::string> workers;
  for (const auto& b : spread->bundles) workers.insert(b.worker_id);
  EXPECT_EQ(workers.size(), 4u);
  l.Release(*spread);
  EXPECT_FALSE(l.TryReserve(Req(R"({"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "STRICT_PACK"})")));
  EXPECT_TRUE(l.TryReserve(Req(R"({"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "PACK"})")));
  EXPECT_TRUE(l.TryReserve(Req(R"({"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "STRICT_SPREAD"})")));
  EXPECT_FALSE(l.TryReserve(Req(R"({"bundles": [{"CPU": 1}]})")));
}

TEST(ResourceLedgerTest, FeasibilityNamesTheLargestWorker) {
  ResourceLedger l;
  l.AddWorker("a", ResourceSet::FromDoubles({{"CPU", 2}}), {});
  l.AddWorker("b", ResourceSet::FromDoubles({{"CPU", 4}, {"GPU", 1}}), {0});
  EXPECT_TRUE(l.CheckFeasible(Req(R"({"bundles": [{"CPU": 4, "GPU": 1}]})")).ok());
  auto s = l.CheckFeasible(Req(R"({"bundles": [{"CPU": 2}, {"CPU": 4}], "strategy": "STRICT_PACK"})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("{CPU: 4, GPU: 1}"), std::string::npos) << s.message();
  EXPECT_TRUE(l.CheckFeasible(Req(R"({"bundles": [{"CPU": 2}, {"CPU": 4}], "strategy": "SPREAD"})")).ok());
  EXPECT_FALSE(l.CheckFeasible(Req(R"({"bundles": [{"GPU": 2}]})")).ok());
}

TEST(PlacementGroupManagerTest, StagesReadiesAndDelaysRemoval) {
  ResourceLedger l;
  FakeClock clock;
  l.AddWorker("a", ResourceSet::FromDoubles({{"CPU", 2}}), {});
  PlacementGroupManager pg(l, clock, PlacementGroupOptions{2, 2000});
  auto req = Req(R"({"bundles": [{"CPU": 1}]})");
  pg.Stage(req);
  pg.Stage(req);
  EXPECT_FALSE(pg.CanStage());
  EXPECT_EQ(pg.Update(), 2);
  EXPECT_EQ(pg.NumReady(req.Key()), 2);
  auto g = pg.TakeReady(req.Key(), "t1");
  ASSERT_TRUE(g);
  EXPECT_EQ(pg.OccupiedResources().Get("CPU"), 1);
  // The unused ready group goes away only after the removal delay.
  EXPECT_TRUE(pg.UnstageOne(req.Key()));
  pg.Update();
  EXPECT_DOUBLE_EQ(l.Available().Get("CPU"), 0);
  clock.AdvanceMs(2000);
  pg.Update();
  EXPECT_DOUBLE_EQ(l.Available().Get("CPU"), 1);
  pg.ReturnInUse(*g);
  EXPECT_DOUBLE_EQ(l.Available().Get("CPU"), 2);
  EXPECT_EQ(pg.NumInUse(), 0);
}

TEST(PlacementGroupManagerTest, OccupiedResourcesFollowGroupsInAndOutOfUse) {
  ResourceLedger l;
  FakeClock clock;
  l.AddWorker("a", ResourceSet::FromDoubles({{"CPU", 64}, {"GPU", 2}}), {0, 1});
  PlacementGroupManager pg(l, clock, PlacementGroupOptions{64, 2000});
  auto small = Req(R"({"bundles": [{"CPU": 0.1}]})");
  auto gpu = Req(R"({"bundles": [{"CPU": 1, "GPU": 1}]})");
  for (int i = 0; i < 30; ++i) pg.Stage(small);
  pg.Stage(gpu);
  EXPECT_EQ(pg.Update(), 31);
  std::vector<uint64_t> taken;
  for (int i = 0; i < 30; ++i)
    taken.push_back(*pg.TakeReady(small.Key(), TrialId("t" + std::to_string(i))));
  // Thirty tenths are three CPUs exactly (fixed point), not 2.9999...
  EXPECT_EQ(pg.OccupiedResources(), ResourceSet::FromDoubles({{"CPU", 3}}));
  const uint64_t g = *pg.TakeReady(gpu.Key(), "g");
  EXPECT_EQ(pg.OccupiedResources(), ResourceSet::FromDoubles({{"CPU", 4}, {"GPU", 1}}));
  pg.MarkCached(g);  // a cached actor's group holds resources but is not in use
  EXPECT_EQ(pg.OccupiedResources(), ResourceSet::FromDoubles({{"CPU", 3}}));
  pg.MarkCached(g);  // not in use: nothing changes
  EXPECT_EQ(pg.NumInUse(), 30);
  pg.AssignCached(g, "g2");
  EXPECT_EQ(pg.OccupiedResources(), ResourceSet::FromDoubles({{"CPU", 4}, {"GPU", 1}}));
  for (uint64_t id : taken) pg.ReturnInUse(id);
  pg.ReturnInUse(taken[0]);  // gone already: nothing changes
  EXPECT_EQ(pg.OccupiedResources(), ResourceSet::FromDoubles({{"CPU", 1}, {"GPU", 1}}));
  pg.ReturnInUse(g);
  EXPECT_TRUE(pg.OccupiedResources().empty());
  EXPECT_EQ(pg.NumInUse(), 0);
}

TEST(PlacementGroupManagerTest, ReadyGroupsOfADeadWorkerGoBackToStaging) {
  ResourceLedger l;
  FakeClock clock;
  l.AddWorker("a", ResourceSet::FromDoubles({{"CPU", 1}}), {});
  PlacementGroupManager pg(l, clock, PlacementGroupOptions{4, 2000});
  auto req = Req(R"({"bundles": [{"CPU": 1}]})");
  pg.Stage(req);
  pg.Update();
  ASSERT_EQ(pg.NumReady(req.Key()), 1);
  pg.OnWorkerRemoved("a");
  l.RemoveWorker("a");
  EXPECT_EQ(pg.NumReady(req.Key()), 0);
  EXPECT_EQ(pg.NumStaging(req.Key()), 1);
  l.AddWorker("b", ResourceSet::FromDoubles({{"CPU", 1}}), {});
  pg.NotifyCapacityChanged();
  EXPECT_EQ(pg.Update(), 1);
}

// An in-use group with a bundle on a dead worker stays in use (its actor may
// run on a live worker): the live bundle is released only when the caller
// returns the group.
TEST(PlacementGroupManagerTest, InUseGroupsOfADeadWorkerAreReturnedByTheCaller) {
  ResourceLedger l;
  FakeClock clock;
  l.AddWorker("a", ResourceSet::FromDoubles({{"CPU", 1}}), {});
  l.AddWorker("b", ResourceSet::FromDoubles({{"CPU", 1}}), {});
  PlacementGroupManager pg(l, clock, PlacementGroupOptions{4, 2000});
  auto req = Req(R"({"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "STRICT_SPREAD"})");
  pg.Stage(req);
  ASSERT_EQ(pg.Update(), 1);
  auto g = pg.TakeReady(req.Key(), "t1");
  ASSERT_TRUE(g);
  EXPECT_EQ(pg.OnWorkerRemoved("b"), std::vector<uint64_t>{*g});
  l.RemoveWorker("b");
  EXPECT_EQ(pg.NumInUse(), 1);
  EXPECT_DOUBLE_EQ(l.AvailableOf("a").Get("CPU"), 0);
  pg.ReturnInUse(*g);
  EXPECT_DOUBLE_EQ(l.AvailableOf("a").Get("CPU"), 1);
  EXPECT_EQ(pg.NumInUse(), 0);
}

// Re-reserving a recorded placement checks capacity: all or nothing.
TEST(ResourceLedgerTest, ReserveExactRefusesWhatDoesNotFit) {
  ResourceLedger l;
  l.AddWorker("a", ResourceSet::FromDoubles({{"CPU", 2}, {"GPU", 1}}), {0});
  Placement p;
  p.bundles.push_back({"a", ResourceSet::FromDoubles({{"CPU", 1}}), {}});
  p.bundles.push_back({"a", ResourceSet::FromDoubles({{"CPU", 1}, {"GPU", 1}}), {0}});
  p.bundles.push_back({"gone", ResourceSet::FromDoubles({{"CPU", 1}}), {}});  // skipped
  EXPECT_TRUE(l.ReserveExact(p));
  EXPECT_DOUBLE_EQ(l.AvailableOf("a").Get("CPU"), 0);
  EXPECT_FALSE(l.ReserveExact(p)) << "the same resources booked twice";
  Placement gpu_only;
  gpu_only.bundles.push_back({"a", ResourceSet::FromDoubles({{"GPU", 1}}), {0}});
  l.Release(p);
  EXPECT_TRUE(l.ReserveExact(gpu_only));
  EXPECT_FALSE(l.ReserveExact(p)) << "GPU 0 is taken";
  EXPECT_DOUBLE_EQ(l.AvailableOf("a").Get("CPU"), 2) << "nothing of a refused placement is kept";
}

}  // namespace
}  // namespace ztune::head
