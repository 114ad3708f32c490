// fleet: a thousand simulated ztune-workers in one process (bench/fleet/
// sim_worker.h), each on its own DEALER connection to a real ztune-head,
// speaking the protocol of docs/protocol.md. It stands in for a fleet of
// machines on one host so that the head's limits can be measured
// (docs/benchmarks.md, "Fleet"). Single-threaded: one epoll set over every
// connection's TCP socket, each spoken as ZMTP/CURVE by a ZmtpLink (no
// libzmq socket per worker: bench/fleet/zmtp_link.h says why), and a heap of
// the simulated workers' timers.
//
// Prints one JSON document at the end (and writes it to --stats-file every
// --report-s while it runs): registrations, reconnects, results sent and
// acknowledged, the ACK latency of results (first send to ACK) and the
// longest silence of the head seen by a registered worker. SIGUSR1 ends a
// measurement window (its figures go to STATS_FILE.windowN, N from 0) and
// starts the next: latency and silence are measured per window.
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <zmq.h>

#include "bench/fleet/sim_worker.h"
#include "bench/fleet/zmtp_link.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/protocol/codec.h"
#include "common/security/curve_socket.h"
#include "common/zmq/connection_monitor.h"

namespace ztune::fleet {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_new_window{false};
void OnSignal(int) { g_stop.store(true); }
// SIGUSR1: measure from now on (a benchmark's steady state, after its ramp-up).
void OnNewWindow(int) { g_new_window.store(true); }

struct FleetOptions {
  std::string head = "tcp://127.0.0.1:7501";
  int workers = 100;
  double cpus = 10;
  double gpus = 0;
  // Every simulated worker's options; name, host, pid, resources and id per worker.
  SimWorkerOptions worker;
  std::string name_prefix = "sim";
  std::string key_file;
  std::string head_key;
  bool insecure = false;
  double duration_s = 0;  // 0: until SIGINT/SIGTERM
  double report_s = 5;
  std::string stats_file;
  // Results sent per 100 ms, one line "MS COUNT" per 100 ms that sent any
  // (MS from the fleet's start): the shape of the load, e.g. how a common
  // start's steps end together and spread (docs/benchmarks.md, fleet).
  std::string series_file;
  uint64_t seed = 1;
};

struct Slot {
  explicit Slot(SimWorker w) : sim(std::move(w)) {}
  SimWorker sim;
  std::unique_ptr<ZmtpLink> link;  // null while disconnected
  // A refused TCP connect is tried again then (libzmq's 100 ms), with what
  // the simulated worker sent meanwhile; -1: none waits.
  TimeMs retry_at = -1;
  TimeMs scheduled = -1;  // the due time of this slot's live heap entry
};

struct Timer {
  TimeMs due;
  size_t slot;
  bool operator>(const Timer& o) const { return due > o.due; }
};

// 128 random bits in hex, new for every connection (docs/protocol.md §1).
std::string RoutingId(std::mt19937_64& rng) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

Json Percentiles(std::vector<float> samples) {
  Json j{{"count", samples.size()}};
  if (samples.empty()) return j;
  auto at = [&](double q) {
    const size_t k = std::min(samples.size() - 1, static_cast<size_t>(q * samples.size()));
    std::nth_element(samples.begin(), samples.begin() + static_cast<ptrdiff_t>(k), samples.end());
    return samples[k];
  };
  j["p50"] = at(0.50);
  j["p90"] = at(0.90);
  j["p99"] = at(0.99);
  j["max"] = *std::max_element(samples.begin(), samples.end());
  return j;
}

class Fleet {
 public:
  // Routing ids and worker ids are random, not from --seed: two fleets (or
  // two runs) with the same seed must not offer the head the same routing id
  // (it refuses the second connection) or the same worker id.
  explicit Fleet(FleetOptions o) : o_(std::move(o)), rng_(std::random_device{}()) {}

