// `ztune export` against a FakeHead that pages trials and results two at a
// time: CSV columns and rows, JSON lines, the config of each row under PBT
// lineage, a trial with no results, -o written whole or not at all.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/results_export.h"
#include "tests/client/fake_head.h"

namespace ztune::client {
namespace {

using testing::ClientOptions;
using testing::ErrorReply;
using testing::FakeHead;
using testing::Frames;
using testing::OkReply;
using testing::ReplyFrames;

Json Exploit(int64_t iteration, int64_t donor_iteration, Json old_config, Json new_config) {
  return Json{{"iteration", iteration},
              {"donor", "e0001_00009"},
              {"donor_iteration", donor_iteration},
              {"old_config", std::move(old_config)},
              {"new_config", std::move(new_config)},
              {"time", 1700000000.0}};
}

TEST(ExportRecordTest, ConfigFollowsThePbtLineage) {
  // Exploited at its iteration 4 from a donor at 3 (lr 0.1 -> 0.2), then at
  // iteration 6 from a donor at 5 (lr 0.2 -> 0.4).
  const Json trial{{"trial_id", "e0001_00000"},
                   {"status", "RUNNING"},
                   {"config", {{"lr", 0.4}}},
                   {"exploits", Json::array({Exploit(4, 3, {{"lr", 0.1}}, {{"lr", 0.2}}),
                                             Exploit(6, 5, {{"lr", 0.2}}, {{"lr", 0.4}})})}};
  EXPECT_EQ(ConfigAtIteration(trial, 1), (Json{{"lr", 0.1}}));
  EXPECT_EQ(ConfigAtIteration(trial, 3), (Json{{"lr", 0.1}}));
  EXPECT_EQ(ConfigAtIteration(trial, 4), (Json{{"lr", 0.2}}));
  EXPECT_EQ(ConfigAtIteration(trial, 5), (Json{{"lr", 0.2}}));
  EXPECT_EQ(ConfigAtIteration(trial, 6), (Json{{"lr", 0.4}}));
  // A later exploit from an older donor iteration rewrote the rows above it.
  const Json rewound{{"config", {{"lr", 0.3}}},
                     {"exploits", Json::array({Exploit(8, 7, {{"lr", 0.1}}, {{"lr", 0.2}}),
                                               Exploit(9, 2, {{"lr", 0.2}}, {{"lr", 0.3}})})}};
  EXPECT_EQ(ConfigAtIteration(rewound, 2), (Json{{"lr", 0.1}}));
  EXPECT_EQ(ConfigAtIteration(rewound, 3), (Json{{"lr", 0.3}}));
  EXPECT_EQ(ConfigAtIteration(rewound, 8), (Json{{"lr", 0.3}}));
  // Without exploits: the trial's config.
  EXPECT_EQ(ConfigAtIteration(Json{{"config", {{"lr", 1}}}}, 5), (Json{{"lr", 1}}));
  EXPECT_EQ(ConfigAtIteration(Json::object(), 5), Json::object());
}

TEST(ExportRecordTest, TrialColumnsWinAndClashingResultFieldsAreKept) {
  const Json trial{{"trial_id", "e0001_00003"}, {"status", "ERROR"}, {"config", {{"a", 1}}}};
  const Json result{{"training_iteration", 2},
                    {"trial_id", "e0001_00003"},
                    {"status", "diverged"},
                    {"config", "x"},
                    {"loss", 0.5}};
  EXPECT_EQ(ExportRecord(trial, &result), (Json{{"trial_id", "e0001_00003"},
                                               {"status", "ERROR"},
                                               {"config", {{"a", 1}}},
                                               {"training_iteration", 2},
                                               {"result/status", "diverged"},
                                               {"result/config", "x"},
                                               {"loss", 0.5}}));
  // No results: the trial's fields only; an empty config adds no column.
  EXPECT_EQ(ExportRecord(Json{{"trial_id", "t"}, {"status", "PENDING"}, {"config", Json::object()}},
                         nullptr),
            (Json{{"trial_id", "t"}, {"status", "PENDING"}}));
}

TEST(ExportRecordTest, ColumnOrder) {
  EXPECT_EQ(ExportColumns({"loss", "config/lr", "status", "acc", "training_iteration",
                           "config/a/b", "trial_id", "time_total_s"}),
            (std::vector<std::string>{"trial_id", "status", "config/a/b", "config/lr",
                                      "training_iteration", "acc", "loss", "time_total_s"}));
}

// Three trials: two with results (5 and 1), one that never reported; paged
// two at a time like the real head pages 500 trials or 1,000 results.
std::vector<Frames> PagingHead(const Json& req) {
  const std::string op = req.value("op", "");
  const uint64_t offset = req.value("offset", uint64_t{0});
  Json all = Json::array();
  if (op == "trials") {
    all.push_back(Json{{"trial_id", "e0001_00000"},
                       {"status", "TERMINATED"},
                       {"config", {{"lr", 0.1}, {"net", {{"layers", 3}}}}}});
    all.push_back(Json{{"trial_id", "e0001_00001"},
                       {"status", "ERROR"},
                       {"config", {{"lr", 0.2}, {"net", {{"layers", 5}}}}}});
    all.push_back(Json{{"trial_id", "e0001_00002"},
                       {"status", "PENDING"},
                       {"config", {{"lr", 0.3}, {"net", {{"layers", 2}}}}}});
  } else if (op == "results") {
    const std::string trial = req.value("trial_id", "");
    const int n = trial == "e0001_00000" ? 5 : trial == "e0001_00001" ? 1 : 0;
    for (int i = 1; i <= n; ++i) {
      Json r{{"training_iteration", i}, {"trial_id", trial}, {"loss", 1.0 / i}};
      if (i == 2) r["note"] = "a, \"quoted\" note";
      if (trial == "e0001_00001") r["eval"] = {{"acc", 0.25}};
      all.push_back(r);
    }
  } else {
    return {ReplyFrames(ErrorReply(req, "NotFound", "no op " + op))};
  }
  Json page = Json::array();
  for (uint64_t i = offset; i < std::min<uint64_t>(offset + 2, all.size()); ++i) {
    page.push_back(all[i]);
  }
  const bool more = offset + 2 < all.size();
  return {ReplyFrames(OkReply(req, Json{{op, page},
                                        {"offset", offset},
                                        {"next_offset", more ? Json(offset + 2) : Json()}}))};
}

class ExportTest : public ::testing::Test {
 protected:
  ExportTest() : head_(PagingHead), client_(ClientOptions(head_.endpoint())) {}

