// ztune-head: parses flags, opens the store, runs the HeadServer loop.
#include <algorithm>
#include <csignal>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "common/allocator.h"
#include "common/curve_buffers.h"
#include "common/logging.h"
#include "head/head_keys.h"
#include "head/dashboard_server.h"
#include "head/head_server.h"
#include "head/loop_reads.h"
#include "head/store_check.h"
#include "storage/rocksdb_store.h"

namespace {
std::atomic<bool> g_stop{false};
std::atomic<ztune::head::HeadServer*> g_server{nullptr};
void OnSignal(int) { g_stop.store(true); }
void OnHangUp(int) {
  if (auto* server = g_server.load()) server->RequestReload();
}

// Whether only this machine can reach `endpoint`: tcp on a loopback address,
// or ipc (guarded by file permissions).
bool IsLocalEndpoint(const std::string& endpoint) {
  if (endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://")) return true;
  if (!endpoint.starts_with("tcp://")) return false;
  std::string host = endpoint.substr(6);
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos) host.resize(colon);
  return host.starts_with("127.") || host == "localhost" || host == "[::1]" || host == "::1";
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ztune-head: owns experiments and drives trials on ztune workers"};
  std::string data_dir;
  ztune::head::HeadServerOptions options;
  std::string log_level = "info";
  bool check = false;
  bool check_json = false;
  app.add_flag("--check", check,
               "verify the data dir offline (records, results, checkpoints), print a summary, "
               "exit 0 if consistent, 1 if not");
  app.add_flag("--json", check_json, "with --check: print the summary as JSON");
  bool salvage = false;
  app.add_flag("--salvage", salvage,
               "make a damaged data dir that the head refuses openable again: copy it aside "
               "(DIR.damaged-<time>), keep what is readable, print what was lost, exit 0 if the "
               "store now opens, 1 if not")
      ->excludes("--check");
  int64_t force_cleanup_s = 600;
  app.add_option("--data-dir", data_dir, "RocksDB data directory (created if missing)")->required();
  app.add_option("--worker-endpoint", options.worker_endpoint, "ROUTER endpoint for workers")
      ->capture_default_str();
  app.add_option("--client-endpoint", options.client_endpoint, "ROUTER endpoint for clients")
      ->capture_default_str();
  app.add_option("--endpoints-file", options.endpoints_file,
                 "write the bound endpoints here as JSON (useful with port '*')");
  app.add_option("--heartbeat-ms", options.runner.heartbeat_ms, "heartbeat interval")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{5}, int64_t{600000}));
  app.add_option("--liveness", options.runner.liveness,
                 "missed heartbeats before a worker is declared dead")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  app.add_option("--max-pending-trials", options.runner.max_pending_trials,
                 "pending trials / staging groups at once (0 = auto: max(16, 1.1 x CPUs))")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pg-removal-delay-ms", options.runner.pg_removal_delay_ms,
                 "delay before an unused placement group is released")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--force-cleanup-s", force_cleanup_s,
                 "seconds an actor gets to stop before its worker kills it")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--reattach-grace-ms", options.runner.reattach_grace_ms,
                 "after a restart, how long RUNNING trials wait for their worker to re-attach "
                 "(0 = 2 x heartbeat-ms x liveness)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--train-with-ack-ms", options.runner.train_with_ack_ms,
                 "a trial whose last TRAIN took at least this long gets its next one after the "
                 "commit of the result, inside the ACK: one message instead of two to workers "
                 "that take it (0 = never)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
  app.add_option("--max-trials-per-experiment", options.runner.max_trials_per_experiment,
                 "most trials one experiment may have (grid x num_samples, plus added trials)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000'000}));
  app.add_option("--max-code-bytes", options.runner.code.max_code_bytes,
                 "largest submitted project archive (ztune submit --working-dir) this head "
                 "stores, in bytes")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  app.add_option("--max-checkpoint-bytes", options.max_checkpoint_bytes,
                 "largest checkpoint a worker may save, in bytes (kept as a file under "
                 "<data-dir>/checkpoint-files)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 50));
  int64_t warn_s = 60;
  app.add_option("--insufficient-resources-warn-s", warn_s,
                 "warn when no trial has run for this long while trials wait")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
  app.add_flag("--strict-invariants", options.runner.strict_invariants,
               "for tests: an illegal trial phase change or a broken trial invariant aborts the "
               "head (default: it is logged as an error and refused)");
  bool insecure = false;
  app.add_flag("--insecure", insecure,
               "plain TCP: no CURVE, no authentication, no encryption; anyone who reaches the "
               "endpoints can do anything (loopback only, unless --trust-network)");
  bool trust_network = false;
  app.add_flag("--trust-network", trust_network,
               "with --insecure: allow binding addresses other than loopback (the network is "
               "trusted)")
      ->needs("--insecure");
  std::string key_base;
  app.add_option(
      "--key-file", key_base,
      "the head's key pair (created at first start, mode 0600; default DATA_DIR/head.key)");
  std::string workers_allow;
  std::string clients_allow;
  app.add_option("--workers-allow", workers_allow,
                 "worker keys allowed to connect (default DATA_DIR/workers.allow; created empty)");
  app.add_option("--clients-allow", clients_allow,
                 "client keys allowed to connect, with roles (default DATA_DIR/clients.allow; "
                 "created empty)");
  // Budgets per connection; bursts are twice the per-second rate.
  double worker_messages_per_s = options.worker_limits.messages.per_second;
  double worker_mib_per_s = options.worker_limits.bytes.per_second / (1 << 20);
  double client_requests_per_s = options.client_limits.messages.per_second;
  double client_mib_per_s = options.client_limits.bytes.per_second / (1 << 20);
  app.add_option("--worker-messages-per-s", worker_messages_per_s,
                 "messages a second one worker connection may send, bursts of twice that; "
                 "beyond it the worker must register again (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--worker-mib-per-s", worker_mib_per_s,
                 "MiB a second one worker connection may send (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--client-requests-per-s", client_requests_per_s,
                 "requests a second one client connection may send, bursts of twice that; "
                 "beyond it requests are refused with a retry hint (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--client-mib-per-s", client_mib_per_s,
                 "MiB of requests a second one client connection may send (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--results-dir", options.results_dir,
                 "also write every stored result in Ray Tune's layout here: "
                 "EXPERIMENT/TRIAL/{params.json,result.json,progress.csv}, appended after each "
                 "commit (docs/results-dir.md)");
  std::string http_endpoint;
  app.add_option("--http-endpoint", http_endpoint,
                 "serve the read-only web dashboard on [HOST:]PORT (PORT 0 = any free port; "
                 "default: no dashboard). Loopback only, unless with --http-tls-cert");
  ztune::head::TlsFiles http_tls;
  auto* tls_cert_opt =
      app.add_option("--http-tls-cert", http_tls.cert_file,
                     "serve the dashboard over HTTPS with this PEM certificate (chain), on any "
                     "address, to browsers logged in with `ztune dashboard` links")
          ->needs("--http-endpoint");
  auto* tls_key_opt = app.add_option("--http-tls-key", http_tls.key_file,
                                     "the PEM private key of --http-tls-cert (mode 0600)");
  tls_cert_opt->needs(tls_key_opt);
  tls_key_opt->needs(tls_cert_opt);
  bool print_public_key = false;
  app.add_flag("--print-public-key", print_public_key,
               "print the head's public key (creating the key pair if there is none yet) and exit")
      ->excludes("--check")
      ->excludes("--salvage")
      ->excludes("--insecure");
  CLI11_PARSE(app, argc, argv);
  if (key_base.empty()) key_base = data_dir + "/" + ztune::head::kHeadKeyBase;
  if (workers_allow.empty()) workers_allow = data_dir + "/" + ztune::head::kWorkersAllowFile;
  if (clients_allow.empty()) clients_allow = data_dir + "/" + ztune::head::kClientsAllowFile;
  options.worker_limits = ztune::head::PeerLimits{
      {worker_messages_per_s, 2 * worker_messages_per_s},
      {worker_mib_per_s * (1 << 20), std::max(2 * worker_mib_per_s, 64.0) * (1 << 20)}};
  options.client_limits = ztune::head::PeerLimits{
      {client_requests_per_s, 2 * client_requests_per_s},
      {client_mib_per_s * (1 << 20), std::max(2 * client_mib_per_s, 32.0) * (1 << 20)}};
  options.runner.force_cleanup_ms = force_cleanup_s * 1000;
  options.runner.insufficient_resources_warn_ms = warn_s * 1000;
  // Room for a few uploads of the largest archive at once.
  options.runner.code.max_upload_bytes = 4 * options.runner.code.max_code_bytes;

  if (auto s = ztune::InitLogging(log_level, "head"); !s.ok()) {
    std::fprintf(stderr, "ztune-head: %s\n", s.message().c_str());
    return 2;
  }
  if (salvage) {
    auto report = ztune::storage::RocksDbStore::Salvage(data_dir);
    if (!report.ok()) {
      std::printf("%s: %s\n", data_dir.c_str(), report.status().ToString().c_str());
      return 1;
    }
    std::printf("%s", report->ToText().c_str());
    return 0;
  }
  if (insecure && !trust_network) {
    for (const std::string& endpoint : {options.worker_endpoint, options.client_endpoint}) {
      if (!IsLocalEndpoint(endpoint)) {
        std::fprintf(stderr,
                     "ztune-head: --insecure on %s would let anyone on the network control this "
                     "head and its workers; bind a loopback address, drop --insecure (CURVE), or "
                     "add --trust-network if the network really is trusted\n",
                     endpoint.c_str());
        return 2;
      }
    }
  }
  if (print_public_key) {
    // Without opening the store: it works while the head runs. A data
    // directory that does not exist yet is created for the key.
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(key_base).parent_path(), ec);
    auto pair = ztune::head::EnsureHeadKeyPair(key_base);
    if (!pair.ok()) {
      std::fprintf(stderr, "ztune-head: %s\n", pair.status().message().c_str());
      return 3;
    }
    std::printf("%s\n", pair->public_key.z85().c_str());
    return 0;
  }
  // --check opens read-only: it writes nothing, so it works on a full disk or
  // a read-only directory, and it never changes the store it judges.
  ztune::storage::RocksDbStoreOptions store_options;
  store_options.companion_files = ztune::head::HeadCompanionFiles();
  // Resumed once the head serves (below): a store a crash left with level-0
  // files to merge must not take a core from the start's parse of its trials.
  store_options.defer_compactions = true;
  // The start reads every trial record with checksums verified (its errors
  // name --salvage): the open need not read them first.
  store_options.read_trials_at_open = false;
  auto store = check ? ztune::storage::RocksDbStore::OpenReadOnly(data_dir)
                     : ztune::storage::RocksDbStore::Open(data_dir, store_options);
  if (!store.ok()) {
    spdlog::critical("cannot open data dir {}: {}", data_dir, store.status().ToString());
    return 3;
  }
  if (check) {
    if (auto s = (*store)->Verify(); !s.ok()) {
      std::printf("%s: %s\n", data_dir.c_str(), s.ToString().c_str());
      return 1;
    }
    auto report =
        ztune::head::CheckStore(**store, data_dir + "/" + ztune::head::kCheckpointFilesDir);
    if (!report.ok()) {
      std::printf("%s: %s\n", data_dir.c_str(), report.status().ToString().c_str());
      return 1;
    }
    if (check_json) {
      std::printf("%s\n", report->ToJson().dump(2).c_str());
    } else {
      std::printf("%s: %s\n", data_dir.c_str(), report->ToText().c_str());
    }
    return report->ok() ? 0 : 1;
  }
  spdlog::info("memory allocator: {}", ztune::AllocatorDescription());
  if (!insecure) {
    spdlog::info("CURVE buffers: {}", ztune::CurveBuffersDescription());
    auto pair = ztune::head::EnsureHeadKeyPair(key_base);
    if (!pair.ok()) {
      spdlog::critical("cannot start: {}", pair.status().ToString());
      return 4;
    }
    options.security = ztune::head::HeadSecurity{*pair, workers_allow, clients_allow};
  }
  options.checkpoint_dir = data_dir + "/" + ztune::head::kCheckpointFilesDir;
  // The dashboard is bound before the head starts, so that the endpoints
  // file names its URL; it serves once the head does.
  ztune::head::LoopReads loop_reads;
  std::unique_ptr<ztune::head::DashboardServer> dashboard;
  // With logins, a session's key is checked against the head's current
  // allow-list; the head exists before the dashboard serves.
  ztune::head::HeadServer* head_for_dashboard = nullptr;
  ztune::SteadyClock login_clock;
  ztune::head::DashboardLogins dashboard_logins(login_clock);
  const bool with_logins = !http_tls.cert_file.empty();
  if (!http_endpoint.empty()) {
    if (with_logins && insecure) {
      std::fprintf(stderr,
                   "ztune-head: --http-tls-cert: dashboard logins come from client keys, and "
                   "--insecure has none; drop --insecure\n");
      return 2;
    }
    auto endpoint = ztune::head::ParseHttpEndpoint(http_endpoint, with_logins);
    if (!endpoint.ok()) {
      std::fprintf(stderr, "ztune-head: %s\n", endpoint.status().message().c_str());
      return 2;
    }
    if (with_logins) {
      if (auto s = ztune::head::CheckDashboardTls(http_tls); !s.ok()) {
        std::fprintf(stderr, "ztune-head: %s\n", s.message().c_str());
        return 2;
      }
    }
    ztune::head::DashboardServerOptions dashboard_options;
    if (with_logins) {
      dashboard_options.login = ztune::head::DashboardLoginMode{
          http_tls, &dashboard_logins, [&head_for_dashboard](const std::string& key) {
            return head_for_dashboard != nullptr && head_for_dashboard->ClientKeyAllowed(key);
          }};
    }
    dashboard = std::make_unique<ztune::head::DashboardServer>(loop_reads, dashboard_options);
    if (auto s = dashboard->Bind(*endpoint); !s.ok()) {
      spdlog::critical("cannot start: {}", s.ToString());
      return 4;
    }
    options.http_url = dashboard->url();
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  zmq::context_t context(1);
  ztune::head::HeadServer server(context, **store, options);
  if (dashboard) server.SetLoopReads(&loop_reads);
  if (dashboard && with_logins) server.SetDashboardLogins(&dashboard_logins);
  head_for_dashboard = &server;
  g_server.store(&server);
  std::signal(SIGHUP, OnHangUp);
  if (auto s = server.Start(); !s.ok()) {
    spdlog::critical("cannot start: {}", s.ToString());
    // A damaged record or table found by the load is a corrupt store, as
    // when the open finds it (docs/recovery.md).
    return s.code() == ztune::StatusCode::kCorruption ? 3 : 4;
  }
  if (auto s = (*store)->ResumeCompactions(); !s.ok()) {
    spdlog::critical("cannot start: {}", s.ToString());
    return 4;
  }
  if (dashboard) {
    dashboard->Start();
    spdlog::info("dashboard at {}", dashboard->url());
  }
  auto s = server.Run(g_stop);
  if (dashboard) dashboard->Stop();
  std::signal(SIGHUP, SIG_IGN);
  g_server.store(nullptr);
  if (!s.ok()) {
    spdlog::critical("head stopped: {}", s.ToString());
    return 5;
  }
  spdlog::info("head stopped ({} turns, {} commits)", server.stats().turns, server.stats().commits);
  return 0;
}
