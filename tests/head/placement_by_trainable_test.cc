// ResourceLedger placing a request's bundle 0 (the actor's) only on workers
// that host the request's trainable (PlacementRequest::actor_trainable, set
// from the spec's trainable), whatever the strategy; the other bundles go
// anywhere. nullopt trainables (a worker of a placement-only test) host
// anything; an empty actor_trainable goes anywhere.
#include <optional>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "head/experiment_spec.h"
#include "head/resource_ledger.h"

namespace ztune::head {
namespace {

using Trainables = std::optional<std::set<std::string>>;

PlacementRequest Req(const char* json, const std::string& trainable) {
  PlacementRequest r = PlacementRequest::FromJson(Json::parse(json)).value();
  r.actor_trainable = trainable;
  return r;
}

ResourceSet Cpu(double n) { return ResourceSet::FromDoubles({{"CPU", n}}); }

std::vector<std::string> WorkersOf(const Placement& p) {
  std::vector<std::string> out;
  for (const auto& b : p.bundles) out.push_back(b.worker_id.str());
  return out;
}

constexpr const char* kOne = R"({"bundles": [{"CPU": 1}]})";

TEST(PlacementByTrainableTest, ASingleBundleGoesOnlyToAWorkerThatHostsTheTrainable) {
  ResourceLedger l;
  l.AddWorker("a", Cpu(1), {}, Trainables{{"x"}});
  l.AddWorker("b", Cpu(1), {}, Trainables{{"y"}});
  l.AddWorker("c", Cpu(1), {}, Trainables{{"x", "y"}});

  auto y1 = l.TryReserve(Req(kOne, "y"));
  ASSERT_TRUE(y1);
  EXPECT_EQ(WorkersOf(*y1), std::vector<std::string>{"b"});
  auto y2 = l.TryReserve(Req(kOne, "y"));
  ASSERT_TRUE(y2);
  EXPECT_EQ(WorkersOf(*y2), std::vector<std::string>{"c"});
  // "a" has a free CPU but does not host "y".
  EXPECT_FALSE(l.TryReserve(Req(kOne, "y")));
  EXPECT_DOUBLE_EQ(l.AvailableOf("a").Get("CPU"), 1);
  // Nobody hosts "z".
  EXPECT_FALSE(l.TryReserve(Req(kOne, "z")));
  auto x = l.TryReserve(Req(kOne, "x"));
  ASSERT_TRUE(x);
  EXPECT_EQ(WorkersOf(*x), std::vector<std::string>{"a"});
  EXPECT_DOUBLE_EQ(l.Available().Get("CPU"), 0);

  // Released: "y" fits again, on a host.
  l.Release(*y1);
  auto again = l.TryReserve(Req(kOne, "y"));
  ASSERT_TRUE(again);
  EXPECT_EQ(WorkersOf(*again), std::vector<std::string>{"b"});
}

TEST(PlacementByTrainableTest, PackPutsEverythingOnOneWorkerOnlyIfItHosts) {
  ResourceLedger l;
  l.AddWorker("a", Cpu(4), {}, Trainables{{"x"}});
  l.AddWorker("b", Cpu(4), {}, Trainables{{"y"}});
  constexpr const char* kTwo = R"({"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "PACK"})";
  constexpr const char* kTwoStrict =
      R"({"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "STRICT_PACK"})";

  // "a" is first and could hold both; the actor's trainable lives on "b".
  auto pack = l.TryReserve(Req(kTwo, "y"));
  ASSERT_TRUE(pack);
  EXPECT_EQ(WorkersOf(*pack), (std::vector<std::string>{"b", "b"}));
  auto strict = l.TryReserve(Req(kTwoStrict, "y"));
  ASSERT_TRUE(strict);
  EXPECT_EQ(WorkersOf(*strict), (std::vector<std::string>{"b", "b"}));
  EXPECT_DOUBLE_EQ(l.AvailableOf("a").Get("CPU"), 4);
  EXPECT_DOUBLE_EQ(l.AvailableOf("b").Get("CPU"), 0);
  l.Release(*pack);
  l.Release(*strict);

  // "b" can no longer hold both: STRICT_PACK fails (though "a" could hold
  // them, it does not host "y"); PACK falls back to bundle by bundle, with
  // bundle 0 on "b" and the rest anywhere.
  auto filler = l.TryReserve(Req(R"({"bundles": [{"CPU": 3}]})", "y"));
  ASSERT_TRUE(filler);
  EXPECT_EQ(WorkersOf(*filler), std::vector<std::string>{"b"});
  EXPECT_FALSE(l.TryReserve(Req(kTwoStrict, "y")));
  auto split = l.TryReserve(Req(kTwo, "y"));
  ASSERT_TRUE(split);
  EXPECT_EQ(WorkersOf(*split), (std::vector<std::string>{"b", "a"}));
  // And nothing for "y" fits any more (bundle 0 needs "b").
  EXPECT_FALSE(l.TryReserve(Req(kTwo, "y")));
  EXPECT_FALSE(l.TryReserve(Req(kOne, "y")));
  // "x" still packs on "a".
  auto x =
      l.TryReserve(Req(R"({"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "STRICT_PACK"})", "x"));
  ASSERT_TRUE(x);
  EXPECT_EQ(WorkersOf(*x), (std::vector<std::string>{"a", "a"}));
}

