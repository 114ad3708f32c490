// Worker configuration and the flag-level helpers main.cc uses to build it.
// Plain values and pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/security/curve_socket.h"
#include "common/status.h"

namespace ztune::worker {

struct WorkerOptions {
  std::string head_endpoint;  // e.g. tcp://127.0.0.1:7501
  // The head's public key and this worker's key pair; nullopt: plain TCP
  // (a head started with --insecure).
  std::optional<security::CurveClientKeys> curve;
  std::string name;           // human name; the worker id is derived from it
  // Stable for the process lifetime; empty = MakeWorkerId(name).
  std::string worker_id;
  std::string work_dir;                     // per-trial directories live here
  std::map<std::string, double> resources;  // advertised totals: CPU, GPU, custom
  std::vector<int64_t> gpu_ids;             // device ids behind GPU
  // Until REGISTERED says otherwise: heartbeat interval and missed-interval
  // count after which the head is presumed gone (Paranoid Pirate).
  int64_t heartbeat_ms = 1000;
  int64_t liveness = 3;
  // Reconnect backoff starts at the heartbeat interval and doubles up to this.
  // Kept well below the head's default re-attach grace (2 x heartbeat x
  // liveness = 6 s), so that a worker finds a restarted head in time to
  // re-attach its actors.
  int64_t max_backoff_ms = 2000;
  // On shutdown, how long actors get to finish their current command and Cleanup.
  int64_t shutdown_grace_ms = 5000;
  // Result batches for a head that takes RESULTS (docs/protocol.md §4.12)
  // are coalesced until the first of them has waited this long (or the
  // loop's pass ends). Tests set it to make coalescing deterministic.
  int64_t coalesce_wait_us = 200;
  // Submitted code (docs/process-protocol.md "Submitted code"): off unless
  // the operator opts in. When on, the worker advertises
  // protocol::kSubmittedPythonTrainable and runs `<python> -m ztune.entry
  // FILE:NAME` in the uploaded project, with `python_path` (':'-separated,
  // e.g. where the ztune SDK lives when it is not installed) before the
  // inherited PYTHONPATH.
  bool allow_submitted_code = false;
  std::string python = "python3";
  std::string python_path;
  int64_t submitted_code_stop_grace_ms = 5000;
};

// "<hostname>-<pid>".
std::string DefaultWorkerName();

// "<name>-<8 random hex digits>".
std::string MakeWorkerId(const std::string& name);

// The machine's host name ("localhost" if unknown).
std::string HostName();

// Parses --resources: a JSON object of extra resource totals, e.g.
// {"memory": 8e9, "custom": 4}. InvalidArgument (naming the problem) for bad
// JSON, a non-object, empty names, non-numeric, negative or non-finite amounts,
// or CPU/GPU (those have their own flags).
Result<std::map<std::string, double>> ParseExtraResources(const std::string& json_text);

// The advertised resources: CPU = cpus, GPU = gpus (when > 0), plus `extra`.
// InvalidArgument for negative counts.
Result<std::map<std::string, double>> BuildResources(double cpus, int64_t gpus,
                                                     const std::map<std::string, double>& extra);

// The device ids behind GPU. `gpus` is --gpus (nullopt when not given),
// `visible` the worker's own CUDA_VISIBLE_DEVICES (nullopt when unset).
// Unset, or Slurm's "NoDevFiles" (a GRES without device files): 0 .. gpus-1,
// none without --gpus. Otherwise the devices this process may use, as Ray
// reads them (a Slurm step or a job script sets them, and on a shared node
// they need not start at 0): comma-separated
// indices, "" and "-1" listing none; all of them, or the first `gpus` when
// --gpus is given. InvalidArgument for a negative --gpus, more --gpus than
// listed devices, and an entry that is not an index (a UUID: ids are
// handed to trials as indices) or repeats.
Result<std::vector<int64_t>> GpuIds(std::optional<int64_t> gpus,
                                    std::optional<std::string_view> visible);

// Checks ranges (heartbeat_ms >= 1, liveness >= 1, max_backoff_ms >= 1,
// non-empty endpoint and name). InvalidArgument naming the field.
Status ValidateOptions(const WorkerOptions& options);

}  // namespace ztune::worker
