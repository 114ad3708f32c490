// ztune: the command-line client of ztune-head (docs/cli.md). Parses flags,
// builds a HeadClient and runs one command from commands.h; nothing else.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/checkpoint_download.h"
#include "client/log_stream.h"
#include "client/commands.h"
#include "common/clock.h"
#include "common/did_you_mean.h"
#include "common/printable.h"
#include "common/logging.h"

namespace {

using ztune::client::CommandContext;

std::string DefaultHead() {
  const char* env = std::getenv("ZTUNE_HEAD");
  return (env != nullptr && *env != '\0') ? env : ztune::client::kDefaultHeadEndpoint;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// ~/.ztune/<name>, or "" without a home.
std::string InHome(const std::string& name) {
  const std::string home = Env("HOME");
  return home.empty() ? std::string() : home + "/.ztune/" + name;
}

// The flag's value, else the environment's, else `fallback` if that file exists.
std::string KeySource(const std::string& flag, const char* env, const std::string& fallback) {
  if (!flag.empty()) return flag;
  if (std::string e = Env(env); !e.empty()) return e;
  std::error_code ec;
  return !fallback.empty() && std::filesystem::exists(fallback, ec) ? fallback : std::string();
}

// The command word of argv (the first word that is neither an option nor the
// value of one of `app`'s options), or "" when there is none.
std::string CommandWord(const CLI::App& app, int argc, char** argv) {
  std::set<std::string> with_value;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_items_expected_min() == 0) continue;
    for (const auto& n : opt->get_lnames()) with_value.insert("--" + n);
    for (const auto& n : opt->get_snames()) with_value.insert("-" + n);
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") return i + 1 < argc ? argv[i + 1] : "";
    if (a.empty() || a[0] != '-') return a;
    if (a.find('=') == std::string::npos && with_value.count(a)) ++i;  // its value
  }
  return "";
}

