// bench/throughput: durable result throughput of a real head with 2 workers.
//
// Workload (docs/benchmarks.md): for each (T trials x I iterations) shape, a
// fresh head (fsync'd RocksDB in a temp dir) and 2 ztune-worker processes with
// --cpus C each run one experiment of `noop` trials (each trial asks for 1 CPU,
// so 2C run at once), stop at training_iteration I. The clock runs from submit
// to the experiment being finished (every result durable). Prints one JSON
// document with results/s per shape and the head's CPU time.
//
// The bookkeeping workload (Ray's tune_scalability_bookkeeping_overhead, minus
// the 1 s sleep) is the shape 10000x1: every trial costs a placement group
// reserve/release, CREATE_ACTOR, one TRAIN, STOP and its durable records, so
// head_cpu_us_per_trial is the head's bookkeeping cost per trial.
//
// With one trial (shape 1xN) every result is one round trip head -> worker ->
// head, so us_per_result is the mean single-step latency.
//
// --latency (shapes of one trial only): the noop trainable reports the
// worker's steady clock at each step, and the run also prints the step
// cycle (from one step's start to the next's: the result's way to the head,
// its handling and commit, the next TRAIN's way back) as p50/p99/mean in us,
// the figure ../shared/bench/limit --latency measures for the floor.
//
// --security curve,insecure runs every shape with CURVE (keys made as an
// operator makes them, tests/fakes/cluster_keys.h) and with plain TCP, one
// after the other per shape, so that both see the same machine state. The
// same for --limits on,off (the head's budgets per connection) and
// --results-dir off,on (the head also writes Ray's layout of every result,
// docs/results-dir.md, into the run's temp dir; its size is reported).
// --rounds N repeats the whole set N times, so that alternated variants
// meet the machine in turns. --worker-dirs DIR puts the workers' work
// directories (a trial directory and log per trial) in a fresh directory
// under DIR, e.g. a tmpfs, instead of the run's temp dir: it tells the head's
// own disk (its store stays in the temp dir) from the workers' file creation.
//
//   throughput [--shapes 100x100,1000x10,10000x1] [--cpus-per-worker 16] [--buffer 1]
//              [--security curve,insecure] [--limits on,off] [--results-dir off,on]
//              [--rounds 1] [--latency] [--worker-dirs DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/cluster_process.h"
#include "client/client.h"
#include "common/json.h"
#include "tests/fakes/cluster_keys.h"

