// bench/recovery: how fast a head is back in service after a restart.
//
// Workload (docs/benchmarks.md, "recovery"):
//
// 1. Cold start on a big store. The benchmark writes a data directory directly
//    through storage::RocksDbStore, with exactly the records a head writes
//    (head::Experiment / head::Trial ToJson, result objects as the worker and
//    head produce them, meta "next_experiment"): by default 1 experiment of
//    10,000 TERMINATED trials x 100 results = 1,000,000 results, committed in
//    synced batches of 100 trials. Then it starts `ztune-head` on it (ports
//    '*', --endpoints-file) and measures the wall time from fork/exec to the
//    first successful `experiments` reply (the endpoints file is polled every
//    2 ms; it appears once the store is loaded and the sockets are bound), and
//    checks the reply's trial counts. Four starts:
//      after_build_wal_replay  right after the build: RocksDB replays the WAL
//                              the build left (and flushes it);
//      restart_warm_cache      after a clean stop of that head;
//      restart_cold_cache      after evicting the data directory from the page
//                              cache (fdatasync + posix_fadvise DONTNEED; only
//                              this directory, no root needed);
//      crash_restart_big_wal   after appending ~240 MB of WAL (the results
//                              of 1,000 RUNNING trials of a new experiment,
//                              see AppendWalTailAndCrash, written by a child
//                              killed after its last commit): what a head
//                              killed under load leaves, up to
//                              max_total_wal_size (64 MiB).
//    Finally `ztune-head --check --json` (reads every record: 1 M results),
//    page cache cold and then warm.
//
// 2. Re-attach after a head restart. A head and 4 workers (--cpus 50 each,
//    200 slots) run one experiment of 200 `sleep` trials (sleep_s 0.05, stop
//    at training_iteration 100000, so they keep running). Once all 200 are
//    RUNNING the head gets SIGKILL and is restarted on the same data dir and
//    the exact same endpoints, with --reattach-grace-ms 30000. The clock runs
//    from the restart's fork/exec to every trial being RUNNING with a non-null
//    `worker`, attempt and num_restores unchanged (polled with `trials` every
//    10 ms). First --repeats cycles with an immediate restart, then one cycle
//    per --down-ms value with the head left dead that long before the restart
//    (longer than heartbeat x liveness, so the workers have given up on it and
//    reconnect with backoff). Done with the head's default heartbeat (1000 ms x
//    liveness 3) and with --heartbeat-ms 100 on head and workers; workers get
//    --max-backoff-ms 1000 (flag of this benchmark).
//
// Prints one JSON document; "summary" holds the headline numbers. Exit code 1
// if a check failed (a reply with wrong counts, --check not 0, a trial not
// re-attached).
//
//   recovery [--experiments 1] [--trials 10000] [--results-per-trial 100]
//            [--wal-tail-mb 240] [--live-trials 1000] [--actors 200] [--repeats 5]
//            [--down-ms 3100,3500,3900,4300,4700] [--heartbeat-ms 1000,100]
//            [--max-backoff-ms 1000] [--skip-cold] [--skip-reattach] [--keep-dirs]
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/cluster_process.h"
#include "client/client.h"
#include "common/json.h"
#include "head/experiment_spec.h"
#include "head/search_space.h"
#include "head/stored_result.h"
#include "head/trial.h"
#include "head/trial_records.h"
#include "storage/keys.h"
#include "storage/rocksdb_store.h"

namespace {

using ztune::Json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// A child process we can SIGKILL and reap exactly once (bench/cluster_process.h's
// ChildProcess cannot be told that its pid is gone).
class Proc {
 public:
  Proc(const std::string& binary, const std::vector<std::string>& args,
       const std::string& log_path, const std::string& stdout_path = "") {
    start_ = Clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      int out = stdout_path.empty() ? log
                                    : open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out >= 0) dup2(out, 1);
      if (log >= 0) dup2(log, 2);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(binary.c_str()));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Proc() { Stop(); }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  pid_t pid() const { return pid_; }
  Clock::time_point started() const { return start_; }
  bool running() const { return pid_ > 0; }

  // Waits up to timeout_ms; the exit status (as waitpid) or nullopt.
  std::optional<int> Wait(int timeout_ms) {
    if (pid_ <= 0) return exit_status_;
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = status;
        return status;
      }
      if (Clock::now() >= deadline) return std::nullopt;
      SleepMs(2);
    }
  }
  void Kill9() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    exit_status_ = status;
    pid_ = -1;
  }
  // SIGTERM, then SIGKILL after timeout_ms.
  void Stop(int timeout_ms = 10000) {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    if (!Wait(timeout_ms)) Kill9();
  }

 private:
  pid_t pid_ = -1;
  Clock::time_point start_;
  std::optional<int> exit_status_;
};

// ----------------------------------------------------------------- files

struct DirBytes {
  uint64_t total = 0;
  uint64_t wal = 0;  // NNNNNN.log files
  uint64_t sst = 0;
};