// "unknown command 'X'" for a word that names no subcommand (CLI11 only says
// that a subcommand is required), with the nearest command if one is close.
bool ReportUnknownCommand(const CLI::App& app, int argc, char** argv) {
  const std::string word = CommandWord(app, argc, argv);
  if (word.empty()) return false;
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  if (std::find(names.begin(), names.end(), word) != names.end()) return false;
  std::cerr << "ztune: unknown command '" << ztune::EscapeControl(word) << "'"
            << ztune::DidYouMean(word, names) << "\nRun with --help for the commands.\n";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  namespace zc = ztune::client;
  // Diagnostics (if any) go to stderr; stdout carries command output only.
  ztune::InitLogging("warn", "ztune").IgnoreError();

  CLI::App app{"ztune: submit and inspect hyperparameter-tuning experiments on a ztune-head"};
  app.require_subcommand(1);
  app.fallthrough();

  zc::HeadClientOptions client_options;
  client_options.endpoint = DefaultHead();
  app.add_option("--head", client_options.endpoint,
                 "head client endpoint (env ZTUNE_HEAD, default tcp://127.0.0.1:7500)")
      ->capture_default_str();
  app.add_option("--timeout-ms", client_options.timeout_ms, "how long to wait for each reply")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  app.add_option("--retries", client_options.read_retries,
                 "resend read-only requests this many times after a timeout")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  std::string key_flag;
  std::string head_key_flag;
  bool insecure = false;
  app.add_option("--key", key_flag,
                 "this client's key pair (env ZTUNE_KEY, default ~/.ztune/client.key; make one "
                 "with `ztune keygen`)");
  app.add_option("--head-key", head_key_flag,
                 "the head's public key or a file holding it (env ZTUNE_HEAD_KEY, default "
                 "~/.ztune/head.pub)");
  app.add_flag("--insecure", insecure, "plain TCP, for a head started with --insecure");

  // The command chosen by the parse; runs after the client exists.
  std::function<int(const CommandContext&)> run;
  bool needs_head = true;

  // keygen
  std::string keygen_out;
  bool keygen_force = false;
  auto* keygen = app.add_subcommand(
      "keygen", "make a CURVE key pair for a client or a worker (no head needed)");
  keygen->add_option("--out", keygen_out,
                     "write OUT.key (secret, mode 0600) and OUT.pub (default ~/.ztune/client)");
  keygen->add_flag("--force", keygen_force, "overwrite an existing key pair");
  keygen->callback([&] {
    needs_head = false;
    run = [&](const CommandContext& ctx) {
      std::string out = keygen_out.empty() ? InHome("client") : keygen_out;
      if (out.empty()) {
        ctx.err << "ztune keygen: no HOME; pass --out\n";
        return zc::kExitUsage;
      }
      return zc::RunKeygen(ctx, out, keygen_force);
    };
  });

  // submit
  std::string spec_path, submit_working_dir;
  bool submit_json = false;
  auto* submit = app.add_subcommand("submit", "submit an experiment spec; prints its id");
  submit->add_option("SPEC", spec_path, "spec file (JSON object), - for stdin")->required();
  submit->add_flag("--json", submit_json, "print {experiment_id, total_trials}");
  submit->add_option("--working-dir", submit_working_dir,
                     "project directory of submitted code (spec \"trainable\": {\"python\": "
                     "\"FILE:NAME\"}): packed, uploaded once, run by workers started with "
                     "--allow-submitted-code");
  submit->callback([&] {
    run = [&](const CommandContext& ctx) {
      return zc::RunSubmit(ctx, spec_path, submit_json, submit_working_dir);
    };
  });

  // add-trial
  std::string add_exp, add_config, add_restore_from;
  bool add_json = false;
  auto* add = app.add_subcommand("add-trial", "add a trial with a given config; prints its id");
  add->add_option("EXP", add_exp, "experiment id")->required();
  add->add_option("CONFIG_JSON", add_config, "trial config, a JSON object literal")->required();
  add->add_flag("--json", add_json, "print {trial_id}");
  add->add_option("--restore-from", add_restore_from,
                  "start from this trial's newest persistent checkpoint");
  double add_wait_s = -1;
  add->add_option("--wait-s", add_wait_s,
                  "add it only into a free trial slot of the experiment (max_concurrent), "
                  "waiting up to this many seconds (at most 60) for one")
      ->check(CLI::Range(0.0, 60.0));
  add->callback([&] {
    run = [&](const CommandContext& ctx) {
      return zc::RunAddTrial(ctx, add_exp, add_config, add_json, add_restore_from, add_wait_s);
    };
  });

  // experiments
  bool experiments_json = false;
  auto* experiments = app.add_subcommand("experiments", "list experiments");
  experiments->add_flag("--json", experiments_json, "print {experiments}");
  experiments->callback([&] {
    run = [&](const CommandContext& ctx) { return zc::RunExperiments(ctx, experiments_json); };
  });

  // status
  std::string status_exp;
  zc::StatusOptions status_options;
  auto* status = app.add_subcommand("status", "progress report of one or all experiments");
  status->add_option("EXP", status_exp, "experiment id (default: all)");
  auto* status_json = status->add_flag("--json", status_options.json,
                                       "print {experiments, trials, resources, workers_alive}");
  status->add_flag("--all", status_options.all, "list every trial (default: at most 20 each)");
  status
      ->add_flag("-w,--watch", status_options.watch,
                 "refresh until the experiments finish (in place on a terminal)")
      ->excludes(status_json);
  status
      ->add_option("--interval", status_options.interval_s, "seconds between refreshes of --watch")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  status->callback([&] {
    run = [&](const CommandContext& ctx) { return zc::RunStatus(ctx, status_exp, status_options); };
  });

  // trials
  std::string trials_exp;
  bool trials_json = false;
  auto* trials = app.add_subcommand("trials", "list the trials of an experiment");
  trials->add_option("EXP", trials_exp, "experiment id")->required();
  trials->add_flag("--json", trials_json, "print {trials}");
  trials->callback([&] {
    run = [&](const CommandContext& ctx) { return zc::RunTrials(ctx, trials_exp, trials_json); };
  });

  // trial
  std::string trial_id;
  bool trial_json = false;
  auto* trial = app.add_subcommand("trial", "show one trial");
  trial->add_option("ID", trial_id, "trial id")->required();
  trial->add_flag("--json", trial_json, "print {trial}");
  trial->callback([&] {
    run = [&](const CommandContext& ctx) { return zc::RunTrial(ctx, trial_id, trial_json); };
  });

  // results
  std::string results_id;
  bool results_csv = false;
  bool results_json = false;
  auto* results = app.add_subcommand("results", "the results a trial reported");
  results->add_option("ID", results_id, "trial id")->required();
  auto* csv_flag = results->add_flag("--csv", results_csv, "CSV of every (flattened) field");
  results->add_flag("--json", results_json, "print {trial_id, results}")->excludes(csv_flag);
  results->callback([&] {
    run = [&](const CommandContext& ctx) {
      const zc::ResultsFormat format = results_json  ? zc::ResultsFormat::kJson
                                       : results_csv ? zc::ResultsFormat::kCsv
                                                     : zc::ResultsFormat::kTable;
      return zc::RunResults(ctx, results_id, format);
    };
  });

  // checkpoint
  std::string checkpoint_id;
  std::string checkpoint_out;
  int64_t checkpoint_iteration = -1;
  bool checkpoint_json = false;
  auto* checkpoint = app.add_subcommand(
      "checkpoint", "write a trial's checkpoint out as the directory its trainable saved");
  checkpoint->add_option("ID", checkpoint_id, "trial id")->required();
  checkpoint
      ->add_option("-o,--output", checkpoint_out, "directory to create (must be new or empty)")
      ->required();
  checkpoint->add_option("--iteration", checkpoint_iteration,
                         "the checkpoint taken at this iteration (default: the newest persistent "
                         "one)");
  checkpoint->add_flag("--json", checkpoint_json, "print what was written as JSON");
  checkpoint->callback([&] {
    run = [&](const CommandContext& ctx) {
      std::optional<int64_t> iteration;
      if (checkpoint_iteration >= 0) iteration = checkpoint_iteration;
      return zc::RunCheckpoint(ctx, checkpoint_id, iteration, checkpoint_out, checkpoint_json);
    };
  });

  // logs
  zc::LogsOptions logs_options;
  uint64_t logs_attempt = 0;
  auto* logs = app.add_subcommand(
      "logs", "a trial's output (stdout, or stderr), read from the workers that ran it");
  logs->add_option("ID", logs_options.trial_id, "trial id")->required();
  logs->add_flag("--stderr", logs_options.stderr_stream, "show stderr instead of stdout");
  logs->add_flag("-f,--follow", logs_options.follow,
                 "keep showing new output (and later attempts) until the trial has finished");
  logs->add_option("--attempt", logs_attempt, "only this attempt (default: every attempt)")
      ->check(CLI::PositiveNumber);
  logs->callback([&] {
    run = [&](const CommandContext& ctx) {
      if (logs_attempt > 0) logs_options.attempt = logs_attempt;
      return zc::RunLogs(ctx, logs_options);
    };
  });

  // workers
  bool workers_json = false;
  auto* workers = app.add_subcommand("workers", "list workers and their resources");
  workers->add_flag("--json", workers_json, "print {workers}");
  workers->callback(
      [&] { run = [&](const CommandContext& ctx) { return zc::RunWorkers(ctx, workers_json); }; });

  // head-stats
  bool head_stats_json = false;
  auto* head_stats = app.add_subcommand(
      "head-stats", "the head's counters and how long its loop's turns and results' waits take");
  head_stats->add_flag("--json", head_stats_json, "print {head}");
  head_stats->callback([&] {
    run = [&](const CommandContext& ctx) { return zc::RunHeadStats(ctx, head_stats_json); };
  });

  // stop
  std::string stop_id;
  bool stop_json = false;
  auto* stop = app.add_subcommand("stop", "stop an experiment or one trial");
  stop->add_option("ID", stop_id, "experiment id or trial id")->required();
  stop->add_flag("--json", stop_json, "print {stopped}");
  stop->callback([&] {
    run = [&](const CommandContext& ctx) { return zc::RunStop(ctx, stop_id, stop_json); };
  });

  // pause / resume
  std::string pause_id;
  bool pause_json = false;
  auto* pause = app.add_subcommand("pause", "pause a trial (memory checkpoint, frees its resources)");
  pause->add_option("TRIAL", pause_id, "trial id")->required();
  pause->add_flag("--json", pause_json, "print {trial_id, status}");
  pause->callback([&] {
    run = [&](const CommandContext& ctx) {
      return zc::RunPauseResume(ctx, "pause", pause_id, pause_json);
    };
  });
  std::string resume_id, resume_errored;
  bool resume_json = false, resume_no_unfinished = false;
  auto* resume = app.add_subcommand(
      "resume", "resume a paused trial, or apply resume policies to an experiment");
  resume->add_option("ID", resume_id, "trial id or experiment id")->required();
  resume->add_option("--errored", resume_errored,
                     "experiment: retry errored trials from their checkpoint (same id), or "
                     "restart them from scratch (new ids)")
      ->check(CLI::IsMember({"retry", "restart"}));
  resume->add_flag("--no-unfinished", resume_no_unfinished,
                   "experiment: terminate every unfinished trial instead of continuing it");
  resume->add_flag("--json", resume_json, "print the reply document");
  resume->callback([&] {
    run = [&](const CommandContext& ctx) {
      return zc::RunResume(ctx, resume_id, resume_errored, !resume_no_unfinished, resume_json);
    };
  });

  // export
  std::string export_exp;
  zc::ExportOptions export_options;
  std::string export_format = "csv";
  auto* export_cmd = app.add_subcommand(
      "export", "every result of every trial of an experiment, as CSV or JSON lines");
  export_cmd->add_option("EXP", export_exp, "experiment id")->required();
  export_cmd->add_option("--format", export_format, "csv (flattened columns) or jsonl")
      ->check(CLI::IsMember({"csv", "jsonl"}))
      ->capture_default_str();
  export_cmd->add_option("-o,--output", export_options.output,
                         "file to write (whole or not at all; default stdout)");
  export_cmd->callback([&] {
    export_options.format =
        export_format == "jsonl" ? zc::ExportFormat::kJsonl : zc::ExportFormat::kCsv;
    run = [&](const CommandContext& ctx) { return zc::RunExport(ctx, export_exp, export_options); };
  });

  // report
  std::string report_exp;
  std::string report_out;
  auto* report = app.add_subcommand(
      "report", "write an experiment's dashboard (trials table, plots) as one HTML file");
  report->add_option("EXP", report_exp, "experiment id")->required();
  report->add_option("-o,--output", report_out, "the HTML file to write")->required();
  report->callback([&] {
    run = [&](const CommandContext& ctx) { return zc::RunReport(ctx, report_exp, report_out); };
  });

  // dashboard
  bool dashboard_json = false;
  auto* dashboard = app.add_subcommand(
      "dashboard", "print a login link for the head's web dashboard (one browser, once)");
  dashboard->add_flag("--json", dashboard_json, "print {url, login, expires_in_s, user}");
  dashboard->callback([&] {
    run = [&](const CommandContext& ctx) { return zc::RunDashboard(ctx, dashboard_json); };
  });

  // wait
  std::string wait_exp;
  zc::WaitOptions wait_options;
  double wait_timeout_s = -1;
  auto* wait_cmd = app.add_subcommand("wait", "block until an experiment finishes");
  wait_cmd->add_option("EXP", wait_exp, "experiment id")->required();
  wait_cmd->add_option("--timeout", wait_timeout_s, "give up after S seconds (exit 4)")
      ->check(CLI::NonNegativeNumber);
  wait_cmd->add_option("--interval-ms", wait_options.interval_ms, "poll interval")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  wait_cmd->add_flag("--json", wait_options.json, "print the final ExperimentDoc");
  wait_cmd->callback([&] {
    if (wait_timeout_s >= 0) wait_options.timeout_s = wait_timeout_s;
    run = [&](const CommandContext& ctx) {
      return zc::RunWait(ctx, wait_exp, wait_options, ztune::SteadyClock());
    };
  });

  // CLI11 reports bad usage by exception; this is its seam.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0 && ReportUnknownCommand(app, argc, argv)) return zc::kExitUsage;
    const int rc = app.exit(e);
    return rc == 0 ? zc::kExitOk : zc::kExitUsage;
  }
  if (!run) return zc::kExitUsage;

  if (needs_head && !insecure) {
    auto keys = ztune::security::LoadCurveClientKeys(
        KeySource(key_flag, "ZTUNE_KEY", InHome("client.key")),
        KeySource(head_key_flag, "ZTUNE_HEAD_KEY", InHome("head.pub")));
    if (!keys.ok()) {
      std::cerr << "ztune: " << keys.status().message() << "\n";
      return zc::kExitUsage;
    }
    client_options.curve = std::move(keys).value();
  }
  zc::HeadClient client(client_options);
  const CommandContext ctx{client, std::cout, std::cerr, ::isatty(STDOUT_FILENO) == 1,
                           ::isatty(STDERR_FILENO) == 1};
  const int rc = run(ctx);
  std::cout.flush();
  return rc;
}