TEST(PlacementByTrainableTest, SpreadPutsBundleZeroOnAHostAndTheOthersAnywhere) {
  ResourceLedger l;
  l.AddWorker("a", Cpu(1), {}, Trainables{{"x"}});
  l.AddWorker("b", Cpu(1), {}, Trainables{{"y"}});
  l.AddWorker("c", Cpu(1), {}, Trainables{std::set<std::string>{}});  // hosts nothing
  constexpr const char* kThree =
      R"({"bundles": [{"CPU": 1}, {"CPU": 1}, {"CPU": 1}], "strategy": "SPREAD"})";
  constexpr const char* kThreeStrict =
      R"({"bundles": [{"CPU": 1}, {"CPU": 1}, {"CPU": 1}], "strategy": "STRICT_SPREAD"})";

  auto y = l.TryReserve(Req(kThree, "y"));
  ASSERT_TRUE(y);
  ASSERT_EQ(y->bundles.size(), 3u);
  EXPECT_EQ(y->bundles[0].worker_id.str(), "b");
  EXPECT_EQ((std::set<std::string>{y->bundles[1].worker_id.str(), y->bundles[2].worker_id.str()}),
            (std::set<std::string>{"a", "c"}));
  l.Release(*y);

  auto x = l.TryReserve(Req(kThreeStrict, "x"));
  ASSERT_TRUE(x);
  EXPECT_EQ(x->bundles[0].worker_id.str(), "a");
  const std::vector<std::string> xs = WorkersOf(*x);
  EXPECT_EQ(std::set<std::string>(xs.begin(), xs.end()).size(), 3u);
  l.Release(*x);

  // The only host of "y" is full: no placement, though "a" and "c" are free.
  auto hold_b = l.TryReserve(Req(kOne, "y"));
  ASSERT_TRUE(hold_b);
  EXPECT_FALSE(
      l.TryReserve(Req(R"({"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "SPREAD"})", "y")));
  // Without a trainable the same request fits on the other two.
  auto anywhere =
      l.TryReserve(Req(R"({"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "SPREAD"})", ""));
  ASSERT_TRUE(anywhere);
  EXPECT_EQ((std::set<std::string>{anywhere->bundles[0].worker_id.str(),
                                   anywhere->bundles[1].worker_id.str()}),
            (std::set<std::string>{"a", "c"}));
}

TEST(PlacementByTrainableTest, AnEmptyHeadBundleConstrainsTheFirstWorkerBundle) {
  // With an empty head bundle the actor lives on the worker of the first
  // worker bundle (TrialLauncher::StartTrial): that one must host.
  ResourceLedger l;
  l.AddWorker("a", Cpu(2), {}, Trainables{{"x"}});
  l.AddWorker("b", Cpu(2), {}, Trainables{{"y"}});
  PlacementRequest r =
      Req(R"({"bundles": [{}, {"CPU": 1}, {"CPU": 1}], "strategy": "SPREAD"})", "y");
  ASSERT_TRUE(r.head_bundle_empty);
  auto p = l.TryReserve(r);
  ASSERT_TRUE(p);
  ASSERT_EQ(p->bundles.size(), 2u);
  EXPECT_EQ(p->bundles[0].worker_id.str(), "b");
}

TEST(PlacementByTrainableTest, NulloptHostsAnythingAndAnEmptyTrainableGoesAnywhere) {
  ResourceLedger l;
  l.AddWorker("any", Cpu(2), {});  // trainables: nullopt
  l.AddWorker("none", Cpu(2), {}, Trainables{std::set<std::string>{}});
  auto z = l.TryReserve(Req(kOne, "whatever"));
  ASSERT_TRUE(z);
  EXPECT_EQ(WorkersOf(*z), std::vector<std::string>{"any"});
  auto z2 = l.TryReserve(Req(kOne, "other"));
  ASSERT_TRUE(z2);
  EXPECT_EQ(WorkersOf(*z2), std::vector<std::string>{"any"});
  EXPECT_FALSE(l.TryReserve(Req(kOne, "whatever")));  // "none" hosts nothing named
  // No trainable named: any worker, even one that hosts nothing.
  auto free = l.TryReserve(Req(kOne, ""));
  ASSERT_TRUE(free);
  EXPECT_EQ(WorkersOf(*free), std::vector<std::string>{"none"});
  EXPECT_TRUE(l.CheckFeasible(Req(kOne, "")).ok());
  EXPECT_TRUE(l.CheckFeasible(Req(kOne, "anything")).ok());
}

TEST(PlacementByTrainableTest, ReRegisteringReplacesTheTrainables) {
  ResourceLedger l;
  l.AddWorker("a", Cpu(1), {}, Trainables{{"x"}});
  EXPECT_TRUE(l.CheckFeasible(Req(kOne, "x")).ok());
  EXPECT_FALSE(l.CheckFeasible(Req(kOne, "y")).ok());
  l.RemoveWorker("a");
  l.AddWorker("a", Cpu(1), {}, Trainables{{"y"}});
  EXPECT_FALSE(l.CheckFeasible(Req(kOne, "x")).ok());
  auto y = l.TryReserve(Req(kOne, "y"));
  ASSERT_TRUE(y);
  EXPECT_EQ(WorkersOf(*y), std::vector<std::string>{"a"});
}

TEST(PlacementByTrainableTest, CheckFeasibleNamesTheTrainableWhenNoWorkerCanHost) {
  ResourceLedger l;
  l.AddWorker("a", Cpu(8), {}, Trainables{{"x"}});
  l.AddWorker("b", Cpu(1), {}, Trainables{{"y"}});
  EXPECT_TRUE(l.CheckFeasible(Req(kOne, "x")).ok());
  EXPECT_TRUE(l.CheckFeasible(Req(kOne, "y")).ok());

  Status none = l.CheckFeasible(Req(kOne, "mnist"));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(none.message().find("with the actor on a worker that hosts 'mnist'"), std::string::npos)
      << none.message();

  // Resources exist (on "a"), but not on a worker that hosts "y".
  Status small = l.CheckFeasible(Req(R"({"bundles": [{"CPU": 4}]})", "y"));
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.message().find("hosts 'y'"), std::string::npos) << small.message();
  EXPECT_TRUE(l.CheckFeasible(Req(R"({"bundles": [{"CPU": 4}]})", "x")).ok());
  EXPECT_TRUE(l.CheckFeasible(Req(R"({"bundles": [{"CPU": 4}]})", "")).ok());
  // Only bundle 0 is bound: the others may use "a".
  EXPECT_TRUE(
      l.CheckFeasible(Req(R"({"bundles": [{"CPU": 1}, {"CPU": 4}], "strategy": "SPREAD"})", "y"))
          .ok());

  // Without a trainable, the message says nothing about hosting.
  Status plain = l.CheckFeasible(Req(R"({"bundles": [{"CPU": 16}]})", ""));
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.message().find("hosts"), std::string::npos) << plain.message();
}

