// Ray's on-disk layout written after each commit: params.json, result.json
// lines with the config, progress.csv with the first result's header.
#include "head/results_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ztune::head {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ResultsDirTest : public ::testing::Test {
 protected:
  ResultsDirTest()
      : root_(std::filesystem::temp_directory_path() /
              ("ztune_results_dir_test_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(root_);
  }
  ~ResultsDirTest() override { std::filesystem::remove_all(root_); }

  std::filesystem::path root_;
};

TEST_F(ResultsDirTest, WritesRaysFilesAfterFlushOnly) {
  ResultsDir dir(root_.string());
  const Json config{{"lr", 0.1}, {"net", {{"layers", 3}}}};
  dir.Add("e0001", "mnist search", "quadratic", "e0001_00000", config,
          R"({"done":false,"eval":{"acc":0.5},"loss":1.5,"note":"a, b","training_iteration":1})");
  const std::string trial = dir.TrialDir("e0001", "mnist search", "quadratic", "e0001_00000");
  EXPECT_EQ(trial, (root_ / "mnist_search_e0001" / "quadratic_e0001_00000").string());
  EXPECT_FALSE(std::filesystem::exists(trial)) << "nothing before the commit";
  dir.Flush();
  EXPECT_EQ(Read(trial + "/params.json"), config.dump(2) + "\n");
  EXPECT_EQ(Read(trial + "/result.json"),
            R"({"done":false,"eval":{"acc":0.5},"loss":1.5,"note":"a, b","training_iteration":1,)"
            R"("config":{"lr":0.1,"net":{"layers":3}}})"
            "\n");
  EXPECT_EQ(Read(trial + "/progress.csv"),
            "done,eval/acc,loss,note,training_iteration\r\n"
            "False,0.5,1.5,\"a, b\",1\r\n");

  // A later result with a new key and without one: the header stays (as
  // Ray's CSV logger), result.json has everything.
  dir.Add("e0001", "mnist search", "quadratic", "e0001_00000", config,
          R"({"done":true,"extra":7,"loss":0.5,"training_iteration":2})");
  dir.Flush();
  EXPECT_EQ(Read(trial + "/progress.csv"),
            "done,eval/acc,loss,note,training_iteration\r\n"
            "False,0.5,1.5,\"a, b\",1\r\n"
            "True,,0.5,,2\r\n");
  EXPECT_NE(Read(trial + "/result.json").find(R"("extra":7,"loss":0.5)"), std::string::npos);

  // A restarted head appends under the header already in the file.
  ResultsDir after_restart(root_.string());
  after_restart.Add("e0001", "mnist search", "quadratic", "e0001_00000", config,
                    R"({"loss":0.25,"training_iteration":3,"zzz":1})");
  after_restart.Flush();
  const std::string csv = Read(trial + "/progress.csv");
  EXPECT_EQ(csv.substr(csv.rfind("True,,0.5,,2\r\n")), "True,,0.5,,2\r\n,,0.25,,3\r\n");
  EXPECT_EQ(Read(trial + "/params.json"), config.dump(2) + "\n") << "written once";
}

TEST_F(ResultsDirTest, NamesAreSafePathsAndFailuresDoNotStopTheHead) {
  ResultsDir dir(root_.string());
  EXPECT_EQ(dir.TrialDir("e0002", "../../etc", "py/x", "e0002_00001"),
            (root_ / ".._.._etc_e0002" / "py_x_e0002_00001").string());
  EXPECT_EQ(dir.TrialDir("e0003", "", "t", "e0003_00000"),
            (root_ / "e0003" / "t_e0003_00000").string());
  // A file where the experiment's directory should be: logged, not fatal.
  std::filesystem::create_directories(root_);
  std::ofstream(root_ / "e0004") << "in the way";
  ResultsDir blocked(root_.string());
  blocked.Add("e0004", "", "t", "e0004_00000", Json::object(), R"({"training_iteration":1})");
  blocked.Flush();
  EXPECT_TRUE(std::filesystem::is_regular_file(root_ / "e0004"));
}

}  // namespace
}  // namespace ztune::head