DirBytes SizeOf(const std::string& dir) {
  DirBytes b;
  static const std::regex wal_re("[0-9]+\\.log");
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    uint64_t n = e.file_size();
    b.total += n;
    std::string name = e.path().filename().string();
    if (std::regex_match(name, wal_re)) b.wal += n;
    if (e.path().extension() == ".sst" || e.path().extension() == ".blob") b.sst += n;
  }
  return b;
}

// Bytes of the directory's files that are in the page cache (mmap + mincore).
uint64_t ResidentBytes(const std::string& dir) {
  uint64_t resident = 0;
  const long page = sysconf(_SC_PAGESIZE);
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.file_size() == 0) continue;
    int fd = open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    size_t len = e.file_size();
    void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      std::vector<unsigned char> vec((len + page - 1) / page);
      if (mincore(p, len, vec.data()) == 0) {
        for (unsigned char c : vec) resident += (c & 1) ? page : 0;
      }
      munmap(p, len);
    }
    close(fd);
  }
  return std::min<uint64_t>(resident, SizeOf(dir).total);
}

// Drops the directory's files from the page cache (only this directory: the
// rest of the machine keeps its cache). Dirty pages are written first.
void EvictFromPageCache(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    int fd = open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

double Mb(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// ----------------------------------------------------------------- part 1

// A result as the worker fills it (ActorRunner::FillResult) and the head stores
// it (trial_id and done set): the quadratic trainable's loss and x.
Json MakeResult(const std::string& trial_id, int64_t iteration, int64_t last_iteration,
                double x, double t_start) {
  const double step_s = 0.0012;
  double loss = (x - 1.0) * (x - 1.0) / static_cast<double>(iteration);
  std::time_t now = static_cast<std::time_t>(t_start + step_s * iteration);
  std::tm tm{};
  localtime_r(&now, &tm);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d_%H-%M-%S", &tm);
  return Json{{"loss", loss},
              {"x", x / static_cast<double>(iteration)},
              {"done", iteration == last_iteration},
              {"training_iteration", iteration},
              {"trial_id", trial_id},
              {"date", date},
              {"timestamp", static_cast<int64_t>(now)},
              {"time_this_iter_s", step_s},
              {"time_total_s", step_s * iteration},
              {"pid", 4242},
              {"hostname", "bench-worker"},
              {"time_since_restore", step_s * iteration},
              {"iterations_since_restore", iteration}};
}

struct StoreShape {
  int64_t experiments = 1;
  int64_t trials = 10000;  // in total
  int64_t results_per_trial = 100;
};

// An experiment of `n_trials` variants of the quadratic search space, as the
// head stores it; `finished`: its trials are all done (else they run until
// iteration `stop`).
struct BenchExperiment {
  ztune::head::Experiment e;
  ztune::head::SearchSpace space;
};

ztune::Result<BenchExperiment> MakeExperiment(uint64_t number, int64_t n_trials, int64_t stop,
                                              bool finished, double now) {
  Json spec_json{
      {"name", "recovery-bench-" + std::to_string(number)},
      {"trainable", "quadratic"},
      {"param_space",
       {{"lr", {{"loguniform", {0.001, 0.5}}}}, {"x0", {{"uniform", {5, 10}}}}, {"target", 1}}},
      {"num_samples", n_trials},
      {"metric", "loss"},
      {"mode", "min"},
      {"stop", {{"training_iteration", stop}}},
      {"seed", 7}};
  auto spec = ztune::head::ExperimentSpec::Parse(spec_json, 7);
  if (!spec.ok()) return ztune::Status::InvalidArgument("spec: " + spec.status().ToString());
  auto space = ztune::head::SearchSpace::Parse(spec->param_space);
  if (!space.ok()) return ztune::Status::InvalidArgument("space: " + space.status().ToString());
  BenchExperiment out{ztune::head::Experiment{}, std::move(space).value()};
  ztune::head::Experiment& e = out.e;
  e.experiment_id = ztune::head::ExperimentIdFor(number);
  e.spec = *spec;
  e.finished = finished;
  e.created_at = now;
  e.total_variants = out.space.NumVariants(e.spec.num_samples).value_or(0);
  e.next_variant = e.total_variants;
  e.next_trial_index = e.total_variants;
  return out;
}

// Writes the store; returns {"build_store_s", ...} or {"error"}.
Json BuildStore(const std::string& data_dir, const StoreShape& shape) {
  auto t0 = Clock::now();
  auto opened = ztune::storage::RocksDbStore::Open(data_dir);
  if (!opened.ok()) return Json{{"error", "open: " + opened.status().ToString()}};
  std::unique_ptr<ztune::storage::RocksDbStore> store = std::move(opened).value();
  const double now = static_cast<double>(std::time(nullptr)) - 3600;
  const int64_t per_exp = shape.trials / shape.experiments;
  const int64_t batch_trials = 100;
  uint64_t seq = 0;
  int64_t commits = 0;
  int64_t results = 0;
  uint64_t bytes = 0;
  for (int64_t x = 0; x < shape.experiments; ++x) {
    const int64_t n_trials = per_exp + (x < shape.trials % shape.experiments ? 1 : 0);
    auto made = MakeExperiment(static_cast<uint64_t>(x + 1), n_trials, shape.results_per_trial,
                               /*finished=*/true, now);
    if (!made.ok()) return Json{{"error", made.status().ToString()}};
    const ztune::head::Experiment& e = made->e;
    const ztune::head::SearchSpace& space = made->space;
    ztune::storage::WriteBatch batch;
    batch.Put(ztune::storage::Family::kExperiments, e.experiment_id, e.ToJson().dump());
    batch.Put(ztune::storage::Family::kMeta, ztune::storage::kMetaNextExperiment,
              std::to_string(x + 2));
    for (int64_t k = 0; k < n_trials; ++k) {
      ztune::head::Trial t;
      t.trial_id = ztune::head::TrialIdFor(e.experiment_id, static_cast<uint64_t>(k));
      t.experiment_id = e.experiment_id;
      t.seq = seq++;
      t.config = space.Variant(e.spec.seed, static_cast<uint64_t>(k));
      t.status = ztune::head::TrialStatus::kTerminated;
      t.attempt = 1;
      t.start_time = now + 0.01 * static_cast<double>(k);
      double x0 = t.config.value("x0", 5.0);
      for (int64_t i = 1; i <= shape.results_per_trial; ++i) {
        Json r = MakeResult(t.trial_id, i, shape.results_per_trial, x0, t.start_time);
        std::string v = ztune::head::StoredResultValue(r);  // as the head stores it
        if (i == shape.results_per_trial) t.last_result = std::move(r);
        batch.Put(ztune::storage::Family::kResults,
                  ztune::storage::ResultKey(t.trial_id, static_cast<uint64_t>(i)), std::move(v));
        ++results;
      }
      t.iteration = shape.results_per_trial;
      t.end_time = t.start_time + 0.0012 * static_cast<double>(shape.results_per_trial);
      ztune::head::PutTrialRecord(batch, t);
      if ((k + 1) % batch_trials == 0 || k + 1 == n_trials) {
        bytes += batch.bytes();
        if (auto s = store->Commit(batch); !s.ok()) return Json{{"error", "commit: " + s.ToString()}};
        ++commits;
        batch.Clear();
      }
    }
  }
  store.reset();  // closes (and releases the LOCK) before any head opens it
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  DirBytes size = SizeOf(data_dir);
  return Json{{"build_store_s", seconds},
              {"build_commits", commits},
              {"build_results_per_s", static_cast<double>(results) / seconds},
              {"records_mb", Mb(bytes)},
              {"store_mb", Mb(size.total)},
              {"store_sst_mb", Mb(size.sst)},
              {"store_wal_mb", Mb(size.wal)},
              {"results", results}};
}

// Grows the WAL the way a head under load does before it is killed: a new
// experiment of `live_trials` RUNNING trials (their actors on a worker that
// will not come back) whose results go on, written as the head writes them
// since 3d9341d: result records only, one synced commit per turn of 200
// results, round robin over the trials, the trial records left at the
// iteration they started from (a restart reads a live trial's progress from
// its newest result). The experiment and trial records written first are
// the oldest entries in the WAL, so its files cannot be dropped until
// max_total_wal_size (64 MiB) forces a flush: a crash finds up to that much
// to replay. Until 2026-12-04 (night) the tail rewrote the trial records
// instead, which is what heads before 3d9341d wrote with every result.
// Runs in a child process (AppendWalTail) that ends with _exit after its last
// synced commit, as a head killed -9 would: a clean close flushes the
// memtables and leaves no WAL to replay.
Json AppendWalTailAndCrash(const std::string& data_dir, double target_mb, int64_t live_trials,
                           uint64_t first_seq) {
  auto t0 = Clock::now();
  auto opened = ztune::storage::RocksDbStore::Open(data_dir);
  if (!opened.ok()) return Json{{"error", "open: " + opened.status().ToString()}};
  std::unique_ptr<ztune::storage::RocksDbStore> store = std::move(opened).value();
  using ztune::storage::Family;
  auto next = store->Get(Family::kMeta, ztune::storage::kMetaNextExperiment);
  if (!next.ok() || !next->has_value()) return Json{{"error", "no meta next_experiment"}};
  const uint64_t number = std::stoull(**next);
  const double now = static_cast<double>(std::time(nullptr)) - 60;
  auto made = MakeExperiment(number, live_trials, int64_t{1} << 40, /*finished=*/false, now);
  if (!made.ok()) return Json{{"error", made.status().ToString()}};
  const ztune::head::Experiment& e = made->e;
  ztune::storage::WriteBatch batch;
  batch.Put(Family::kExperiments, e.experiment_id, e.ToJson().dump());
  batch.Put(Family::kMeta, ztune::storage::kMetaNextExperiment, std::to_string(number + 1));
  const ztune::WorkerId gone("bench-gone-0badf00d");
  auto cpu = ztune::ResourceSet::FromJson(Json{{"CPU", 1}});
  if (!cpu.ok()) return Json{{"error", cpu.status().ToString()}};
  std::vector<ztune::TrialId> ids;
  std::vector<double> x0s;
  for (int64_t k = 0; k < live_trials; ++k) {
    ztune::head::Trial t;
    t.trial_id = ztune::head::TrialIdFor(e.experiment_id, static_cast<uint64_t>(k));
    t.experiment_id = e.experiment_id;
    t.seq = first_seq + static_cast<uint64_t>(k);
    t.config = made->space.Variant(e.spec.seed, static_cast<uint64_t>(k));
    t.status = ztune::head::TrialStatus::kRunning;
    t.attempt = 1;
    t.start_time = now;
    t.actor_worker = gone;
    t.placement.bundles.push_back(ztune::head::BundlePlacement{gone, *cpu, {}});
    t.attempt_hosts.push_back(ztune::head::AttemptHost{1, gone});
    ztune::head::PutTrialRecord(batch, t);
    ids.push_back(t.trial_id);
    x0s.push_back(t.config.value("x0", 5.0));
  }
  if (auto st = store->Commit(batch); !st.ok()) return Json{{"error", st.ToString()}};
  batch.Clear();
  uint64_t written = 0;
  int64_t commits = 0;
  int64_t results = 0;
  for (int64_t i = 1; static_cast<double>(written) < target_mb * 1024 * 1024; ++i) {
    for (size_t k = 0; k < ids.size(); ++k) {
      Json r = MakeResult(ids[k].str(), i, int64_t{1} << 40, x0s[k], now);
      batch.Put(Family::kResults, ztune::storage::ResultKey(ids[k].str(), static_cast<uint64_t>(i)),
                ztune::head::StoredResultValue(r));
      ++results;
      if (batch.size() == 200) {
        written += batch.bytes();
        if (auto c = store->Commit(batch); !c.ok()) return Json{{"error", c.ToString()}};
        ++commits;
        batch.Clear();
      }
    }
  }
  (void)store.release();  // never closed: the child ends with _exit
  return Json{{"tail_written_mb", Mb(written)},
              {"tail_commits", commits},
              {"tail_results", results},
              {"tail_live_trials", live_trials},
              {"tail_s", std::chrono::duration<double>(Clock::now() - t0).count()}};
}

// Runs AppendWalTailAndCrash in a fresh process (this binary again, with
// kWalTailChildFlag): a forked copy of this one would inherit RocksDB's
// environment without its background threads, and its writes would stall on
// the first flush the WAL bound asks for.
constexpr const char* kWalTailChildFlag = "--wal-tail-child";

Json AppendWalTail(const std::string& data_dir, double target_mb, int64_t live_trials,
                   uint64_t first_seq) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return Json{{"error", "cannot find this binary: " + ec.message()}};
  const std::string out_path = data_dir + ".tail.json";
  Proc child(self,
             {kWalTailChildFlag, data_dir, std::to_string(target_mb), std::to_string(live_trials),
              std::to_string(first_seq)},
             data_dir + ".tail.log", out_path);
  const std::optional<int> status = child.Wait(600'000);
  const std::string text = ztune::bench::ReadAll(out_path);
  Json out = Json::parse(text, nullptr, false);
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0 || out.is_discarded()) {
    return Json{{"error", "the WAL-tail child failed: " + text}};
  }
  out["wal_mb_after_tail"] = Mb(SizeOf(data_dir).wal);
  return out;
}

// Waits (polling every 2 ms) for the endpoints file; returns its JSON.
std::optional<Json> WaitEndpoints(const std::string& path, Proc& head, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    if (fs::exists(path)) {
      Json ep = Json::parse(ztune::bench::ReadAll(path), nullptr, false);
      if (!ep.is_discarded() && ep.contains("client_endpoint")) return ep;
    }
    if (head.Wait(0)) return std::nullopt;  // exited
    SleepMs(2);
  }
  return std::nullopt;
}