  CommandContext Ctx() { return CommandContext{client_, out_, err_}; }

  std::filesystem::path TempDir() {
    std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                ("ztune_export_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir;
  }

  FakeHead head_;
  HeadClient client_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(ExportTest, CsvHasEveryResultOfEveryTrial) {
  ASSERT_EQ(RunExport(Ctx(), "e0001", ExportOptions{}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "trial_id,status,config/lr,config/net/layers,training_iteration,eval/acc,loss,note\n"
            "e0001_00000,TERMINATED,0.1,3,1,,1,\n"
            "e0001_00000,TERMINATED,0.1,3,2,,0.5,\"a, \"\"quoted\"\" note\"\n"
            "e0001_00000,TERMINATED,0.1,3,3,,0.3333333333333333,\n"
            "e0001_00000,TERMINATED,0.1,3,4,,0.25,\n"
            "e0001_00000,TERMINATED,0.1,3,5,,0.2,\n"
            "e0001_00001,ERROR,0.2,5,1,0.25,1,\n"
            "e0001_00002,PENDING,0.3,2,,,,\n");
  EXPECT_EQ(err_.str(), "");
}

TEST_F(ExportTest, JsonLinesKeepTheResultsStructure) {
  ASSERT_EQ(RunExport(Ctx(), "e0001", ExportOptions{ExportFormat::kJsonl, ""}), kExitOk)
      << err_.str();
  std::istringstream in(out_.str());
  std::vector<Json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(Json::parse(line));
  ASSERT_EQ(rows.size(), 7u) << out_.str();
  EXPECT_EQ(rows[0], (Json{{"trial_id", "e0001_00000"},
                           {"status", "TERMINATED"},
                           {"config", {{"lr", 0.1}, {"net", {{"layers", 3}}}}},
                           {"training_iteration", 1},
                           {"loss", 1.0}}));
  EXPECT_EQ(rows[5]["eval"], (Json{{"acc", 0.25}}));
  EXPECT_EQ(rows[6], (Json{{"trial_id", "e0001_00002"},
                           {"status", "PENDING"},
                           {"config", {{"lr", 0.3}, {"net", {{"layers", 2}}}}}}));
}

TEST_F(ExportTest, OutputFileIsWrittenWholeAndReported) {
  const auto dir = TempDir();
  const std::string path = (dir / "e0001.csv").string();
  ASSERT_EQ(RunExport(Ctx(), "e0001", ExportOptions{ExportFormat::kCsv, path}), kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(), "");
  EXPECT_EQ(err_.str(), "wrote 7 rows (3 trials) to " + path + "\n");
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(text.str().substr(0, text.str().find('\n')),
            "trial_id,status,config/lr,config/net/layers,training_iteration,eval/acc,loss,note");
  // Nothing but the file is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            1);
  std::filesystem::remove_all(dir);
}

TEST_F(ExportTest, UnwritableOutputIsAUsageErrorAndUnknownExperimentAHeadError) {
  const auto dir = TempDir();
  EXPECT_EQ(RunExport(Ctx(), "e0001",
                      ExportOptions{ExportFormat::kCsv, (dir / "missing" / "x.csv").string()}),
            kExitUsage);
  EXPECT_NE(err_.str().find("error: cannot write "), std::string::npos) << err_.str();
  std::filesystem::remove_all(dir);

  FakeHead unknown([](const Json& req) -> std::vector<Frames> {
    return {ReplyFrames(ErrorReply(req, "NotFound", "unknown experiment e0042"))};
  });
  HeadClient client(ClientOptions(unknown.endpoint()));
  std::ostringstream out, err;
  const auto target = std::filesystem::temp_directory_path() / "ztune_export_never.csv";
  EXPECT_EQ(RunExport(CommandContext{client, out, err}, "e0042",
                      ExportOptions{ExportFormat::kCsv, target.string()}),
            kExitHeadError);
  EXPECT_EQ(err.str(), "error: NotFound: unknown experiment e0042\n");
  EXPECT_FALSE(std::filesystem::exists(target));
}

}  // namespace
}  // namespace ztune::client
