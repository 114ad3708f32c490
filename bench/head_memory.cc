// bench/head_memory: the head's memory per live trial and per finished trial.
//
// Workload (docs/benchmarks.md, "head memory"): the head's own state, without
// sockets and without the store's memory. A TrialRunner (the head's state:
// experiments, trials, queues, placement groups, futures) runs on a store that
// accepts and discards every commit (RocksDB's memory is its own, bounded by
// its options), with scripted workers (tests/fakes/fake_worker_fleet.h) that
// answer at once. One experiment of N `quadratic` trials (N = --trials,
// default 10,000; param_space: lr uniform, x0 grid of 3, a constant) on
// workers with N CPUs in all, so that every trial runs at once; a checkpoint
// every 2 iterations, num_to_keep 2; stop at --iterations (default 10).
//
// Memory is the C heap in use (mallinfo2().uordblks + hblkhd: every new and
// malloc of the process) minus the scripted workers' share (measured by
// copying their state), sampled
//   before     after the runner and workers exist, before the submit;
//   live       once every trial has run 2 iterations (RUNNING, actor, one
//              checkpoint record, futures in flight, a last result);
//   finished   once the experiment is finished (every trial TERMINATED).
// Prints {"trials", "bytes_per_live_trial", "bytes_per_finished_trial", ...}.
//
//   build/release/bench/head_memory [--trials N] [--iterations I]
#include <malloc.h>

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "common/json.h"
#include "head/trial_runner.h"
#include "storage/store.h"
#include "tests/fakes/fake_worker_fleet.h"
#include "tests/fakes/recording_command_sink.h"

namespace {

using namespace ztune;

// Accepts every commit and keeps nothing: the head's memory without the store's.
class DiscardingStore final : public storage::Store {
 public:
  Status Commit(const storage::WriteBatch&) override { return Status::Ok(); }
  Result<std::optional<std::string>> Get(storage::Family, std::string_view) override {
    return std::optional<std::string>();
  }
  Status Scan(storage::Family, std::string_view,
              const std::function<bool(std::string_view, std::string_view)>&) override {
    return Status::Ok();
  }
};

size_t HeapInUse() {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// The heap of the head alone: the scripted workers' state (their actors and
// outboxes, on the same heap here) is measured by copying it once and
// subtracted; their record of every TRAIN sent is dropped first.
size_t HeadHeapInUse(testing::FakeWorkerFleet& fleet) {
  fleet.trains.clear();
  fleet.trains.shrink_to_fit();
  malloc_trim(0);
  const size_t all = HeapInUse();
  size_t workers = 0;
  {
    auto actors = fleet.actors;
    auto outbox = fleet.outbox;
    auto created_on = fleet.created_on;
    workers = HeapInUse() - all;
  }
  return all - workers;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"head memory per live and per finished trial"};
  int64_t trials = 10'000;
  int64_t iterations = 10;
  app.add_option("--trials", trials, "trials in the experiment")->check(CLI::Range(1, 1'000'000));
  app.add_option("--iterations", iterations, "iterations per trial")->check(CLI::Range(3, 1000));
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  const int64_t num_samples = (trials + 2) / 3;  // a grid of 3
  trials = 3 * num_samples;

  DiscardingStore store;
  testing::RecordingCommandSink sink;
  FakeClock clock;
  head::RunnerOptions options;
  options.heartbeat_ms = 1000;
  options.max_pending_trials = trials;  // every trial may stage at once
  options.max_trials_per_experiment = static_cast<uint64_t>(trials);
  head::TrialRunner runner(store, sink, clock, options);
  if (!runner.Load().ok()) return 1;
  testing::FakeWorkerFleet fleet(runner, sink, store);
  const int64_t workers = (trials + 999) / 1000;  // a slot for every trial
  for (int64_t w = 0; w < workers; ++w) fleet.Register(WorkerId("w" + std::to_string(w)), 1000);
  const size_t before = HeadHeapInUse(fleet);

  const std::string spec = R"({"trainable": "quadratic", "num_samples": )" +
                           std::to_string(num_samples) + R"(,
      "param_space": {"lr": {"uniform": [0.01, 0.2]}, "x0": {"grid_search": [5, 10, 15]},
                      "target": 1.5},
      "metric": "loss", "mode": "min", "stop": {"training_iteration": )" +
                           std::to_string(iterations) + R"(},
      "checkpoint": {"frequency": 2, "num_to_keep": 2}})";
  auto submitted = runner.Submit(Json::parse(spec));
  if (!submitted.ok()) {
    std::fprintf(stderr, "submit: %s\n", submitted.status().ToString().c_str());
    return 1;
  }
  const std::string exp = (*submitted)["experiment_id"];
  const auto& e = *runner.FindExperiment(exp);
  const size_t n = static_cast<size_t>(e.total_variants);

  auto all_at = [&](int64_t iteration) {
    if (e.trial_ids.size() < n) return false;
    for (const auto& id : e.trial_ids) {
      if (runner.FindTrial(id)->iteration < iteration) return false;
    }
    return true;
  };
  auto turn = [&] {
    fleet.Turn();
    fleet.Heartbeat();
    clock.AdvanceMs(10);
  };
  int turns = 0;
  while (!all_at(2) && turns < 100'000) {
    turn();
    ++turns;
  }
  if (!all_at(2)) {
    std::fprintf(stderr, "trials did not all reach iteration 2\n");
    return 1;
  }
  const size_t live = HeadHeapInUse(fleet);
  const auto counts = e.counts;
  while (!e.finished && turns < 1'000'000) {
    turn();
    ++turns;
  }
  if (!e.finished) {
    std::fprintf(stderr, "experiment did not finish\n");
    return 1;
  }
  clock.AdvanceMs(10'000);  // past the placement groups' removal delay
  turn();
  const size_t finished = HeadHeapInUse(fleet);

  auto count = [&](head::TrialStatus s) {
    auto it = counts.find(s);
    return it == counts.end() ? int64_t{0} : it->second;
  };
  Json out{{"benchmark", "head_memory"},
           {"trials", n},
           {"iterations", iterations},
           {"running_at_live_sample", count(head::TrialStatus::kRunning)},
           {"heap_before_bytes", before},
           {"heap_live_bytes", live},
           {"heap_finished_bytes", finished},
           {"bytes_per_live_trial", (static_cast<double>(live) - before) / n},
           {"bytes_per_finished_trial", (static_cast<double>(finished) - before) / n}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