// One head start on `data_dir`: time to the endpoints file and to the first
// `experiments` reply; checks the trial counts (`live_trials` > 0: the WAL
// tail's experiment is there too, its trials RUNNING or PENDING).
Json TimeHeadStart(const std::string& dir, const std::string& data_dir, const std::string& label,
                   const StoreShape& shape, int64_t live_trials, int index) {
  std::string endpoints = dir + "/endpoints-cold-" + std::to_string(index) + ".json";
  double resident_mb = Mb(ResidentBytes(data_dir));
  Proc head(
      ZTUNE_HEAD_BIN,
      {"--data-dir", data_dir, "--worker-endpoint", "tcp://127.0.0.1:*", "--client-endpoint",
       "tcp://127.0.0.1:*", "--endpoints-file", endpoints, "--log-level", "info", "--insecure"},
      dir + "/head-cold-" + std::to_string(index) + ".log");
  Json out{{"label", label},
           {"data_dir_page_cache_mb", resident_mb},
           {"wal_mb", Mb(SizeOf(data_dir).wal)}};
  auto ep = WaitEndpoints(endpoints, head, 60000);
  if (!ep) return Json{{"label", label}, {"error", "head did not write its endpoints file"}};
  out["endpoints_file_ms"] = MsSince(head.started());
  ztune::client::HeadClient client(ztune::client::HeadClientOptions{
      (*ep)["client_endpoint"].get<std::string>(), 30000, 0, std::nullopt});
  auto reply = client.Call("experiments");
  out["head_start_to_serving_ms"] = MsSince(head.started());
  if (!reply.ok()) return Json{{"label", label}, {"error", reply.status().ToString()}};
  // Verify: the built experiments finished with all their trials TERMINATED,
  // and the live one (if any) with all of its trials still to run.
  int64_t terminated = 0;
  int64_t finished = 0;
  bool counts_ok = (*reply)["experiments"].size() ==
                   static_cast<size_t>(shape.experiments + (live_trials > 0 ? 1 : 0));
  for (const auto& e : (*reply)["experiments"]) {
    const Json& c = e["trial_counts"];
    const int64_t total = e["total_trials"].get<int64_t>();
    if (e["finished"].get<bool>()) {
      ++finished;
      int64_t t = c.value("TERMINATED", int64_t{0});
      terminated += t;
      counts_ok = counts_ok && total == t;
    } else {
      counts_ok = counts_ok && total == live_trials &&
                  c.value("RUNNING", int64_t{0}) + c.value("PENDING", int64_t{0}) == live_trials;
    }
  }
  counts_ok = counts_ok && finished == shape.experiments && terminated == shape.trials;
  out["experiments_listed"] = (*reply)["experiments"].size();
  out["terminated_trials_listed"] = terminated;
  out["reply_ok"] = counts_ok;
  out["reply_bytes"] = reply->dump().size();
  double cpu = ztune::bench::ProcessCpuSeconds(head.pid());
  out["head_cpu_ms_to_serving"] = 1000 * cpu;  // includes the one request
  auto stop_t0 = Clock::now();
  head.Stop();
  out["head_stop_ms"] = MsSince(stop_t0);
  return out;
}

