// ztune-worker: parses flags, wires the runtime, runs it. SIGINT/SIGTERM ask the
// runtime to shut down (DISCONNECT to the head, actors stopped), then exit 0.
// Exit codes: 0 after a requested shutdown, 1 on a runtime error, 2 on bad flags.
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/curve_buffers.h"
#include "common/logging.h"
#include "worker/actor_runner.h"
#include "worker/process_trainable.h"
#include "worker/process_trainable_config.h"
#include "worker/trainable_registry.h"
#include "worker/worker_options.h"
#include "worker/worker_runtime.h"

namespace {

std::atomic<ztune::worker::WorkerRuntime*> g_runtime{nullptr};

void OnSignal(int) {
  if (auto* r = g_runtime.load()) r->RequestShutdown();
}

std::string EnvOr(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

int BadFlags(const std::string& message) {
  std::cerr << "ztune-worker: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ztune;
  using namespace ztune::worker;

  CLI::App app{"ztune worker: hosts trial actors for a ztune head"};
  WorkerOptions options;
  double cpus = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t gpus = 0;
  std::string resources_json;
  std::string log_level = "info";
  app.add_option("--head", options.head_endpoint, "head worker endpoint, e.g. tcp://HOST:7501")
      ->required();
  app.add_option("--cpus", cpus, "CPUs to advertise (default: the machine's cores)");
  CLI::Option* gpus_flag = app.add_option(
      "--gpus", gpus,
      "GPUs to advertise (default: the devices CUDA_VISIBLE_DEVICES lists, else none); their "
      "ids are CUDA_VISIBLE_DEVICES' indices when it is set (the first N), else 0..N-1");
  app.add_option("--resources", resources_json,
                 "extra resources as a JSON object, e.g. {\"memory\": 8e9, \"custom\": 4}");
  app.add_option("--name", options.name, "worker name (default: hostname-pid)");
  app.add_option("--work-dir", options.work_dir,
                 "per-trial log directory (default: ./ztune-worker-<name>)");
  app.add_option("--heartbeat-ms", options.heartbeat_ms, "heartbeat interval until REGISTERED");
  app.add_option("--liveness", options.liveness, "missed heartbeats before reconnecting");
  app.add_option("--max-backoff-ms", options.max_backoff_ms, "reconnect backoff cap");
  app.add_option("--shutdown-grace-ms", options.shutdown_grace_ms,
                 "on SIGINT/SIGTERM, how long actors get to stop");
  std::string trainables_file;
  app.add_option("--trainables", trainables_file,
                 "JSON file of process trainables this worker may run: name -> {\"argv\": [...], "
                 "\"env\": {...}, \"cwd\": ..., \"stop_grace_s\": ...} "
                 "(docs/process-protocol.md)");
  app.add_flag("--allow-submitted-code", options.allow_submitted_code,
               "run the Python projects that clients with the submit role upload "
               "(spec \"trainable\": {\"python\": \"FILE:NAME\"}, ztune submit --working-dir); "
               "off by default: only --trainables and the built-ins run");
  app.add_option("--python", options.python,
                 "the interpreter for submitted code (needs the ztune SDK importable)")
      ->capture_default_str();
  app.add_option("--python-path", options.python_path,
                 "':'-separated directories put before PYTHONPATH for submitted code, e.g. "
                 "the SDK's <repo>/python when it is not installed");
  double submitted_grace_s = 5;
  app.add_option("--submitted-code-stop-grace-s", submitted_grace_s,
                 "submitted code: seconds between SIGTERM and SIGKILL at a stop")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off");
  std::string key_file = EnvOr("ZTUNE_WORKER_KEY");
  std::string head_key = EnvOr("ZTUNE_HEAD_KEY");
  bool insecure = false;
  app.add_option("--key", key_file,
                 "this worker's key pair, from `ztune keygen` (env ZTUNE_WORKER_KEY); its public "
                 "key must be in the head's workers allow-list");
  app.add_option("--head-key", head_key,
                 "the head's public key or a file holding it (env ZTUNE_HEAD_KEY; "
                 "`ztune-head --print-public-key` prints it)");
  app.add_flag("--insecure", insecure, "plain TCP, for a head started with --insecure");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  options.submitted_code_stop_grace_ms = static_cast<int64_t>(submitted_grace_s * 1000);
  // The child starts in its trial's directory: a relative interpreter or
  // PYTHONPATH entry would be looked up there, not where the operator meant.
  if (options.python.find('/') != std::string::npos) {
    options.python = std::filesystem::absolute(options.python).lexically_normal().string();
  }
  {
    std::string absolute;
    std::stringstream parts(options.python_path);
    for (std::string part; std::getline(parts, part, ':');) {
      if (part.empty()) continue;
      absolute += (absolute.empty() ? "" : ":") +
                  std::filesystem::absolute(part).lexically_normal().string();
    }
    options.python_path = absolute;
  }
  if (options.name.empty()) options.name = DefaultWorkerName();
  if (options.work_dir.empty()) options.work_dir = "./ztune-worker-" + options.name;
  auto extra = ParseExtraResources(resources_json);
  if (!extra.ok()) return BadFlags(extra.status().message());
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  auto gpu_ids =
      GpuIds(gpus_flag->count() > 0 ? std::optional<int64_t>(gpus) : std::nullopt,
             visible == nullptr ? std::nullopt : std::optional<std::string_view>(visible));
  if (!gpu_ids.ok()) return BadFlags(gpu_ids.status().message());
  options.gpu_ids = std::move(gpu_ids).value();
  auto resources = BuildResources(cpus, static_cast<int64_t>(options.gpu_ids.size()), *extra);
  if (!resources.ok()) return BadFlags(resources.status().message());
  options.resources = *resources;
  if (!insecure) {
    auto keys = security::LoadCurveClientKeys(key_file, head_key);
    if (!keys.ok()) return BadFlags(keys.status().message());
    options.curve = std::move(keys).value();
  }
  if (Status s = ValidateOptions(options); !s.ok()) return BadFlags(s.message());
  std::error_code ec;
  std::filesystem::create_directories(options.work_dir, ec);
  if (ec) return BadFlags("cannot create --work-dir " + options.work_dir + ": " + ec.message());
  if (Status s = InitLogging(log_level, "worker"); !s.ok()) return BadFlags(s.message());

  TrainableRegistry registry;
  RegisterBuiltinTrainables(registry);
  if (!trainables_file.empty()) {
    auto specs = LoadProcessTrainables(trainables_file);
    if (!specs.ok()) return BadFlags(specs.status().message());
    for (auto& spec : *specs) {
      const std::string name = spec.name;
      Status s = registry.Register(
          name, [spec] { return std::make_unique<ProcessTrainable>(spec); }, spec.export_formats);
      if (!s.ok()) {
        return BadFlags(trainables_file + ": trainable '" + name + "': " + s.message() +
                        " (built-ins: noop, quadratic, sleep, fail, blob)");
      }
    }
    spdlog::info("hosting {} process trainable(s) from {}", specs->size(), trainables_file);
  }
  if (options.allow_submitted_code) {
    spdlog::warn(
        "--allow-submitted-code: this worker runs the code clients with the submit "
        "role upload, as its own user ({})",
        options.python);
  }
  if (options.curve) spdlog::info("CURVE buffers: {}", ztune::CurveBuffersDescription());
  SteadyClock clock;
  zmq::context_t context(1);
  int code = 0;
  {
    WorkerRuntime runtime(context, registry, options, clock);
    g_runtime.store(&runtime);
    struct sigaction sa{};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    Status s = runtime.Run();
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    g_runtime.store(nullptr);
    if (!s.ok()) {
      spdlog::error("worker failed: {}", s.ToString());
      code = s.code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
  }
  if (ActorRunner::RunningThreads() > 0) {
    // An abandoned actor is still inside user code: do not run static
    // destructors under it.
    spdlog::warn("{} abandoned actor thread(s) still running; exiting now",
                 ActorRunner::RunningThreads());
    spdlog::default_logger()->flush();
    std::_Exit(code);
  }
  return code;
}
