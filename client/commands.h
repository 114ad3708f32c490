// The ztune subcommands (docs/cli.md), one function each. A command talks to
// the head through a HeadClient, writes its result to ctx.out and diagnostics
// to ctx.err, and returns the process exit code; main.cc only parses flags.
// Tests call these directly against a fake head. The read-only views
// (experiments, status, trials, trial, results, workers) live in
// view_commands.cc, the rest in commands.cc; both call the head through
// command_calls.h.
//
// Exit codes (stable, documented in docs/cli.md):
//   0 ok; 1 the head answered with an error; 2 usage or local input error
//   (nothing useful was sent); 3 head unreachable or no reply in time;
//   4 `wait` timed out before the experiment finished.
//
// Thread affinity: that of the HeadClient passed in.
#pragma once

#include <cstddef>
#include <optional>
#include <ostream>
#include <string>

#include "client/client.h"
#include "client/progress.h"
#include "client/results_export.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/status.h"

namespace ztune::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitHeadError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;
inline constexpr int kExitWaitTimeout = 4;

// Rows `status` shows per experiment unless --all.
inline constexpr size_t kDefaultMaxStatusRows = 20;

struct CommandContext {
  HeadClient& client;
  std::ostream& out;
  std::ostream& err;
  // Whether out / err are terminals: `status --watch` redraws in place and
  // `wait` draws a progress bar only there.
  bool out_is_terminal = false;
  bool err_is_terminal = false;
};

// Exit code for a failed Call: 1 if the head answered, 3 for Unavailable /
// TimedOut / IOError, 2 otherwise (bad endpoint, oversized request, ...).
int ExitCodeFor(const HeadClient& client, const Status& status);

// Writes the error line to ctx.err and returns ExitCodeFor(...). Head errors
// print "error: <Code>: <message>", local ones "error: <message>".
int ReportCallError(const CommandContext& ctx, const Status& status);

// The reply minus the envelope fields "rid" and "ok".
Json StripEnvelope(Json reply);

// ---- commands ----

// `ztune keygen`: writes OUT_BASE.key (mode 0600) and OUT_BASE.pub, and prints
// the public key with the allow-list lines that let it in.
int RunKeygen(const CommandContext& ctx, const std::string& out_base, bool overwrite);

// Reads SPEC_PATH ("-" = stdin), which must hold a JSON object, and submits it.
// Prints the experiment id (or {experiment_id, total_trials} with json).
// With `working_dir` (or a spec whose "working_dir" is a path, relative to
// the spec file's directory), the project is packed and uploaded first
// (client/project_upload.h) and the spec names it by its sha256.
int RunSubmit(const CommandContext& ctx, const std::string& spec_path, bool json,
              const std::string& working_dir = {});

// `config_text` must be a JSON object literal. With `restore_from` (a trial
// id) the new trial starts from that trial's newest persistent checkpoint.
// Prints the trial id (or {trial_id} with json).
// `wait_s` >= 0: only into a free trial slot, waiting up to that long on the head.
int RunAddTrial(const CommandContext& ctx, const std::string& experiment_id,
                const std::string& config_text, bool json, const std::string& restore_from = {},
                double wait_s = -1);

int RunExperiments(const CommandContext& ctx, bool json);

struct StatusOptions {
  bool json = false;
  // Show every trial row instead of at most max_rows per experiment.
  bool all = false;
  size_t max_rows = kDefaultMaxStatusRows;
  // Refresh every interval_s until every experiment shown has finished: in
  // place on a terminal, else a new report whenever anything but the ETA
  // changed. An unreachable head is reported and waited for.
  bool watch = false;
  double interval_s = 2.0;
  // For the Progress line's ETA (set by RunStatus; RenderStatus without it
  // shows no ETA): the estimator and the time of the reply, Unix seconds.
  EtaEstimator* eta = nullptr;
  double now_s = 0;
};

// `experiment_id` empty = every experiment. With options.watch, returns when
// every experiment shown has finished (0), or on a head error.
int RunStatus(const CommandContext& ctx, const std::string& experiment_id,
              const StatusOptions& options);
int RunTrials(const CommandContext& ctx, const std::string& experiment_id, bool json);
int RunTrial(const CommandContext& ctx, const std::string& trial_id, bool json);

enum class ResultsFormat { kTable, kCsv, kJson };
int RunResults(const CommandContext& ctx, const std::string& trial_id, ResultsFormat format);

int RunWorkers(const CommandContext& ctx, bool json);
// `ztune head-stats`: the head's counters and where its loop spends its turns.
int RunHeadStats(const CommandContext& ctx, bool json);

struct ExportOptions {
  ExportFormat format = ExportFormat::kCsv;
  // "" or "-" = stdout; a file is written whole or not at all.
  std::string output;
};

// `ztune export EXP`: one row per stored result of every trial (a trial with
// none gets one row), with trial_id, status and the config it trained with
// (client/results_export.h). Exit 2 when the output cannot be written.
int RunExport(const CommandContext& ctx, const std::string& experiment_id,
              const ExportOptions& options);

// `id` is an experiment id or a trial id. Prints the stopped trial ids, one a line.
int RunStop(const CommandContext& ctx, const std::string& id, bool json);

// Pauses (op "pause") or resumes (op "resume") one trial. A paused trial keeps
// a memory checkpoint and stays PAUSED until resumed. Prints "TRIAL STATUS".
int RunPauseResume(const CommandContext& ctx, const std::string& op, const std::string& trial_id,
                   bool json);

// `ztune resume ID`: a trial id resumes a paused trial; an experiment id
// applies Ray's resume policies (`errored` "retry" | "restart" | empty,
// `unfinished` false terminates what is left). Prints what changed.
int RunResume(const CommandContext& ctx, const std::string& id, const std::string& errored,
              bool unfinished, bool json);

struct WaitOptions {
  // Give up after this many seconds (exit 4); nullopt = wait forever.
  std::optional<double> timeout_s;
  int interval_ms = 1000;
  bool json = false;
};

// Polls `experiment` until finished. Exit 0 when finished (even if some trials
// ended in ERROR), 4 on timeout. With json prints the last ExperimentDoc seen.
// `clock` measures the timeout; the polling sleeps are real.
int RunWait(const CommandContext& ctx, const std::string& experiment_id, const WaitOptions& options,
            const Clock& clock);

// `ztune report EXP -o FILE`: the dashboard page (docs/dashboard.md) with the
// experiment, its trials and every trial's metric series, as one
// self-contained HTML file. Exit 2 when FILE cannot be written.
int RunReport(const CommandContext& ctx, const std::string& experiment_id,
              const std::string& output);

// `ztune dashboard`: a login link for the head's dashboard (or its URL when
// the dashboard is the open, loopback one), on stdout; what it is for on
// stderr. With json: {url, login, expires_in_s, user}.
int RunDashboard(const CommandContext& ctx, bool json);
// `url` with a wildcard host (0.0.0.0, [::]: the head binds every address)
// replaced by the host of `client_endpoint` (tcp://HOST:PORT), which reaches
// the same head; otherwise `url` unchanged.
std::string DashboardUrlFor(const std::string& url, const std::string& client_endpoint);

// ---- rendering (exposed for tests) ----

// The human `status` report for a `status` reply.
std::string RenderStatus(const Json& status_reply, const StatusOptions& options);

// "CPU 3/4, GPU 0/0[, name used/total ...]" from {used, total}.
std::string FormatResources(const Json& resources);

// The CSV for an array of result objects: header = union of flattened keys,
// training_iteration first, then sorted; one row per result.
std::string ResultsCsv(const Json& results);

}  // namespace ztune::client