Json RunCheck(const std::string& dir, const std::string& data_dir, const std::string& label) {
  std::string out_path = dir + "/check-" + label + ".json";
  double resident_mb = Mb(ResidentBytes(data_dir));
  Proc check(ZTUNE_HEAD_BIN, {"--check", "--json", "--data-dir", data_dir},
             dir + "/check-" + label + ".log", out_path);
  auto status = check.Wait(600000);
  double seconds = MsSince(check.started()) / 1000;
  Json report = Json::parse(ztune::bench::ReadAll(out_path), nullptr, false);
  Json out{{"label", label},
           {"data_dir_page_cache_mb", resident_mb},
           {"check_s", seconds},
           {"exit_code", status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1}};
  if (!report.is_discarded()) {
    out["ok"] = report.value("ok", false);
    out["results_checked"] = report.value("results", int64_t{0});
    out["trials_checked"] = report.value("trials", int64_t{0});
    out["problems"] = report.value("problems", Json::array()).size();
  }
  return out;
}

double ExecBaselineMs(const std::string& dir) {
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    Proc p(ZTUNE_HEAD_BIN, {"--help"}, dir + "/help.log", dir + "/help.out");
    p.Wait(10000);
    best = std::min(best, MsSince(p.started()));
  }
  return best;
}