TEST(PlacementByTrainableTest, TheRequestKeyDiffersByActorTrainable) {
  const PlacementRequest none = Req(kOne, "");
  const PlacementRequest x = Req(kOne, "x");
  const PlacementRequest y = Req(kOne, "y");
  EXPECT_NE(none.Key(), x.Key());
  EXPECT_NE(x.Key(), y.Key());
  EXPECT_EQ(x.Key(), Req(kOne, "x").Key());
  EXPECT_FALSE(x == y);
  EXPECT_TRUE(x == Req(kOne, "x"));
  // No trainable: the key of before (pools stored by a head of an earlier
  // version keep their keys).
  PlacementRequest bare = PlacementRequest::FromJson(Json::parse(kOne)).value();
  EXPECT_EQ(none.Key(), bare.Key());
  // Not ambiguous with odd names.
  EXPECT_NE(Req(kOne, "a|trainable:1:b").Key(), Req(kOne, "a").Key());
  // Not part of the JSON form.
  EXPECT_EQ(x.ToJson(), none.ToJson());
}

TEST(PlacementByTrainableTest, AParsedSpecBindsItsActorToItsTrainable) {
  auto spec = ExperimentSpec::Parse(Json{{"trainable", "mnist"}}, 1);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->resources.actor_trainable, "mnist");

  auto with_resources = ExperimentSpec::Parse(Json::parse(R"({"trainable": "resnet", "name": "exp",
                      "resources": {"bundles": [{"CPU": 2}, {"CPU": 1}], "strategy": "SPREAD"}})"),
                                              1);
  ASSERT_TRUE(with_resources.ok()) << with_resources.status().ToString();
  EXPECT_EQ(with_resources->resources.actor_trainable, "resnet");
  EXPECT_EQ(with_resources->resources.bundles.size(), 2u);

  // The stored (normalised) spec parses back to the same binding.
  auto reparsed = ExperimentSpec::Parse(with_resources->ToJson(), 1);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status().ToString();
  EXPECT_EQ(reparsed->resources.actor_trainable, "resnet");
  EXPECT_EQ(reparsed->resources.Key(), with_resources->resources.Key());

  // And it places accordingly.
  ResourceLedger l;
  l.AddWorker("a", Cpu(4), {}, Trainables{{"mnist"}});
  l.AddWorker("b", Cpu(4), {}, Trainables{{"resnet"}});
  auto p = l.TryReserve(with_resources->resources);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->bundles[0].worker_id.str(), "b");
  auto m = l.TryReserve(spec->resources);
  ASSERT_TRUE(m);
  EXPECT_EQ(WorkersOf(*m), std::vector<std::string>{"a"});
}

}  // namespace
}  // namespace ztune::head
