// 16 quadratic trials on 2 workers x 2 CPUs, through the real binaries:
// submit -> at most 4 RUNNING at any poll -> all TERMINATED -> the store holds
// iterations 1..50 exactly once with the closed-form values -> the CLI's
// status --json and results --csv agree with the store.
#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "storage/keys.h"
#include "storage/rocksdb_store.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/stored_result_json.h"

namespace ztune::e2e {
namespace {

double ClosedForm(const Json& config, int64_t i) {
  double lr = config.value("lr", 0.1), x0 = config.value("x0", 10.0),
         target = config.value("target", 0.0);
  return target + (x0 - target) * std::pow(1 - 2 * lr, static_cast<double>(i));
}

bool Near(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      row.push_back(field);
      field.clear();
      rows.push_back(row);
      row.clear();
    } else {
      field += c;
    }
  }
  if (!field.empty() || !row.empty()) {
    row.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

TEST(QuadraticE2ETest, SixteenTrialsOnTwoWorkersAgreeWithTheStore) {
  LocalCluster cluster("quadratic");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"a", "b"}, 2)) << cluster.Logs();

  std::string spec_path = cluster.dir() + "/spec.json";
  std::ofstream(spec_path) << R"({
    "name": "e2e-quadratic", "trainable": "quadratic",
    "param_space": {"lr": {"uniform": [0.01, 0.2]}, "x0": {"grid_search": [5, 10]}, "target": 1},
    "num_samples": 8, "metric": "loss", "mode": "min",
    "stop": {"training_iteration": 50},
    "checkpoint": {"frequency": 10, "num_to_keep": 2}, "seed": 3})";
  auto submitted = cluster.Cli("submit " + spec_path, /*stdout_only=*/true);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.out << cluster.Logs();
  std::string exp = submitted.out.substr(0, submitted.out.find_first_of(" \n"));
  ASSERT_FALSE(exp.empty());

  int64_t max_running = 0;
  int polls = 0;
  bool finished = WaitFor(
      [&] {
        Json s = cluster.CliJson("status " + exp);
        if (!s.is_object()) return false;
        ++polls;
        max_running = std::max<int64_t>(max_running, s["experiments"][0]["trial_counts"]["RUNNING"]);
        EXPECT_LE(s["resources"]["used"]["CPU"].get<double>(), 4.0);
        return s["experiments"][0]["finished"].get<bool>();
      },
      std::chrono::seconds(120));
  ASSERT_TRUE(finished) << cluster.Logs();
  EXPECT_LE(max_running, 4);
  EXPECT_GT(polls, 0);

  Json status = cluster.CliJson("status " + exp);
  ASSERT_TRUE(status.is_object());
  ASSERT_EQ(status["trials"].size(), 16u);
  EXPECT_EQ(status["experiments"][0]["trial_counts"]["TERMINATED"], 16);
  EXPECT_EQ(status["resources"]["used"]["CPU"], 0);
  EXPECT_EQ(status["resources"]["total"]["CPU"], 4);
  EXPECT_FALSE(status["experiments"][0]["best_trial"].is_null());

  std::map<std::string, std::vector<std::vector<std::string>>> csv;
  for (const auto& t : status["trials"]) {
    std::string id = t["trial_id"];
    auto r = cluster.Cli("results " + id + " --csv", /*stdout_only=*/true);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    csv[id] = ParseCsv(r.out);
  }
  ASSERT_EQ(cluster.head().Stop(), 0) << cluster.Logs();
  // The offline check agrees: every record consistent, every checkpoint readable.
  auto check = e2e::Run(std::string(ZTUNE_HEAD_BIN) + " --check --data-dir " + cluster.data_dir());
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_NE(check.out.find("16 trials, 800 results"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("consistent"), std::string::npos) << check.out;

  auto store = storage::RocksDbStore::Open(cluster.data_dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (const auto& t : status["trials"]) {
    const std::string id = t["trial_id"];
    EXPECT_EQ(t["status"], "TERMINATED");
    EXPECT_EQ(t["num_failures"], 0);
    EXPECT_EQ(t["iteration"], 50);
    std::vector<Json> stored;
    ASSERT_TRUE((*store)
                    ->Scan(storage::Family::kResults, storage::TrialPrefix(id),
                           [&](std::string_view, std::string_view v) {
                             stored.push_back(StoredResultJson(v));
                             return true;
                           })
                    .ok());
    ASSERT_EQ(stored.size(), 50u) << id;
    for (int64_t i = 1; i <= 50; ++i) {
      const Json& r = stored[i - 1];
      ASSERT_EQ(r["training_iteration"], i) << id;
      EXPECT_TRUE(Near(r["x"].get<double>(), ClosedForm(t["config"], i)))
          << id << " iteration " << i << ": " << r["x"] << " vs " << ClosedForm(t["config"], i);
      EXPECT_EQ(r["trial_id"], id);
    }
    EXPECT_TRUE(stored.back()["done"].get<bool>());
    EXPECT_EQ(t["last_result"]["training_iteration"], 50);
    EXPECT_EQ(t["last_result"]["x"], stored.back()["x"]);

    // The stored trial record agrees with what status --json said.
    auto rec = (*store)->Get(storage::Family::kTrials, id);
    ASSERT_TRUE(rec.ok() && rec->has_value());
    Json trial = Json::parse(**rec);
    EXPECT_EQ(trial["status"], "TERMINATED");
    EXPECT_EQ(trial["config"], t["config"]);
    // Its retained checkpoints are records of their own, after the trial's.
    EXPECT_FALSE(trial.contains("checkpoints"));
    size_t checkpoint_records = 0;
    ASSERT_TRUE((*store)
                    ->Scan(storage::Family::kTrials, storage::TrialPrefix(id),
                           [&](std::string_view k, std::string_view) {
                             auto parts = storage::ParseTrialChildKey(k);
                             if (parts && parts->kind == storage::kTrialCheckpointRecord) {
                               ++checkpoint_records;
                             }
                             return true;
                           })
                    .ok());
    EXPECT_EQ(checkpoint_records, 2u);

    // results --csv: a header and one row per stored result, same values.
    const auto& rows = csv[id];
    ASSERT_EQ(rows.size(), 51u) << id;
    const auto& header = rows[0];
    auto col = [&](const std::string& name) {
      return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
    };
    size_t it_col = col("training_iteration"), x_col = col("x"), loss_col = col("loss");
    ASSERT_LT(it_col, header.size());
    ASSERT_LT(x_col, header.size());
    ASSERT_LT(loss_col, header.size());
    for (int64_t i = 1; i <= 50; ++i) {
      EXPECT_EQ(std::stoll(rows[i][it_col]), i);
      EXPECT_NEAR(std::stod(rows[i][x_col]), stored[i - 1]["x"].get<double>(),
                  1e-9 * std::max(1.0, std::fabs(stored[i - 1]["x"].get<double>())));
      EXPECT_NEAR(std::stod(rows[i][loss_col]), stored[i - 1]["loss"].get<double>(),
                  1e-9 * std::max(1.0, std::fabs(stored[i - 1]["loss"].get<double>())));
    }
  }
}

}  // namespace
}  // namespace ztune::e2e