Json ColdStart(const StoreShape& shape, double wal_tail_mb, int64_t live_trials, bool keep) {
  std::string dir = ztune::bench::MakeTempDir("recovery-cold");
  std::string data_dir = dir + "/data";
  Json out{{"experiments", shape.experiments},
           {"trials", shape.trials},
           {"results_per_trial", shape.results_per_trial}};
  if (keep) out["dir"] = dir;
  Json build = BuildStore(data_dir, shape);
  out.update(build);
  if (build.contains("error")) return out;
  out["exec_baseline_ms"] = ExecBaselineMs(dir);
  Json starts = Json::array();
  starts.push_back(TimeHeadStart(dir, data_dir, "after_build_wal_replay", shape, 0, 1));
  starts.push_back(TimeHeadStart(dir, data_dir, "restart_warm_cache", shape, 0, 2));
  EvictFromPageCache(data_dir);
  starts.push_back(TimeHeadStart(dir, data_dir, "restart_cold_cache", shape, 0, 3));
  Json tail =
      AppendWalTail(data_dir, wal_tail_mb, live_trials, static_cast<uint64_t>(shape.trials));
  out["wal_tail"] = tail;
  if (!tail.contains("error")) {
    starts.push_back(TimeHeadStart(dir, data_dir, "crash_restart_big_wal", shape, live_trials, 4));
  }
  out["starts"] = starts;
  out["store_mb_after_starts"] = Mb(SizeOf(data_dir).total);
  Json checks = Json::array();
  EvictFromPageCache(data_dir);
  checks.push_back(RunCheck(dir, data_dir, "cold_cache"));
  checks.push_back(RunCheck(dir, data_dir, "warm_cache"));
  out["checks"] = checks;
  if (!keep) std::filesystem::remove_all(dir);
  return out;
}

// ----------------------------------------------------------------- part 2

struct TrialState {
  uint64_t attempt = 0;
  int64_t num_restores = 0;
};

struct Cluster {
  std::string dir;
  std::string data_dir;
  std::string worker_endpoint;
  std::string client_endpoint;
  std::unique_ptr<Proc> head;
  std::vector<std::unique_ptr<Proc>> workers;
  int head_starts = 0;
};

