// Queries about trials and workers through the real `ztune` CLI, shared by
// the e2e tests. Test-thread only.
#pragma once

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace ztune::e2e {

inline std::string TrialId(const std::string& exp, int k) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "_%05d", k);
  return exp + buf;
}

// The experiment's TrialDocs, or an empty array when the CLI fails (head down).
inline Json TrialsOf(const LocalCluster& cluster, const std::string& exp) {
  Json t = cluster.CliJson("trials " + exp);
  return t.is_object() && t["trials"].is_array() ? t["trials"] : Json::array();
}

// The TrialDoc, or null when the CLI fails.
inline Json GetTrial(const LocalCluster& cluster, const std::string& id) {
  Json j = cluster.CliJson("trial " + id);
  return j.is_object() && j.contains("trial") ? j["trial"] : Json();
}

inline std::string StatusOf(const Json& trial) {
  return trial.is_object() && trial["status"].is_string() ? trial["status"].get<std::string>() : "";
}

inline int64_t IterationOf(const Json& trial) {
  return trial.is_object() && trial["iteration"].is_number_integer() ? trial["iteration"].get<int64_t>()
                                                                      : -1;
}

// name -> WorkerDoc
inline std::map<std::string, Json> Workers(const LocalCluster& cluster) {
  std::map<std::string, Json> out;
  Json w = cluster.CliJson("workers");
  if (!w.is_object()) return out;
  for (const auto& x : w["workers"]) out[x["name"].get<std::string>()] = x;
  return out;
}

inline double AvailableCpu(const Json& worker) {
  const Json& a = worker["resources_available"];
  return a.is_object() && a.contains("CPU") ? a["CPU"].get<double>() : 0.0;
}

inline bool WaitFinished(const LocalCluster& cluster, const std::string& exp, int timeout_s = 25) {
  auto r = cluster.Cli("wait " + exp + " --timeout " + std::to_string(timeout_s) +
                       " --interval-ms 50");
  return r.exit_code == 0;
}

// The trial's results hold training_iteration 1..n, each exactly once, in order.
inline void ExpectResultsOneToN(const LocalCluster& cluster, const std::string& id, int64_t n) {
  Json r = cluster.CliJson("results " + id);
  ASSERT_TRUE(r.is_object()) << id;
  const Json& results = r["results"];
  ASSERT_EQ(results.size(), static_cast<size_t>(n)) << id << ": " << results.dump();
  for (int64_t i = 1; i <= n; ++i) {
    EXPECT_EQ(results[i - 1]["training_iteration"], i) << id;
    EXPECT_EQ(results[i - 1]["trial_id"], id);
  }
}

// Waits until trial `id` is RUNNING at `iteration` or later (false on timeout).
inline bool WaitRunningAt(const LocalCluster& cluster, const std::string& id, int64_t iteration,
                          std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return WaitFor(
      [&] {
        const Json t = GetTrial(cluster, id);
        return StatusOf(t) == "RUNNING" && IterationOf(t) >= iteration;
      },
      timeout);
}

// Waits until trial `id` has reached `iteration` and not ended: RUNNING, or
// PAUSED by a scheduler between its turns (false on timeout). A trial that a
// scheduler time-slices runs in turns of a few steps, too short for a poller
// to be sure to see one.
inline bool WaitUnderwayAt(const LocalCluster& cluster, const std::string& id, int64_t iteration,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return WaitFor(
      [&] {
        const Json t = GetTrial(cluster, id);
        const std::string status = StatusOf(t);
        return (status == "RUNNING" || status == "PAUSED") && IterationOf(t) >= iteration;
      },
      timeout);
}

// Submits `spec` (written to <dir>/<name>.json); returns the experiment id, "" on failure.
inline std::string SubmitSpec(LocalCluster& cluster, const std::string& spec,
                              const std::string& name) {
  std::string path = cluster.dir() + "/" + name + ".json";
  std::ofstream(path) << spec;
  auto r = cluster.Cli("submit " + path, /*stdout_only=*/true);
  EXPECT_EQ(r.exit_code, 0) << r.out << cluster.Logs();
  if (r.exit_code != 0) return "";
  return r.out.substr(0, r.out.find_first_of(" \n"));
}

// Every trial TERMINATED without a failure, results 1..n each exactly once.
inline void ExpectAllTerminatedOnce(LocalCluster& cluster, const std::string& exp,
                                    size_t trials, int64_t n) {
  Json all = TrialsOf(cluster, exp);
  ASSERT_EQ(all.size(), trials) << all.dump();
  for (const auto& t : all) {
    const std::string id = t["trial_id"];
    EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
    EXPECT_EQ(t["num_failures"], 0) << t.dump() << "\n" << cluster.Logs();
    ExpectResultsOneToN(cluster, id, n);
  }
}

}  // namespace ztune::e2e
