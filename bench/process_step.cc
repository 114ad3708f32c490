// bench/process_step: the cost of one step of a process trainable, as the
// worker's runner thread sees it, against the floor of any process trainable
// in the same language: one line written to a pipe and one line read back.
//
// Workload (docs/benchmarks.md, "process trainable step"): both sides are
// /usr/bin/python3 children started by the worker's own ChildProcess.
//   raw:  a child that reads a line from fd 3 and writes "{}\n" to fd 4, with
//         os.read / os.write (no JSON, no SDK): the pipe round trip floor.
//   sdk:  ProcessTrainable (the worker's class) running bench/process_noop.py,
//         a Python SDK class-API trainable whose step returns {}: the step
//         command and reply as JSON lines, the SDK's dispatch, result
//         validation, stdout/stderr flushes, and the worker's parsing and
//         output flush.
// The two alternate in rounds (--rounds, default 5) of --steps steps each
// (default 5000), so that both see the same machine state. Prints one JSON
// document: per round and mode the mean and p50/p99 microseconds per step,
// and the ratio sdk/raw of the medians over rounds.
//
//   process_step [--steps 5000] [--rounds 5]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/json.h"
#include "worker/child_process.h"
#include "worker/line_channel.h"
#include "worker/process_trainable.h"

namespace {

using namespace ztune;
using namespace ztune::worker;
using Clock = std::chrono::steady_clock;

constexpr char kRawChild[] = R"(
import os
buf = b""
while True:
    while b"\n" not in buf:
        chunk = os.read(3, 65536)
        if not chunk:
            raise SystemExit(0)
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    os.write(4, b"{}\n")
)";

struct Stats {
  double mean_us = 0, p50_us = 0, p99_us = 0;
};

Stats Summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  Stats s;
  double sum = 0;
  for (double v : us) sum += v;
  s.mean_us = sum / static_cast<double>(us.size());
  s.p50_us = us[us.size() / 2];
  s.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return s;
}

std::vector<std::string> Environment(const std::string& python_path) {
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "PYTHONPATH=" + python_path,
                                  "ZTUNE_PROTOCOL=1", "ZTUNE_COMMAND_FD=3", "ZTUNE_REPLY_FD=4"};
  return env;
}

Result<std::vector<double>> RunRaw(int steps, const std::string& dir) {
  auto group = std::make_shared<ProcessGroup>();
  SpawnOptions o;
  o.argv = {"/usr/bin/python3", "-c", kRawChild};
  o.env = Environment("");
  o.path_env = "/usr/bin:/bin";
  o.cwd = dir;
  o.grace_ms = 1000;
  ASSIGN_OR_RETURN(auto child, ChildProcess::Spawn(o, group));
  LineChannel channel(child->command_fd(), child->reply_fd());
  auto ok = [] { return Status::Ok(); };
  std::vector<double> us;
  us.reserve(steps);
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    RETURN_IF_ERROR(channel.Write("{\"cmd\":\"step\",\"iteration\":1}", ok));
    auto line = channel.Read(ok);
    if (!line.ok()) return line.status();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  child->CloseCommandFd();
  child->Terminate(1000);
  return us;
}

Result<std::vector<double>> RunSdk(int steps, const std::string& dir, const std::string& root) {
  ProcessTrainableSpec spec;
  spec.name = "noop_py";
  spec.argv = {"/usr/bin/python3", root + "/bench/process_noop.py"};
  spec.env = {{"PYTHONPATH", root + "/python"}};
  spec.stop_grace_ms = 1000;
  ProcessTrainable t(spec);
  std::atomic<bool> stop{false};
  TrialContext ctx;
  ctx.trial_id = "bench";
  ctx.attempt = 1;
  ctx.worker_id = "bench";
  ctx.logdir = dir + "/bench";
  ctx.stop_flag = &stop;
  RETURN_IF_ERROR(t.Setup(Json::object(), ctx));
  std::vector<double> us;
  us.reserve(steps);
  for (int i = 0; i < steps; ++i) {
    ctx.iteration = i;
    const auto t0 = Clock::now();
    auto r = t.Step(ctx);
    if (!r.ok()) return r.status();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  t.Cleanup();
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"process trainable step overhead vs a raw pipe round trip"};
  int steps = 5000;
  int rounds = 5;
  app.add_option("--steps", steps, "steps per round and mode");
  app.add_option("--rounds", rounds, "alternating rounds");
  CLI11_PARSE(app, argc, argv);
  const std::string root =
      std::filesystem::canonical(std::filesystem::path(__FILE__).parent_path().parent_path())
          .string();
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("ztune-process-step-" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  Json out{{"bench", "process_step"}, {"steps", steps}, {"rounds", Json::array()}};
  std::vector<double> raw_p50, sdk_p50, raw_mean, sdk_mean;
  for (int r = 0; r < rounds; ++r) {
    Json round = Json::object();
    for (const char* mode : {"raw", "sdk"}) {
      auto us = std::string(mode) == "raw" ? RunRaw(steps, dir) : RunSdk(steps, dir, root);
      if (!us.ok()) {
        std::cerr << "process_step: " << mode << ": " << us.status().ToString() << "\n";
        return 1;
      }
      Stats s = Summarize(*us);
      round[mode] = Json{{"mean_us", s.mean_us}, {"p50_us", s.p50_us}, {"p99_us", s.p99_us}};
      (std::string(mode) == "raw" ? raw_p50 : sdk_p50).push_back(s.p50_us);
      (std::string(mode) == "raw" ? raw_mean : sdk_mean).push_back(s.mean_us);
    }
    out["rounds"].push_back(round);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  out["raw_p50_us"] = median(raw_p50);
  out["sdk_p50_us"] = median(sdk_p50);
  out["ratio_p50"] = median(sdk_p50) / median(raw_p50);
  out["ratio_mean"] = median(sdk_mean) / median(raw_mean);
  std::filesystem::remove_all(dir);
  std::cout << out.dump(2) << std::endl;
  return 0;
}
