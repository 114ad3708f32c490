// `ztune report` against a FakeHead: the page holds the experiment, its
// trials (without exports) and each trial's metric series, nested metrics
// included; a file appears whole; errors change nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/commands.h"
#include "tests/client/fake_head.h"

namespace ztune::client {
namespace {

using testing::ClientOptions;
using testing::ErrorReply;
using testing::FakeHead;
using testing::Frames;
using testing::OkReply;
using testing::ReplyFrames;

std::vector<Frames> Head(const Json& req) {
  const std::string op = req.value("op", "");
  if (req.value("experiment_id", "e0001") != "e0001") {
    return {ReplyFrames(ErrorReply(req, "NotFound", "unknown experiment e0042"))};
  }
  if (op == "experiment") {
    return {ReplyFrames(OkReply(
        req, Json{{"experiment",
                   {{"experiment_id", "e0001"}, {"metric", "eval/acc"}, {"mode", "max"}}}}))};
  }
  if (op == "trials") {
    return {ReplyFrames(OkReply(
        req,
        Json{{"trials", Json::array({{{"trial_id", "e0001_00000"},
                                      {"status", "TERMINATED"},
                                      {"exports", {{"weights", "huge"}}}},
                                     {{"trial_id", "e0001_00001"}, {"status", "PENDING"}}})}}))};
  }
  if (op == "results") {
    Json results = Json::array();
    if (req.value("trial_id", "") == "e0001_00000") {
      results.push_back({{"training_iteration", 1}, {"timestamp", 100}, {"eval", {{"acc", 0.5}}}});
      results.push_back({{"training_iteration", 2}, {"timestamp", 101}, {"loss", 3}});
    }
    return {ReplyFrames(OkReply(req, Json{{"results", results}}))};
  }
  return {ReplyFrames(ErrorReply(req, "NotFound", "unknown experiment e0042"))};
}

// The JSON written in place of the page's placeholder.
Json PageData(const std::string& page) {
  const std::string marker = "const ZTUNE_DATA = ";
  const size_t at = page.find(marker);
  EXPECT_NE(at, std::string::npos);
  const size_t end = page.find(";\n", at);
  return Json::parse(page.substr(at + marker.size(), end - at - marker.size()));
}

TEST(ReportTest, WritesThePageWithTheExperimentsData) {
  FakeHead head(Head);
  HeadClient client(ClientOptions(head.endpoint()));
  std::ostringstream out, err;
  const auto path = std::filesystem::temp_directory_path() /
                    ("ztune_report_test_" + std::to_string(::getpid()) + ".html");
  ASSERT_EQ(RunReport(CommandContext{client, out, err}, "e0001", path.string()), kExitOk)
      << err.str();
  EXPECT_EQ(err.str(), "wrote " + path.string() + " (2 trials, 2 results)\n");
  std::ifstream f(path);
  std::stringstream page;
  page << f.rdbuf();
  std::filesystem::remove(path);
  const Json data = PageData(page.str());
  EXPECT_EQ(data["experiments"][0]["experiment_id"], "e0001");
  const Json& trials = data["trials"]["e0001"];
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_FALSE(trials[0].contains("exports"));
  EXPECT_EQ(data["series"]["e0001_00000"], (Json::array({{1, 0.5, 100}, {2, nullptr, 101}})));
  EXPECT_EQ(data["series"]["e0001_00001"], Json::array());
}

TEST(ReportTest, UnknownExperimentWritesNothing) {
  FakeHead head(Head);
  HeadClient client(ClientOptions(head.endpoint()));
  std::ostringstream out, err;
  const auto path = std::filesystem::temp_directory_path() / "ztune_report_never.html";
  EXPECT_EQ(RunReport(CommandContext{client, out, err}, "e0042", path.string()), kExitHeadError);
  EXPECT_EQ(err.str(), "error: NotFound: unknown experiment e0042\n");
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace ztune::client
