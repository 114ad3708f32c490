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

// A spec's export_formats are checked against what the live workers hosting
// its trainable declare; a worker that declares nothing for it may export
// anything.
TEST(WorkerRegistryTest, ExportsAreCheckedAgainstWhatTheHostingWorkersDeclare) {
  FakeClock clock;
  WorkerRegistry registry(clock, /*expiry_ms=*/300);
  protocol::Register a = Reg("a");
  a.trainables = {"quadratic", "noop", "custom"};
  a.export_formats = {{"quadratic", {"json"}}, {"noop", {}}};
  registry.Register(a);
  EXPECT_TRUE(registry.CheckExports("quadratic", {"json"}).ok());
  EXPECT_TRUE(registry.CheckExports("quadratic", {}).ok());
  EXPECT_TRUE(registry.CheckExports("custom", {"onnx"}).ok()) << "undeclared: anything";
  EXPECT_TRUE(registry.CheckExports("hosted-nowhere", {"onnx"}).ok());
  Status s = registry.CheckExports("quadratic", {"json", "onnx"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "spec.export_formats: trainable 'quadratic' cannot export 'onnx' (its workers "
            "export: json)");
  s = registry.CheckExports("noop", {"json"});
  EXPECT_EQ(s.message(),
            "spec.export_formats: trainable 'noop' cannot export 'json' (it exports "
            "nothing)");

  // A second worker declaring more widens what a spec may ask for; one that
  // hosts the trainable without declaring lets anything through; neither
  // counts once it is dead.
  protocol::Register b = Reg("b");
  b.trainables = {"quadratic"};
  b.export_formats = {{"quadratic", {"onnx", "pt"}}};
  registry.Register(b);
  EXPECT_TRUE(registry.CheckExports("quadratic", {"json", "onnx"}).ok());
  EXPECT_EQ(registry.CheckExports("quadratic", {"tf"}).message(),
            "spec.export_formats: trainable 'quadratic' cannot export 'tf' (its workers export: "
            "json, onnx, pt)");
  protocol::Register c = Reg("c");
  c.trainables = {"quadratic"};
  registry.Register(c);
  EXPECT_TRUE(registry.CheckExports("quadratic", {"tf"}).ok());
  registry.MarkDead("c");
  registry.MarkDead("b");
  EXPECT_FALSE(registry.CheckExports("quadratic", {"onnx"}).ok());
  // A re-registration replaces what the worker declared.
  a.export_formats = {{"quadratic", {"json", "onnx"}}};
  registry.Register(a);
  EXPECT_TRUE(registry.CheckExports("quadratic", {"onnx"}).ok());
}

TEST(WorkerRegistryTest, DeclaredExportFormatsAreBounded) {
  protocol::Register r = Reg("w1");
  r.export_formats = {{"t", {"json", "onnx"}}};
  EXPECT_TRUE(WorkerRegistry::CheckOffer(r).ok());
  for (const std::string& bad : {std::string(), std::string(129, 'x')}) {
    r.export_formats = {{"t", {bad}}};
    auto refused = WorkerRegistry::CheckOffer(r);
    ASSERT_FALSE(refused.ok()) << bad.size();
    EXPECT_NE(refused.status().message().find("export format names must be 1 to 128 bytes"),
              std::string::npos);
  }
  r.export_formats = {{"t", std::vector<std::string>(WorkerRegistry::kMaxExportFormats, "f")},
                      {"u", {"g"}}};
  auto refused = WorkerRegistry::CheckOffer(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "more than 4096 export formats");
}

}  // namespace
}  // namespace ztune::head
