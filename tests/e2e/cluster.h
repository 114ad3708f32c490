// LocalCluster: a real ztune-head and N real ztune-worker processes on
// loopback (ports picked by the kernel), a temp data dir, fast heartbeats, and
// a `ztune` CLI runner. CURVE is on, as in production: the head, its workers
// and the CLI (as an admin client) use the keys of keys(). Test-thread only.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tests/e2e/process.h"
#include "tests/fakes/cluster_keys.h"

namespace ztune::e2e {

class LocalCluster {
 public:
  // Liveness settings of the head and the workers (a worker is presumed dead
  // after heartbeat_ms x liveness of silence, and so is the head).
  struct Timing {
    int heartbeat_ms = 50;
    int liveness = 6;
  };

  explicit LocalCluster(const std::string& tag) : LocalCluster(tag, Timing{}) {}
  LocalCluster(const std::string& tag, Timing timing)
      : dir_(TempDir(tag)), timing_(timing), keys_(dir_) {
    std::filesystem::create_directories(dir_ + "/logs");
  }
  ~LocalCluster() {
    workers_.clear();
    head_.reset();
    if (std::getenv("ZTUNE_KEEP_TEST_DIRS") == nullptr) std::filesystem::remove_all(dir_);
  }

  const std::string& dir() const { return dir_; }
  std::string data_dir() const { return dir_ + "/data"; }
  const std::string& client_endpoint() const { return client_endpoint_; }
  const std::string& worker_endpoint() const { return worker_endpoint_; }
  // The dashboard's URL as the head wrote it (--http-endpoint); "" without one.
  const std::string& http_url() const { return http_url_; }

  // Starts (or restarts) the head on the same data dir and waits until it serves.
  void StartHead(const std::vector<std::string>& extra = {}) {
    std::string endpoints = dir_ + "/endpoints.json";
    std::filesystem::remove(endpoints);
    std::vector<std::string> args = {"--data-dir", data_dir(),
                                     "--worker-endpoint", worker_endpoint_.empty() ? "tcp://127.0.0.1:*" : worker_endpoint_,
                                     "--client-endpoint", client_endpoint_.empty() ? "tcp://127.0.0.1:*" : client_endpoint_,
                                     "--endpoints-file", endpoints,
                                     "--heartbeat-ms", std::to_string(timing_.heartbeat_ms),
                                     "--liveness", std::to_string(timing_.liveness),
                                     "--log-level", "debug",
                                     // A ztune defect aborts the head: the test fails.
                                     "--strict-invariants"};
    for (const auto& a : keys_.HeadArgs()) args.push_back(a);
    args.insert(args.end(), extra.begin(), extra.end());
    head_ = std::make_unique<Process>(ZTUNE_HEAD_BIN, args, dir_ + "/logs/head.log");
    ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(endpoints); }))
        << "head did not start:\n" << ReadFile(dir_ + "/logs/head.log");
    Json e = Json::parse(ReadFile(endpoints));
    worker_endpoint_ = e["worker_endpoint"];
    client_endpoint_ = e["client_endpoint"];
    http_url_ = e.value("http_endpoint", "");
  }

  // `env`: changes to the worker's environment (Process). A worker sees no
  // CUDA_VISIBLE_DEVICES unless `env` sets it: a machine's own must not
  // change which devices the tests' workers advertise.
  void StartWorker(const std::string& name, int cpus, const std::vector<std::string>& extra = {},
                   const std::vector<std::string>& env = {}) {
    StartWorkerAt(worker_endpoint_, name, cpus, extra, env);
  }
  // A worker that reaches the head through `head_endpoint` (a proxy).
  void StartWorkerAt(const std::string& head_endpoint, const std::string& name, int cpus,
                     const std::vector<std::string>& extra = {},
                     const std::vector<std::string>& env = {}) {
    std::vector<std::string> args = {"--head", head_endpoint, "--cpus", std::to_string(cpus),
                                     "--name", name, "--work-dir", dir_ + "/work-" + name,
                                     "--heartbeat-ms", std::to_string(timing_.heartbeat_ms),
                                     "--liveness", std::to_string(timing_.liveness),
                                     "--max-backoff-ms", "500", "--log-level", "debug"};
    // A test that passes its own --key uses it instead of the cluster's worker key.
    if (std::find(extra.begin(), extra.end(), "--key") == extra.end()) {
      for (const auto& a : keys_.WorkerArgs()) args.push_back(a);
    } else {
      args.push_back("--head-key");
      args.push_back(keys_.head_public_file());
    }
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<std::string> worker_env = {"CUDA_VISIBLE_DEVICES"};
    worker_env.insert(worker_env.end(), env.begin(), env.end());
    workers_.push_back(std::make_unique<Process>(
        ZTUNE_WORKER_BIN, args, dir_ + "/logs/worker-" + name + ".log", worker_env));
  }

  Process& head() { return *head_; }
  testing::ClusterKeys& keys() { return keys_; }
  Process& worker(size_t i) { return *workers_.at(i); }
  // The head's log; every restart of the head appends to it.
  std::string head_log() const { return dir_ + "/logs/head.log"; }

  // Runs `ztune --head <endpoint> <args>` as the admin client; stderr merged
  // unless `stdout_only`.
  CommandResult Cli(const std::string& args, bool stdout_only = false) const {
    return CliAs(keys_.admin_key_file(), args, stdout_only);
  }
  // The same with the client key in `key_file`, to `endpoint` if given (a
  // proxy in front of the head).
  CommandResult CliAs(const std::string& key_file, const std::string& args,
                      bool stdout_only = false, const std::string& endpoint = "") const {
    return Run(std::string(ZTUNE_CLI_BIN) + " --head " +
                   (endpoint.empty() ? client_endpoint_ : endpoint) + " " +
                   keys_.CliArgs(key_file) + " " + args,
               !stdout_only);
  }
  // Runs a read command with --json and parses its output (null on failure).
  Json CliJson(const std::string& args) const {
    auto r = Cli(args + " --json", /*stdout_only=*/true);
    if (r.exit_code != 0) return Json();
    Json j = Json::parse(r.out, nullptr, false);
    return j.is_discarded() ? Json() : j;
  }

  // Starts the head and one worker of `cpus` CPUs per name; whether they all registered.
  bool StartHeadAndWorkers(const std::vector<std::string>& names, int cpus) {
    StartHead();
    for (const auto& name : names) StartWorker(name, cpus);
    return WaitForWorkers(names.size());
  }

  bool WaitForWorkers(size_t n) {
    return WaitFor([&] {
      Json w = CliJson("workers");
      if (!w.is_object()) return false;
      size_t alive = 0;
      for (const auto& x : w["workers"]) alive += x["alive"].get<bool>() ? 1 : 0;
      return alive >= n;
    });
  }

  std::string Logs() const {
    std::string all;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/logs")) {
      std::string text = ReadFile(entry.path().string());
      if (text.size() > 6000) text = "...\n" + text.substr(text.size() - 6000);
      all += "==== " + entry.path().filename().string() + "\n" + text + "\n";
    }
    return all;
  }

 private:
  std::string dir_;
  Timing timing_;
  testing::ClusterKeys keys_;
  std::string worker_endpoint_;
  std::string client_endpoint_;
  std::string http_url_;
  std::unique_ptr<Process> head_;
  std::vector<std::unique_ptr<Process>> workers_;
};

}  // namespace ztune::e2e