  int Run() {
    if (!o_.insecure) {
      auto keys = security::LoadCurveClientKeys(o_.key_file, o_.head_key);
      if (!keys.ok()) {
        std::fprintf(stderr, "fleet: %s\n", keys.status().ToString().c_str());
        return 2;
      }
      if (zmq_z85_decode(curve_.server, keys->server.z85().c_str()) == nullptr ||
          zmq_z85_decode(curve_.public_key, keys->own.public_key.z85().c_str()) == nullptr ||
          zmq_z85_decode(curve_.secret_key, keys->own.secret_z85.c_str()) == nullptr) {
        std::fprintf(stderr, "fleet: the keys are not Z85\n");
        return 2;
      }
    }
    auto address = ResolveTcpEndpoint(o_.head);
    if (!address.ok()) {
      std::fprintf(stderr, "fleet: %s\n", address.status().ToString().c_str());
      return 2;
    }
    address_ = *address;
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) {
      std::perror("fleet: epoll_create1");
      return 2;
    }
    if (!o_.series_file.empty()) {
      series_ = std::fopen(o_.series_file.c_str(), "w");
      if (series_ == nullptr) {
        std::perror(("fleet: " + o_.series_file).c_str());
        return 2;
      }
    }
    started_ = clock_.NowMs();
    window_started_ = started_;
    for (int i = 0; i < o_.workers; ++i) {
      SimWorkerOptions w = o_.worker;
      w.name = o_.name_prefix + std::to_string(i);
      w.id_bits = (rng_() & 0xffffffffULL) | 1;  // never 0: that would mean "from the seed"
      w.host = o_.name_prefix + "-host-" + std::to_string(i);
      w.pid = getpid();
      w.resources = {{"CPU", o_.cpus}};
      if (o_.gpus > 0) w.resources["GPU"] = o_.gpus;
      slots_.emplace_back(SimWorker(std::move(w), o_.seed * 1'000'003 + i));
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!Open(i)) return 2;
    }
    TimeMs next_report = started_ + static_cast<TimeMs>(o_.report_s * 1000);
    while (!g_stop.load()) {
      TimeMs now = clock_.NowMs();
      if (o_.duration_s > 0 && now - started_ >= static_cast<TimeMs>(o_.duration_s * 1000)) break;
      if (now >= next_report) {
        Report(now);
        next_report = now + static_cast<TimeMs>(o_.report_s * 1000);
      }
      if (g_new_window.exchange(false)) {
        // The window that ends is written first, so a benchmark can read
        // each window's figures (the file's "window" counts them).
        WriteStats(Stats(now), ".window" + std::to_string(window_));
        for (Slot& slot : slots_) slot.sim.ResetWindow();
        peak_results_per_bucket_ = 0;
        timer_lateness_ms_.clear();
        window_started_ = now;
        ++window_;
      }
      TimeMs timeout = 100;
      if (!timers_.empty()) timeout = std::clamp<TimeMs>(timers_.top().due - now, 0, 100);
      epoll_event events[256];
      const int n = epoll_wait(epoll_fd_, events, 256, static_cast<int>(timeout));
      if (n < 0 && errno != EINTR) {
        std::perror("fleet: epoll_wait");
        return 1;
      }
      now = clock_.NowMs();
      // Level-triggered: a connection with more than one read's worth waiting
      // is reported again in the next pass, after the others had theirs.
      for (int k = 0; k < n; ++k)
        Read(static_cast<size_t>(events[k].data.u64), events[k].events, now);
      RunTimers(clock_.NowMs());
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].link || !slots_[i].link->ready()) continue;
      std::vector<protocol::Message> out;
      slots_[i].sim.Leave(out);
      Send(i, out);
    }
    const Json stats = Stats(clock_.NowMs());
    WriteStats(stats);
    std::printf("%s\n", stats.dump(2).c_str());
    for (size_t i = 0; i < slots_.size(); ++i) Close(i);
    close(epoll_fd_);
    if (series_ != nullptr) {
      WriteSeriesBucket();
      std::fclose(series_);
    }
    return 0;
  }

 private:
  bool Open(size_t i) {
    Slot& s = slots_[i];
    auto link = ZmtpLink::Connect(address_, epoll_fd_, i, RoutingId(rng_),
                                  o_.insecure ? nullptr : &curve_, protocol::kMaxFrameBytes);
    if (!link.ok()) {
      std::fprintf(stderr, "fleet: cannot connect to %s: %s\n", o_.head.c_str(),
                   link.status().ToString().c_str());
      return false;
    }
    s.link = std::move(*link);
    s.retry_at = s.link->closed() ? clock_.NowMs() + kConnectRetryMs : -1;
    std::vector<protocol::Message> out;
    s.sim.OnConnected(clock_.NowMs(), out);
    Send(i, out);
    Schedule(i);
    return true;
  }

  void Close(size_t i) {
    slots_[i].link.reset();
    slots_[i].retry_at = -1;
  }

  // The connection ended: as a real worker, which sees it from its socket
  // monitor at once (a head killed and restarted), not after heartbeat x
  // liveness of silence.
  void Cut(size_t i, TimeMs now) {
    Slot& s = slots_[i];
    const ZmtpLink& link = *s.link;
    if (link.auth_status() != 0 && !auth_warned_) {
      auth_warned_ = true;
      std::fprintf(stderr,
                   "fleet: the head refused the workers' key (ZAP status %d): is it in the "
                   "head's workers.allow?\n",
                   link.auth_status());
    } else if (link.closed_in_handshake() && !handshake_warned_) {
      handshake_warned_ = true;
      std::fprintf(stderr, "fleet: the head closed a connection in its handshake (%s): %s\n",
                   link.error().c_str(), zmqutil::ClosedInHandshakeHint(!o_.insecure).c_str());
    }
    s.sim.OnConnectionCut(now);
    Close(i);
    Schedule(i);
  }

  void Handle(size_t i, ZmtpLink::Outcome outcome, TimeMs now) {
    switch (outcome) {
      case ZmtpLink::Outcome::kOpen: break;
      case ZmtpLink::Outcome::kRefused:
        slots_[i].retry_at = now + kConnectRetryMs;
        Schedule(i);
        break;
      case ZmtpLink::Outcome::kCut: Cut(i, now); break;
    }
  }

  void Schedule(size_t i) {
    Slot& s = slots_[i];
    TimeMs due = s.sim.NextTimerMs();
    if (s.retry_at >= 0) due = std::min(due, s.retry_at);
    if (due == s.scheduled) return;
    s.scheduled = due;
    timers_.push(Timer{due, i});
  }

  void RunTimers(TimeMs now) {
    while (!timers_.empty() && timers_.top().due <= now) {
      const Timer t = timers_.top();
      timers_.pop();
      Slot& s = slots_[t.slot];
      if (t.due != s.scheduled) continue;  // superseded
      s.scheduled = -1;
      timer_lateness_ms_.push_back(static_cast<float>(now - t.due));
      if (s.link && s.retry_at >= 0 && s.retry_at <= now) {
        const Status st = s.link->Reconnect();
        if (!st.ok()) {
          std::fprintf(stderr, "fleet: %s\n", st.ToString().c_str());
          g_stop.store(true);
          return;
        }
        s.retry_at = s.link->closed() ? now + kConnectRetryMs : -1;
      }
      std::vector<protocol::Message> out;
      switch (s.sim.OnTimer(now, out)) {
        case SimWorker::LinkAction::kNone: Send(t.slot, out); break;
        case SimWorker::LinkAction::kClose: Close(t.slot); break;
        case SimWorker::LinkAction::kOpen:
          if (!Open(t.slot)) g_stop.store(true);
          continue;  // Open scheduled it
      }
      Schedule(t.slot);
    }
  }

  void Read(size_t i, uint32_t events, TimeMs now) {
    Slot& s = slots_[i];
    if (!s.link) return;
    std::vector<protocol::Message> out;
    const ZmtpLink::Outcome outcome =
        s.link->OnEvents(events, [&](std::span<const std::string_view> frames) {
          auto message = protocol::Decode(frames);
          if (!message.ok()) {
            ++undecodable_;
            return;
          }
          s.sim.OnMessage(std::move(*message), now, out);
          // Queued only: OnEvents writes them when it has read everything.
          for (protocol::Message& m : out) {
            CountResults(m, now);
            s.link->Send(protocol::Encode(m));
          }
          out.clear();
        });
    Handle(i, outcome, now);
    Schedule(i);
  }

  void Send(size_t i, std::vector<protocol::Message>& out) {
    Slot& s = slots_[i];
    if (!s.link) {
      out.clear();  // closed: the simulated worker re-sends after registering
      return;
    }
    const TimeMs now = clock_.NowMs();
    for (protocol::Message& m : out) {
      CountResults(m, now);
      std::vector<std::string> frames = protocol::Encode(m);
      if (s.sim.sends_one_frame()) {
        const protocol::OneFrameMessage joined(frames);
        std::vector<std::string> one(joined.frames().begin(), joined.frames().end());
        frames = std::move(one);
      }
      s.link->Send(frames);
    }
    out.clear();
    Handle(i, s.link->Flush(), now);
  }

  // Results sent per 100 ms: how bursty the load the head sees is (steps
  // that started together end together, within their jitter).
  void CountResults(const protocol::Message& m, TimeMs now) {
    uint64_t n = 0;
    if (const auto* r = std::get_if<protocol::ResultBatch>(&m.body)) {
      n = r->results.size();
    } else if (const auto* rs = std::get_if<protocol::Results>(&m.body)) {
      for (const protocol::ResultBatch& b : rs->batches) n += b.results.size();
    }
    if (n == 0) return;
    const TimeMs bucket = now / kBurstBucketMs;
    if (bucket != burst_bucket_) {
      if (series_ != nullptr) WriteSeriesBucket();
      burst_bucket_ = bucket;
      burst_count_ = 0;
    }
    burst_count_ += n;
    peak_results_per_bucket_ = std::max(peak_results_per_bucket_, burst_count_);
  }

  // The bucket that ends, as a line of --series-file.
  void WriteSeriesBucket() {
    if (burst_bucket_ < 0) return;
    std::fprintf(series_, "%lld %llu\n",
                 static_cast<long long>(burst_bucket_ * kBurstBucketMs - started_),
                 static_cast<unsigned long long>(burst_count_));
  }

  Json Stats(TimeMs now) const {
    SimStats sum;
    size_t registered = 0;
    size_t actors = 0;
    int64_t iterations = 0;
    for (const Slot& s : slots_) {
      sum.Add(s.sim.stats());
      if (s.sim.registered()) ++registered;
      actors += s.sim.actor_count();
      iterations += s.sim.live_iterations();
    }
    Json commands = Json::object();
    for (const auto& [k, v] : sum.commands) commands[k] = v;
    const double elapsed_s = static_cast<double>(now - started_) / 1000.0;
    return Json{{"workers", slots_.size()},
                {"registered", registered},
                {"elapsed_s", elapsed_s},
                {"window", window_},
                {"window_s", static_cast<double>(now - window_started_) / 1000.0},
                {"live_actors", actors},
                {"live_iterations", iterations},
                {"connections", sum.connections},
                {"registrations", sum.registrations},
                {"silence_reconnects", sum.silence_reconnects},
                {"connection_cuts", sum.connection_cuts},
                {"disconnects_received", sum.disconnects_received},
                {"epoch_changes", sum.epoch_changes},
                {"commands", commands},
                {"coalesced_trains", sum.coalesced_trains},
                {"trains_in_acks", sum.trains_in_acks},
                {"results_sent", sum.results_sent},
                {"results_replayed", sum.results_replayed},
                {"results_acked", sum.results_acked},
                {"result_messages", sum.result_messages},
                {"results_acked_per_s", elapsed_s > 0 ? sum.results_acked / elapsed_s : 0.0},
                {"ack_latency_ms", Percentiles(std::move(sum.ack_latency_ms))},
                {"peak_results_per_100ms", peak_results_per_bucket_},
                {"timer_lateness_ms", Percentiles(timer_lateness_ms_)},
                {"max_head_silence_ms", sum.max_head_silence_ms},
                {"step_failures", sum.step_failures},
                {"refusals", sum.refusals},
                {"checkpoint_bytes_saved", sum.checkpoint_bytes_saved},
                {"restores", sum.restores},
                {"undecodable", undecodable_}};
  }

  void WriteStats(const Json& stats, const std::string& suffix = "") const {
    if (o_.stats_file.empty()) return;
    // Whole or not at all: a reader never sees half a document.
    const std::string path = o_.stats_file + suffix;
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << stats.dump(2) << "\n";
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
  }

  void Report(TimeMs now) {
    const Json stats = Stats(now);
    std::fprintf(stderr,
                 "fleet: %.0f s: %zu/%zu registered, %zu actors, %llu results acked, "
                 "ack p99 %s ms, head silence max %lld ms, %llu silence reconnects\n",
                 stats["elapsed_s"].get<double>(), stats["registered"].get<size_t>(), slots_.size(),
                 stats["live_actors"].get<size_t>(),
                 static_cast<unsigned long long>(stats["results_acked"].get<uint64_t>()),
                 stats["ack_latency_ms"].contains("p99")
                     ? stats["ack_latency_ms"]["p99"].dump().c_str()
                     : "-",
                 static_cast<long long>(stats["max_head_silence_ms"].get<int64_t>()),
                 static_cast<unsigned long long>(stats["silence_reconnects"].get<uint64_t>()));
    WriteStats(stats);
  }

  FleetOptions o_;
  std::mt19937_64 rng_;
  SteadyClock clock_;
  sockaddr_in address_{};
  CurveKeys curve_{};
  std::vector<Slot> slots_;
  static constexpr TimeMs kConnectRetryMs = 100;
  bool auth_warned_ = false;
  bool handshake_warned_ = false;
  int epoll_fd_ = -1;  // every open connection's socket; data: the slot index
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  TimeMs started_ = 0;
  TimeMs window_started_ = 0;  // ack latency and head silence are measured since
  int window_ = 0;             // windows started by SIGUSR1
  uint64_t undecodable_ = 0;
  static constexpr TimeMs kBurstBucketMs = 100;
  TimeMs burst_bucket_ = -1;
  uint64_t burst_count_ = 0;              // results sent in burst_bucket_
  uint64_t peak_results_per_bucket_ = 0;  // most in one bucket this window
  FILE* series_ = nullptr;                // --series-file, open for the run
  // How late each simulated worker's timer (a step's end, a heartbeat, a
  // reconnect) ran this window: the fleet's own delay on the shared cores,
  // which makes steps end later, and together, than simulated.
  std::vector<float> timer_lateness_ms_;
};