namespace {

using ztune::Json;
using ztune::bench::ChildProcess;

struct Shape {
  int64_t trials;
  int64_t iterations;
};

// The step cycles of trial `trial_id` (us between consecutive steps' starts,
// from the step_clock_ns its noop results carry): p50, p99, mean.
Json StepCycles(ztune::client::HeadClient& client, const std::string& trial_id) {
  std::vector<int64_t> clocks;
  for (Json offset = 0; !offset.is_null();) {
    auto page = client.Call("results", Json{{"trial_id", trial_id}, {"offset", offset}});
    if (!page.ok()) return Json{{"error", page.status().ToString()}};
    for (const auto& r : (*page)["results"]) clocks.push_back(r.value("step_clock_ns", int64_t{0}));
    offset = (*page).value("next_offset", Json());
  }
  std::vector<double> us;
  for (size_t i = 1; i < clocks.size(); ++i) us.push_back((clocks[i] - clocks[i - 1]) / 1e3);
  if (us.empty()) return Json{{"error", "fewer than 2 results"}};
  double sum = 0;
  for (double u : us) sum += u;
  std::sort(us.begin(), us.end());
  return Json{{"steps", us.size()},
              {"p50_us", us[us.size() / 2]},
              {"p99_us", us[us.size() * 99 / 100]},
              {"mean_us", sum / us.size()}};
}

// One run's head and workers.
struct RunOptions {
  int cpus_per_worker = 16;
  int64_t buffer = 1;
  bool curve = true;
  bool limits = true;  // the head's default budgets per connection, else none (all flags 0)
  bool results_dir = false;
  bool latency = false;
  std::string worker_dirs;  // a directory for the workers' work dirs; empty: the run's temp dir
};

Json RunShape(const Shape& shape, const RunOptions& o) {
  std::string dir = ztune::bench::MakeTempDir("throughput");
  const std::string work_root =
      o.worker_dirs.empty() ? dir : ztune::bench::MakeTempDir("throughput-work", o.worker_dirs);
  if (work_root.empty()) return Json{{"error", "cannot make a directory in " + o.worker_dirs}};
  std::string endpoints = dir + "/endpoints.json";
  std::optional<ztune::testing::ClusterKeys> keys;
  std::vector<std::string> head_args = {"--data-dir",        dir + "/data",
                                        "--worker-endpoint", "tcp://127.0.0.1:*",
                                        "--client-endpoint", "tcp://127.0.0.1:*",
                                        "--endpoints-file",  endpoints,
                                        "--log-level",       "warn"};
  std::vector<std::string> worker_security = {"--insecure"};
  if (o.curve) {
    keys.emplace(dir);
    for (const auto& a : keys->HeadArgs()) head_args.push_back(a);
    worker_security = keys->WorkerArgs();
  } else {
    head_args.push_back("--insecure");
  }
  if (o.results_dir) {
    head_args.push_back("--results-dir");
    head_args.push_back(dir + "/results");
  }
  if (!o.limits) {
    for (const char* flag : {"--worker-messages-per-s", "--worker-mib-per-s",
                             "--client-requests-per-s", "--client-mib-per-s"}) {
      head_args.push_back(flag);
      head_args.push_back("0");
    }
  }
  ChildProcess head(ZTUNE_HEAD_BIN, head_args, dir + "/head.log");
  for (int i = 0; i < 500 && !std::filesystem::exists(endpoints); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Json ep = Json::parse(ztune::bench::ReadAll(endpoints), nullptr, false);
  if (ep.is_discarded()) return Json{{"error", "head did not start"}};
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int w = 0; w < 2; ++w) {
    std::vector<std::string> args{"--head",      ep["worker_endpoint"],
                                  "--cpus",      std::to_string(o.cpus_per_worker),
                                  "--name",      "bench-" + std::to_string(w),
                                  "--work-dir",  work_root + "/work-" + std::to_string(w),
                                  "--log-level", "warn"};
    args.insert(args.end(), worker_security.begin(), worker_security.end());
    workers.push_back(std::make_unique<ChildProcess>(
        ZTUNE_WORKER_BIN, args, dir + "/worker-" + std::to_string(w) + ".log"));
  }
  ztune::client::HeadClientOptions client_options{ep["client_endpoint"].get<std::string>(), 30000,
                                                  0, std::nullopt};
  if (o.curve) client_options.curve = keys->ClientKeys(keys->admin_key_file());
  ztune::client::HeadClient client(client_options);
  for (int i = 0; i < 500; ++i) {
    auto w = client.Call("workers");
    int alive = 0;
    if (w.ok()) {
      for (const auto& x : (*w)["workers"]) alive += x["alive"].get<bool>() ? 1 : 0;
    }
    if (alive == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Json spec{{"name", "throughput"},
            {"trainable", "noop"},
            {"num_samples", shape.trials},
            {"stop", {{"training_iteration", shape.iterations}}},
            {"result_buffer_length", o.buffer}};
  if (o.latency) spec["param_space"] = Json{{"report_step_clock", true}};
  double cpu_before = ztune::bench::ProcessCpuSeconds(head.pid());
  auto t0 = std::chrono::steady_clock::now();
  auto submitted = client.Call("submit", Json{{"spec", spec}});
  if (!submitted.ok()) return Json{{"error", submitted.status().ToString()}};
  std::string exp = (*submitted)["experiment_id"];
  Json last;
  while (true) {
    auto e = client.Call("experiment", Json{{"experiment_id", exp}});
    if (!e.ok()) return Json{{"error", e.status().ToString()}};
    last = (*e)["experiment"];
    if (last["finished"].get<bool>()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double head_cpu = ztune::bench::ProcessCpuSeconds(head.pid()) - cpu_before;
  int64_t results = shape.trials * shape.iterations;
  Json out{{"security", o.curve ? "curve" : "insecure"},
           {"trials", shape.trials},
           {"iterations", shape.iterations},
           {"results", results},
           {"buffer_length", o.buffer},
           {"limits", o.limits ? "on" : "off"},
           {"results_dir", o.results_dir ? "on" : "off"},
           {"concurrent_trials", 2 * o.cpus_per_worker},
           {"seconds", seconds},
           {"results_per_s", results / seconds},
           {"us_per_result", 1e6 * seconds / results},
           {"trials_per_s", shape.trials / seconds},
           {"head_cpu_s", head_cpu},
           {"head_cpu_us_per_result", 1e6 * head_cpu / results},
           {"head_cpu_us_per_trial", 1e6 * head_cpu / shape.trials},
           {"wall_us_per_trial_per_slot", 1e6 * seconds * 2 * o.cpus_per_worker / shape.trials},
           {"terminated", last["trial_counts"]["TERMINATED"]}};
  if (o.latency) out["step_cycle"] = StepCycles(client, exp + "_00000");
  workers.clear();
  head.Stop();
  if (o.results_dir) {
    uintmax_t bytes = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/results")) {
      if (e.is_regular_file()) bytes += e.file_size();
    }
    out["results_dir_bytes"] = bytes;
  }
  if (work_root != dir) std::filesystem::remove_all(work_root);
  std::filesystem::remove_all(dir);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ztune throughput benchmark: noop trials on a real head and 2 workers"};
  std::string shapes_arg = "100x100,1000x10,10000x1";
  int cpus_per_worker = 16;
  std::vector<int64_t> buffers = {1};
  app.add_option("--shapes", shapes_arg, "comma-separated TRIALSxITERATIONS")->capture_default_str();
  app.add_option("--cpus-per-worker", cpus_per_worker, "CPUs each worker advertises")
      ->capture_default_str();
  app.add_option("--buffer", buffers, "result_buffer_length values to run")->capture_default_str();
  std::vector<std::string> security = {"curve"};
  app.add_option("--security", security, "curve, insecure, or both (alternated per shape)")
      ->delimiter(',')
      ->check(CLI::IsMember({"curve", "insecure"}))
      ->capture_default_str();
  std::vector<std::string> limits = {"on"};
  app.add_option("--limits", limits,
                 "the head's budgets per connection: on (defaults), off, or both (alternated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  std::vector<std::string> results_dir = {"off"};
  app.add_option("--results-dir", results_dir,
                 "the head's --results-dir: off, on (into the run's temp dir), or both "
                 "(alternated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  int rounds = 1;
  app.add_option("--rounds", rounds, "repeat every run this many times, round by round")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bool latency = false;
  app.add_flag("--latency", latency,
               "also measure the step cycle (p50/p99 us; shapes of one trial only)");
  std::string worker_dirs;
  app.add_option("--worker-dirs", worker_dirs,
                 "put the workers' work dirs in a fresh directory under this one (e.g. a tmpfs) "
                 "instead of the run's temp dir")
      ->check(CLI::ExistingDirectory);
  CLI11_PARSE(app, argc, argv);
  std::vector<Shape> shapes;
  std::string rest = shapes_arg;
  while (!rest.empty()) {
    std::string item = rest.substr(0, rest.find(','));
    rest = rest.find(',') == std::string::npos ? "" : rest.substr(rest.find(',') + 1);
    auto x = item.find('x');
    if (x == std::string::npos) {
      std::cerr << "bad shape '" << item << "' (want TRIALSxITERATIONS)\n";
      return 2;
    }
    shapes.push_back({std::stoll(item.substr(0, x)), std::stoll(item.substr(x + 1))});
    if (latency && shapes.back().trials != 1) {
      std::cerr << "--latency needs shapes of one trial (1xN), got '" << item << "'\n";
      return 2;
    }
  }
  Json runs = Json::array();
  for (int round = 1; round <= rounds; ++round) {
    for (int64_t b : buffers) {
      for (const auto& s : shapes) {
        for (const auto& mode : security) {
          for (const auto& limit : limits) {
            for (const auto& files : results_dir) {
              RunOptions o;
              o.cpus_per_worker = cpus_per_worker;
              o.buffer = b;
              o.curve = mode == "curve";
              o.limits = limit == "on";
              o.results_dir = files == "on";
              o.latency = latency;
              o.worker_dirs = worker_dirs;
              Json run = RunShape(s, o);
              run["round"] = round;
              runs.push_back(std::move(run));
            }
          }
        }
      }
    }
  }
  std::cout << Json{{"benchmark", "throughput"}, {"runs", runs}}.dump(2) << std::endl;
  return 0;
}