std::vector<std::string> HeadArgs(const Cluster& c, const std::string& worker_ep,
                                  const std::string& client_ep, const std::string& endpoints,
                                  int64_t heartbeat_ms) {
  return {"--data-dir",          c.data_dir,
          "--worker-endpoint",   worker_ep,
          "--client-endpoint",   client_ep,
          "--endpoints-file",    endpoints,
          "--heartbeat-ms",      std::to_string(heartbeat_ms),
          "--liveness",          "3",
          "--reattach-grace-ms", "30000",
          "--log-level",         "info",
          "--insecure"};
}

int AliveWorkers(ztune::client::HeadClient& client) {
  auto w = client.Call("workers");
  int alive = 0;
  if (w.ok()) {
    for (const auto& x : (*w)["workers"]) alive += x["alive"].get<bool>() ? 1 : 0;
  }
  return alive;
}

// One kill -9 + restart; returns the sample.
Json KillAndRestart(Cluster& c, const std::string& exp, int64_t heartbeat_ms,
                    const std::map<std::string, TrialState>& before, int num_workers,
                    int down_ms) {
  Json sample{{"down_ms", down_ms}};
  c.head->Kill9();
  SleepMs(down_ms);  // the head stays dead this long (a supervisor's restart delay)
  std::string endpoints = c.dir + "/endpoints-" + std::to_string(++c.head_starts) + ".json";
  c.head = std::make_unique<Proc>(
      ZTUNE_HEAD_BIN, HeadArgs(c, c.worker_endpoint, c.client_endpoint, endpoints, heartbeat_ms),
      c.dir + "/head-" + std::to_string(c.head_starts) + ".log");
  const auto t0 = c.head->started();
  auto ep = WaitEndpoints(endpoints, *c.head, 30000);
  if (!ep) return Json{{"error", "restarted head did not bind"}};
  sample["head_bound_ms"] = MsSince(t0);
  ztune::client::HeadClient client(
      ztune::client::HeadClientOptions{c.client_endpoint, 10000, 0, std::nullopt});
  std::optional<double> first_reattached, all_reattached, all_workers;
  std::vector<double> worker_alive_ms;
  int polls = 0;
  int64_t changed_attempts = 0, changed_restores = 0;
  const auto deadline = t0 + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    if (!all_workers) {
      int alive = AliveWorkers(client);
      while (static_cast<int>(worker_alive_ms.size()) < alive) worker_alive_ms.push_back(MsSince(t0));
      if (alive == num_workers) all_workers = MsSince(t0);
    }
    auto r = client.Call("trials", Json{{"experiment_id", exp}});
    ++polls;
    double now_ms = MsSince(t0);
    if (r.ok()) {
      int64_t reattached = 0;
      changed_attempts = 0;
      changed_restores = 0;
      for (const auto& t : (*r)["trials"]) {
        const auto& b = before.at(t["trial_id"].get<std::string>());
        bool same_attempt = t["attempt"].get<uint64_t>() == b.attempt;
        bool same_restores = t["num_restores"].get<int64_t>() == b.num_restores;
        changed_attempts += same_attempt ? 0 : 1;
        changed_restores += same_restores ? 0 : 1;
        if (t["status"] == "RUNNING" && !t["worker"].is_null() && same_attempt && same_restores) {
          ++reattached;
        }
      }
      if (reattached > 0 && !first_reattached) first_reattached = now_ms;
      if (reattached == static_cast<int64_t>(before.size())) {
        all_reattached = now_ms;
        break;
      }
      if (changed_attempts > 0) break;  // restarted instead of re-attached: give up
    }
    SleepMs(10);
  }
  // Workers not yet seen alive by the last `workers` poll had registered by
  // the time every trial was re-attached.
  while (all_reattached && static_cast<int>(worker_alive_ms.size()) < num_workers) {
    worker_alive_ms.push_back(*all_reattached);
  }
  sample["polls"] = polls;
  // When the n-th worker was first seen alive (polled with the trials, every ~10 ms).
  sample["workers_alive_ms"] = worker_alive_ms;
  sample["first_trial_reattached_ms"] = first_reattached ? Json(*first_reattached) : Json();
  sample["reattach_ms"] = all_reattached ? Json(*all_reattached) : Json();
  sample["attempts_changed"] = changed_attempts;
  sample["num_restores_changed"] = changed_restores;
  if (!all_reattached) sample["error"] = "not every trial re-attached within 30 s";
  // The re-attached trials go on: their iterations grow.
  auto sum_iterations = [&]() -> int64_t {
    auto r = client.Call("trials", Json{{"experiment_id", exp}});
    int64_t sum = 0;
    if (r.ok()) {
      for (const auto& t : (*r)["trials"]) sum += t["iteration"].get<int64_t>();
    }
    return sum;
  };
  int64_t it0 = sum_iterations();
  SleepMs(1000);
  int64_t it1 = sum_iterations();
  sample["iterations_per_s_after"] = it1 - it0;
  if (it1 <= it0 && !sample.contains("error")) sample["error"] = "no progress after the re-attach";
  return sample;
}