// Each connection needs descriptors on both sides; the default soft limit
// (often 1,024) is too few for a thousand workers.
void RaiseFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

}  // namespace
}  // namespace ztune::fleet

int main(int argc, char** argv) {
  using ztune::fleet::FleetOptions;
  FleetOptions o;
  CLI::App app{
      "fleet: simulated ztune-workers on one machine, each on its own connection to a real "
      "ztune-head, speaking docs/protocol.md. Prints JSON statistics at the end."};
  app.add_option("--head", o.head, "the head's worker endpoint");
  app.add_option("--workers", o.workers, "simulated workers (connections)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--cpus", o.cpus, "CPUs each worker registers")->check(CLI::Range(0.0, 100000.0));
  app.add_option("--gpus", o.gpus, "GPUs each worker registers")->check(CLI::Range(0.0, 10000.0));
  app.add_option("--step-ms", o.worker.step_ms, "simulated time of one training step")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
  app.add_option("--step-jitter", o.worker.step_jitter, "steps vary uniformly by +- this fraction")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--step-failure-rate", o.worker.step_failure_rate,
                 "probability that a step fails (the trial's attempt fails)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--checkpoint-bytes", o.worker.checkpoint_bytes,
                 "bytes of trainable data in every checkpoint (chunked above 256 KiB)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 32));
  app.add_flag("--refuse-reset", o.worker.refuse_reset, "answer RESET with reset=false");
  bool no_coalesce = false;
  app.add_flag("--no-coalesce", no_coalesce,
               "one message per TRAIN and per RESULT, as a worker without TRAINS/RESULTS");
  bool no_one_frame = false;
  app.add_flag("--no-one-frame", no_one_frame,
               "do not announce one_frame: every message goes as version, command and header "
               "frames");
  bool no_ack_trains = false;
  app.add_flag("--no-ack-trains", no_ack_trains,
               "do not announce ack_trains: every TRAIN comes in a TRAIN or TRAINS of its own");
  app.add_option("--name-prefix", o.name_prefix, "worker names are PREFIX0, PREFIX1, ...");
  app.add_option("--key", o.key_file, "the workers' key file (ztune keygen); one key for all");
  app.add_option("--head-key", o.head_key, "the head's public key, or a file holding it");
  app.add_flag("--insecure", o.insecure, "plain TCP (a head started with --insecure)");
  app.add_option("--heartbeat-ms", o.worker.heartbeat_ms,
                 "until the head's REGISTERED says otherwise")
      ->check(CLI::Range(int64_t{1}, int64_t{600'000}));
  app.add_option("--liveness", o.worker.liveness, "until the head's REGISTERED says otherwise")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  app.add_option("--max-backoff-ms", o.worker.max_backoff_ms, "cap of the reconnect backoff")
      ->check(CLI::Range(int64_t{1}, int64_t{600'000}));
  app.add_option("--duration-s", o.duration_s, "run this long, then leave (0: until SIGTERM)")
      ->check(CLI::Range(0.0, 1e7));
  app.add_option("--report-s", o.report_s, "progress line on stderr and stats file this often")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--stats-file", o.stats_file, "the JSON statistics, rewritten every --report-s");
  app.add_option("--series-file", o.series_file,
                 "write the results sent per 100 ms here, one line \"MS COUNT\" per 100 ms "
                 "that sent any, MS from the start");
  app.add_option("--seed", o.seed, "step times, failures and worker ids");
  CLI11_PARSE(app, argc, argv);
  o.worker.coalesce = !no_coalesce;
  o.worker.ack_trains = !no_ack_trains;
  o.worker.one_frame = !no_one_frame;
  if (!o.insecure && (o.key_file.empty() || o.head_key.empty())) {
    std::fprintf(stderr, "fleet: --key and --head-key are required (or --insecure)\n");
    return 2;
  }
  ztune::fleet::RaiseFileLimit();
  signal(SIGINT, ztune::fleet::OnSignal);
  signal(SIGTERM, ztune::fleet::OnSignal);
  signal(SIGUSR1, ztune::fleet::OnNewWindow);
  signal(SIGPIPE, SIG_IGN);
  return ztune::fleet::Fleet(std::move(o)).Run();
}
