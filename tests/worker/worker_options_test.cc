#include "worker/worker_options.h"

#include <gtest/gtest.h>

namespace ztune::worker {
namespace {

TEST(WorkerOptionsTest, ParsesExtraResources) {
  auto r = ParseExtraResources(R"({"memory": 8e9, "custom": 4})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::map<std::string, double>{{"memory", 8e9}, {"custom", 4}}));
  EXPECT_TRUE(ParseExtraResources("").ok());
  EXPECT_TRUE(ParseExtraResources("{}").ok());
}

TEST(WorkerOptionsTest, RejectsBadResourcesWithAClearMessage) {
  struct Case {
    const char* text;
    const char* mentions;
  };
  for (const Case& c : {Case{"{not json", "not valid JSON"}, Case{"[1, 2]", "JSON object"},
                        Case{R"({"m": "lots"})", "'m' must be a number"},
                        Case{R"({"m": -1})", "'m' must be a finite number >= 0"},
                        Case{R"({"": 1})", "empty resource name"},
                        Case{R"({"CPU": 4})", "--cpus"}, Case{R"({"GPU": 1})", "--gpus"}}) {
    auto r = ParseExtraResources(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.mentions), std::string::npos) << r.status().message();
  }
}

TEST(WorkerOptionsTest, BuildsResourcesAndGpuIds) {
  auto r = BuildResources(4, 2, {{"memory", 1e9}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::map<std::string, double>{{"CPU", 4}, {"GPU", 2}, {"memory", 1e9}}));
  r = BuildResources(1, 0, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->count("GPU"), 0u);
  EXPECT_FALSE(BuildResources(-1, 0, {}).ok());
  EXPECT_FALSE(BuildResources(1, -1, {}).ok());
}

using Ids = std::vector<int64_t>;

TEST(WorkerOptionsTest, GpuIdsAreZeroToNWithoutCudaVisibleDevices) {
  for (std::optional<std::string_view> visible :
       {std::optional<std::string_view>(), std::optional<std::string_view>("NoDevFiles")}) {
    EXPECT_EQ(*GpuIds(3, visible), (Ids{0, 1, 2}));
    EXPECT_EQ(GpuIds(1024, visible)->size(), 1024u);
    EXPECT_EQ(*GpuIds(0, visible), Ids{});
    EXPECT_EQ(*GpuIds(std::nullopt, visible), Ids{});  // no --gpus: none
    EXPECT_FALSE(GpuIds(-1, visible).ok());
  }
}

// A Slurm step on a shared node gets, say, devices 2 and 3: trials must use
// those, not 0 and 1 (another job's).
TEST(WorkerOptionsTest, GpuIdsAreTheDevicesCudaVisibleDevicesLists) {
  EXPECT_EQ(*GpuIds(std::nullopt, "2,3"), (Ids{2, 3}));
  EXPECT_EQ(*GpuIds(2, "2,3"), (Ids{2, 3}));
  EXPECT_EQ(*GpuIds(1, "5, 7"), Ids{5});  // --gpus takes the first N
  EXPECT_EQ(*GpuIds(0, "5,7"), Ids{});
  EXPECT_EQ(*GpuIds(std::nullopt, " 0 "), Ids{0});
  EXPECT_EQ(*GpuIds(std::nullopt, ""), Ids{});  // set but empty: no device
  EXPECT_EQ(*GpuIds(std::nullopt, "-1"), Ids{});
  EXPECT_EQ(*GpuIds(0, "-1"), Ids{});
}

TEST(WorkerOptionsTest, GpuIdsRefuseWhatCannotBeHandedOutWithAClearMessage) {
  std::string many = "0";
  for (int i = 1; i <= 1024; ++i) many += "," + std::to_string(i);
  struct Case {
    std::optional<int64_t> gpus;
    const char* visible;
    const char* mentions;
  };
  for (const Case& c :
       {Case{4, "0,1", "--gpus 4 but CUDA_VISIBLE_DEVICES='0,1' leaves this worker 2 device(s)"},
        Case{1, "", "--gpus 1 but CUDA_VISIBLE_DEVICES='' leaves this worker 0 device(s)"},
        Case{std::nullopt, "GPU-8f6a2c1e-1b2b-4c1f-9d3e-000000000000", "is not a device index"},
        Case{std::nullopt, "0,,1", "'' is not a device index"},
        Case{std::nullopt, "0,x", "'x' is not a device index"},
        Case{std::nullopt, "1,-1", "'-1' is not a device index"},
        Case{std::nullopt, "12345678901", "is not a device index"},
        Case{std::nullopt, "\x1b[2J", "\\x1b[2J"},
        Case{std::nullopt, "3,1,3", "lists device 3 twice"}, Case{-2, "0", "--gpus must be >= 0"},
        Case{1025, nullptr, "--gpus 1025: a head accepts at most 1024 devices per worker"},
        Case{int64_t{1} << 40, nullptr, "a head accepts at most 1024"},
        Case{std::nullopt, many.c_str(), "lists 1025 devices: a head accepts at most 1024"}}) {
    auto r = GpuIds(
        c.gpus, c.visible == nullptr ? std::nullopt : std::optional<std::string_view>(c.visible));
    ASSERT_FALSE(r.ok()) << (c.visible == nullptr ? "unset" : c.visible);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.mentions), std::string::npos) << r.status().message();
  }
}

TEST(WorkerOptionsTest, MakesIdsAndNames) {
  std::string id = MakeWorkerId("box");
  ASSERT_EQ(id.size(), 3u + 1u + 8u);
  EXPECT_EQ(id.substr(0, 4), "box-");
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 4), std::string::npos);
  EXPECT_NE(MakeWorkerId("box"), MakeWorkerId("box"));
  EXPECT_NE(DefaultWorkerName().find('-'), std::string::npos);
}

TEST(WorkerOptionsTest, ValidatesRanges) {
  WorkerOptions o;
  o.head_endpoint = "tcp://127.0.0.1:7501";
  o.name = "w";
  o.work_dir = "/tmp/x";
  EXPECT_TRUE(ValidateOptions(o).ok());
  o.heartbeat_ms = 0;
  EXPECT_FALSE(ValidateOptions(o).ok());
  o.heartbeat_ms = 10;
  o.liveness = 0;
  EXPECT_FALSE(ValidateOptions(o).ok());
  o.liveness = 3;
  o.head_endpoint.clear();
  EXPECT_FALSE(ValidateOptions(o).ok());
}

}  // namespace
}  // namespace ztune::worker