Json ReattachRun(int64_t heartbeat_ms, int actors, int repeats, const std::vector<int>& downs,
                 int64_t max_backoff_ms, bool keep) {
  const int num_workers = 4;
  const int cpus_per_worker = (actors + num_workers - 1) / num_workers;
  Cluster c;
  c.dir = ztune::bench::MakeTempDir("recovery-reattach");
  c.data_dir = c.dir + "/data";
  Json out{{"heartbeat_ms", heartbeat_ms},
           {"liveness", 3},
           {"worker_max_backoff_ms", max_backoff_ms},
           {"workers", num_workers},
           {"cpus_per_worker", cpus_per_worker},
           {"actors", actors}};
  if (keep) out["dir"] = c.dir;
  std::string endpoints = c.dir + "/endpoints-0.json";
  c.head = std::make_unique<Proc>(
      ZTUNE_HEAD_BIN,
      HeadArgs(c, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", endpoints, heartbeat_ms),
      c.dir + "/head-0.log");
  auto ep = WaitEndpoints(endpoints, *c.head, 30000);
  if (!ep) {
    out["error"] = "head did not start";
    return out;
  }
  c.worker_endpoint = (*ep)["worker_endpoint"];
  c.client_endpoint = (*ep)["client_endpoint"];
  for (int w = 0; w < num_workers; ++w) {
    std::string name = "bench-" + std::to_string(w);
    c.workers.push_back(std::make_unique<Proc>(
        ZTUNE_WORKER_BIN,
        std::vector<std::string>{
            "--head", c.worker_endpoint, "--cpus", std::to_string(cpus_per_worker), "--name", name,
            "--work-dir", c.dir + "/work-" + name, "--heartbeat-ms", std::to_string(heartbeat_ms),
            "--liveness", "3", "--max-backoff-ms", std::to_string(max_backoff_ms), "--log-level",
            "info", "--insecure"},
        c.dir + "/worker-" + name + ".log"));
  }
  ztune::client::HeadClient client(
      ztune::client::HeadClientOptions{c.client_endpoint, 10000, 0, std::nullopt});
  for (int i = 0; i < 1000 && AliveWorkers(client) < num_workers; ++i) SleepMs(10);
  Json spec{{"name", "recovery-reattach"},
            {"trainable", "sleep"},
            {"param_space", {{"sleep_s", 0.05}}},
            {"num_samples", actors},
            {"stop", {{"training_iteration", 100000}}}};
  auto submitted = client.Call("submit", Json{{"spec", spec}});
  if (!submitted.ok()) {
    out["error"] = "submit: " + submitted.status().ToString();
    return out;
  }
  std::string exp = (*submitted)["experiment_id"];
  auto t_submit = Clock::now();
  std::map<std::string, TrialState> before;
  while (MsSince(t_submit) < 60000) {
    auto r = client.Call("trials", Json{{"experiment_id", exp}});
    if (r.ok()) {
      int running = 0;
      for (const auto& t : (*r)["trials"]) {
        running += t["status"] == "RUNNING" && !t["worker"].is_null() ? 1 : 0;
      }
      if (running == actors) {
        for (const auto& t : (*r)["trials"]) {
          before[t["trial_id"]] = TrialState{t["attempt"].get<uint64_t>(),
                                             t["num_restores"].get<int64_t>()};
        }
        break;
      }
    }
    SleepMs(20);
  }
  out["all_running_after_submit_ms"] = MsSince(t_submit);
  if (static_cast<int>(before.size()) != actors) {
    out["error"] = "the trials did not all start";
    return out;
  }
  SleepMs(1500);  // steady state: results and heartbeats flowing
  // `repeats` immediate restarts, then one restart after each delay in `downs`.
  std::vector<int> plan(static_cast<size_t>(repeats), 0);
  plan.insert(plan.end(), downs.begin(), downs.end());
  Json samples = Json::array();
  std::vector<double> immediate, delayed;
  bool all = true;
  for (int down : plan) {
    Json s = KillAndRestart(c, exp, heartbeat_ms, before, num_workers, down);
    bool ok = s.contains("reattach_ms") && s["reattach_ms"].is_number() && !s.contains("error");
    if (ok) (down == 0 ? immediate : delayed).push_back(s["reattach_ms"].get<double>());
    all = all && ok;
    samples.push_back(s);
    if (!ok) break;
  }
  out["samples"] = samples;
  auto stats = [&](std::vector<double> v, const std::string& suffix) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    out["reattach_ms_median" + suffix] = v[v.size() / 2];
    out["reattach_ms_max" + suffix] = v.back();
    out["reattach_ms_min" + suffix] = v.front();
  };
  stats(immediate, "");
  stats(delayed, "_after_down");
  out["all_reattached"] = all;
  // Clean stop: the experiment, then the processes.
  ztune::client::HeadClient stopper(
      ztune::client::HeadClientOptions{c.client_endpoint, 10000, 0, std::nullopt});
  auto stopped = stopper.Call("stop", Json{{"id", exp}});
  out["stopped_trials"] = stopped.ok() ? (*stopped)["stopped"].size() : 0;
  bool finished = false;
  for (int i = 0; i < 1500 && !finished; ++i) {
    auto e = stopper.Call("experiment", Json{{"experiment_id", exp}});
    finished = e.ok() && (*e)["experiment"]["finished"].get<bool>();
    if (!finished) SleepMs(20);
  }
  out["experiment_finished_after_stop"] = finished;
  for (auto& w : c.workers) w->Stop();
  c.workers.clear();
  c.head->Stop();
  if (!keep) std::filesystem::remove_all(c.dir);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == kWalTailChildFlag) {
    const Json out = AppendWalTailAndCrash(argv[2], std::atof(argv[3]), std::atoll(argv[4]),
                                           std::strtoull(argv[5], nullptr, 10));
    std::fputs(out.dump().c_str(), stdout);
    std::fflush(stdout);
    _exit(out.contains("error") ? 1 : 0);  // no destructors: the store is not closed
  }
  CLI::App app{"ztune recovery benchmark: head cold start on a big store, re-attach after restart"};
  StoreShape shape;
  int actors = 200;
  int repeats = 5;
  std::vector<int> downs = {3100, 3500, 3900, 4300, 4700};
  int64_t max_backoff_ms = 1000;
  double wal_tail_mb = 240;
  int64_t live_trials = 1000;
  std::vector<int64_t> heartbeats = {1000, 100};
  bool skip_cold = false, skip_reattach = false, keep = false;
  app.add_option("--experiments", shape.experiments, "experiments in the big store")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--trials", shape.trials, "trials in the big store (all experiments)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--results-per-trial", shape.results_per_trial, "stored results per trial")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--wal-tail-mb", wal_tail_mb,
                 "results of live trials appended before the last cold start (WAL to replay)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--live-trials", live_trials, "RUNNING trials whose results make the WAL tail")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--actors", actors, "running trials to re-attach (4 workers)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "kill + immediate restart cycles per heartbeat setting")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--down-ms", downs,
                 "then one kill + restart after each of these delays (head dead meanwhile)")
      ->capture_default_str();
  app.add_option("--heartbeat-ms", heartbeats, "heartbeat settings for the re-attach runs")
      ->capture_default_str();
  app.add_option("--max-backoff-ms", max_backoff_ms, "the workers' --max-backoff-ms")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--skip-cold", skip_cold, "skip the cold-start measurement");
  app.add_flag("--skip-reattach", skip_reattach, "skip the re-attach measurement");
  app.add_flag("--keep-dirs", keep, "keep the temp dirs (logs, data) for inspection");
  CLI11_PARSE(app, argc, argv);
  if (shape.experiments > shape.trials) {
    std::cerr << "--experiments must be <= --trials\n";
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);

  Json doc{{"benchmark", "recovery"}};
  Json summary;
  bool ok = true;
  if (!skip_cold) {
    Json cold = ColdStart(shape, wal_tail_mb, live_trials, keep);
    doc["cold_start"] = cold;
    summary["trials"] = shape.trials;
    summary["results"] = cold.value("results", int64_t{0});
    summary["build_store_s"] = cold.value("build_store_s", 0.0);
    if (cold.contains("starts")) {
      for (const auto& s : cold["starts"]) {
        ok = ok && s.value("reply_ok", false);
        summary["head_start_to_serving_ms_" + s["label"].get<std::string>()] =
            s.value("head_start_to_serving_ms", -1.0);
      }
      double worst = 0;
      for (const auto& s : cold["starts"]) worst = std::max(worst, s.value("head_start_to_serving_ms", -1.0));
      summary["head_start_to_serving_ms"] = worst;  // the slowest of the three starts
    } else {
      ok = false;
    }
    if (cold.contains("checks")) {
      for (const auto& c : cold["checks"]) {
        ok = ok && c.value("exit_code", -1) == 0;
        summary["check_s_" + c["label"].get<std::string>()] = c.value("check_s", -1.0);
      }
      summary["check_s"] = cold["checks"][0].value("check_s", -1.0);
    }
  }
  if (!skip_reattach) {
    Json runs = Json::array();
    for (int64_t hb : heartbeats) {
      Json run = ReattachRun(hb, actors, repeats, downs, max_backoff_ms, keep);
      ok = ok && run.value("all_reattached", false) && !run.contains("error");
      summary["reattach_ms_hb" + std::to_string(hb)] =
          run.contains("reattach_ms_median") ? run["reattach_ms_median"] : Json();
      summary["reattach_ms_max_hb" + std::to_string(hb)] =
          run.contains("reattach_ms_max") ? run["reattach_ms_max"] : Json();
      summary["reattach_ms_after_down_max_hb" + std::to_string(hb)] =
          run.contains("reattach_ms_max_after_down") ? run["reattach_ms_max_after_down"] : Json();
      runs.push_back(run);
    }
    doc["reattach"] = runs;
    summary["actors"] = actors;
  }
  summary["ok"] = ok;
  doc["summary"] = summary;
  std::cout << doc.dump(2) << std::endl;
  return ok ? 0 : 1;
}
