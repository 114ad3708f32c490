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
  EXPECT_EQ(GpuIds(3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_TRUE(GpuIds(0).empty());
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
