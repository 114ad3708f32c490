#include "client/commands.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "client/command_calls.h"
#include "client/json_util.h"
#include "client/project_upload.h"
#include "common/printable.h"

#include "client/report.h"

namespace ztune::client {
namespace {

// The bytes of `path` ("-": standard input).
Result<std::string> ReadWholeFile(const std::string& path) {
  if (path == "-") {
    std::string data((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (std::cin.bad()) return Status::IOError("cannot read standard input");
    return data;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Status::IOError("cannot read " + path);
  return buf.str();
}

}  // namespace

int ExitCodeFor(const HeadClient& client, const Status& status) {
  if (status.ok()) return kExitOk;
  if (client.head_answered()) return kExitHeadError;
  switch (status.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kTimedOut:
    case StatusCode::kIOError:
      return kExitUnreachable;
    case StatusCode::kPermissionDenied:  // the head refused this client's key
      return kExitHeadError;
    default:
      return kExitUsage;
  }
}

int ReportCallError(const CommandContext& ctx, const Status& status) {
  if (ctx.client.head_answered()) {
    ctx.err << "error: " << StatusCodeName(status.code()) << ": "
            << EscapeControl(status.message(), Newlines::kKeep) << '\n';
  } else {
    ctx.err << "error: " << EscapeControl(status.message(), Newlines::kKeep) << '\n';
  }
  return ExitCodeFor(ctx.client, status);
}

int RunKeygen(const CommandContext& ctx, const std::string& out_base, bool overwrite) {
  auto pair = security::GenerateKeyPair();
  if (!pair.ok()) {
    ctx.err << "error: " << pair.status().message() << '\n';
    return kExitUsage;
  }
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(out_base).parent_path();
  if (!parent.empty() && !std::filesystem::exists(parent, ec)) {
    std::filesystem::create_directories(parent, ec);
    if (!ec) {
      std::filesystem::permissions(parent, std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::replace, ec);
    }
  }
  if (Status s = security::WriteKeyPairFiles(out_base, *pair, overwrite); !s.ok()) {
    ctx.err << "error: " << s.message()
            << (s.code() == StatusCode::kAlreadyExists ? " (--force replaces it)" : "") << '\n';
    return kExitUsage;
  }
  const std::string& key = pair->public_key.z85();
  ctx.out << "wrote " << security::SecretKeyPath(out_base) << " (secret, mode 0600) and "
          << security::PublicKeyPath(out_base) << "\n"
          << "public key: " << key << "\n"
          << "To let it in, add one line on the head, then `kill -HUP <head pid>`:\n"
          << "  a client: " << key << " submit NAME   >> DATA_DIR/clients.allow"
          << "   (role read, submit or admin)\n"
          << "  a worker: " << key << " NAME          >> DATA_DIR/workers.allow\n";
  return kExitOk;
}

Json StripEnvelope(Json reply) {
  if (reply.is_object()) {
    reply.erase("rid");
    reply.erase("ok");
  }
  return reply;
}


// ---- commands ----

int RunSubmit(const CommandContext& ctx, const std::string& spec_path, bool json,
              const std::string& working_dir) {
  Result<std::string> text = ReadWholeFile(spec_path);
  if (!text.ok()) {
    ctx.err << "error: cannot read spec file: " << text.status().message() << '\n';
    return kExitUsage;
  }
  Result<Json> spec = ParseJson(*text);
  if (!spec.ok()) {
    ctx.err << "error: spec file " << spec_path << " is not valid JSON: " << spec.status().message()
            << '\n';
    return kExitUsage;
  }
  if (!spec->is_object()) {
    ctx.err << "error: spec file " << spec_path << " must hold a JSON object, not "
            << spec->type_name() << '\n';
    return kExitUsage;
  }
  // The project: --working-dir, or a path in the spec (relative to the spec
  // file), as Ray's runtime_env working_dir; "sha256:..." is already uploaded.
  std::string project = working_dir;
  if (project.empty()) {
    auto w = spec->find("working_dir");
    if (w != spec->end() && w->is_string() && w->get<std::string>().rfind("sha256:", 0) != 0) {
      project = w->get<std::string>();
      if (!project.empty() && project[0] != '/' && spec_path != "-") {
        project = (std::filesystem::path(spec_path).parent_path() / project).string();
      }
    }
  }
  int code = kExitOk;
  if (!project.empty()) {
    Result<PackedProject> packed = PackProject(project, kMaxProjectBytes);
    if (!packed.ok()) {
      ctx.err << "error: " << packed.status().message() << '\n';
      return kExitUsage;
    }
    Result<UploadStats> uploaded = UploadProject(ctx.client, *packed);
    if (!uploaded.ok()) {
      return ReportCallError(
          ctx, Status(uploaded.status().code(),
                      "cannot upload " + project + ": " + uploaded.status().message()));
    }
    ctx.err << "project " << project << ": sha256:" << packed->sha256.substr(0, 12) << " ("
            << packed->bytes.size() << " bytes, "
            << (uploaded->already_stored ? "already on the head" : "uploaded") << ")\n";
    (*spec)["working_dir"] = "sha256:" + packed->sha256;
  }
  std::optional<Json> reply = CallOrReport(ctx, "submit", Json{{"spec", std::move(*spec)}}, &code);
  if (!reply) return code;
  if (const Json* w = FindField(*reply, "warnings"); w != nullptr && w->is_array()) {
    for (const Json& text : *w) {
      if (text.is_string())
        ctx.err << "warning: " << EscapeControl(text.get<std::string>()) << '\n';
    }
  }
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
  } else {
    ctx.out << StringField(*reply, "experiment_id") << '\n';
  }
  return kExitOk;
}

int RunAddTrial(const CommandContext& ctx, const std::string& experiment_id,
                const std::string& config_text, bool json, const std::string& restore_from,
                double wait_s) {
  Result<Json> config = ParseJson(config_text);
  if (!config.ok()) {
    ctx.err << "error: CONFIG_JSON is not valid JSON: " << config.status().message() << '\n';
    return kExitUsage;
  }
  if (!config->is_object()) {
    ctx.err << "error: CONFIG_JSON must be a JSON object, not " << config->type_name() << '\n';
    return kExitUsage;
  }
  int code = kExitOk;
  Json args{{"experiment_id", experiment_id}, {"config", std::move(*config)}};
  if (!restore_from.empty()) args["restore_from"] = restore_from;
  if (wait_s >= 0) args["wait_ms"] = static_cast<uint64_t>(wait_s * 1000 + 0.5);
  std::optional<Json> reply = CallOrReport(ctx, "add_trial", std::move(args), &code);
  if (!reply) return code;
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
  } else {
    ctx.out << StringField(*reply, "trial_id") << '\n';
  }
  return kExitOk;
}

int RunStop(const CommandContext& ctx, const std::string& id, bool json) {
  int code = kExitOk;
  std::optional<Json> reply = CallOrReport(ctx, "stop", Json{{"id", id}}, &code);
  if (!reply) return code;
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
    return kExitOk;
  }
  const Json& stopped = ArrayField(*reply, "stopped");
  if (stopped.empty()) ctx.err << "nothing to stop: no live trials under " << id << '\n';
  for (const Json& t : stopped) ctx.out << FormatCell(t) << '\n';
  return kExitOk;
}

int RunPauseResume(const CommandContext& ctx, const std::string& op, const std::string& trial_id,
                   bool json) {
  int code = kExitOk;
  std::optional<Json> reply = CallOrReport(ctx, op, Json{{"trial_id", trial_id}}, &code);
  if (!reply) return code;
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
    return kExitOk;
  }
  ctx.out << trial_id << ' ' << FormatCell((*reply)["status"]) << '\n';
  return kExitOk;
}

int RunResume(const CommandContext& ctx, const std::string& id, const std::string& errored,
              bool unfinished, bool json) {
  if (!errored.empty() && errored != "retry" && errored != "restart") {
    ctx.err << "error: --errored must be retry or restart\n";
    return kExitUsage;
  }
  Json args{{"id", id}, {"unfinished", unfinished}};
  if (!errored.empty()) args["errored"] = errored;
  int code = kExitOk;
  std::optional<Json> reply = CallOrReport(ctx, "resume", std::move(args), &code);
  if (!reply) return code;
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
    return kExitOk;
  }
  if (reply->contains("status")) {  // a trial
    ctx.out << id << ' ' << FormatCell((*reply)["status"]) << '\n';
    return kExitOk;
  }
  for (const Json& t : ArrayField(*reply, "retried")) ctx.out << "retried " << FormatCell(t) << '\n';
  for (const Json& t : ArrayField(*reply, "restarted")) {
    ctx.out << "restarted " << FormatCell(t["from"]) << " as " << FormatCell(t["trial_id"]) << '\n';
  }
  for (const Json& t : ArrayField(*reply, "terminated")) {
    ctx.out << "terminated " << FormatCell(t) << '\n';
  }
  return kExitOk;
}

namespace {

// The experiment's doc and, when a progress bar is drawn and the experiment
// has an iteration budget, its trials (one paged `status` read instead of
// `experiment`). Errors are reported on ctx.err.
std::optional<Json> ReadForWait(const CommandContext& ctx, const std::string& experiment_id,
                                bool with_trials, Json* trials, int* code) {
  if (with_trials) {
    std::optional<Json> reply =
        CallAllPages(ctx, "status", Json{{"experiment_id", experiment_id}}, "trials", code);
    if (!reply) return std::nullopt;
    const Json& experiments = ArrayField(*reply, "experiments");
    if (!experiments.empty()) {
      *trials = std::move((*reply)["trials"]);
      return experiments.front();
    }
  }
  std::optional<Json> reply =
      CallOrReport(ctx, "experiment", Json{{"experiment_id", experiment_id}}, code);
  if (!reply) return std::nullopt;
  return ObjectField(*reply, "experiment");
}

}  // namespace

int RunWait(const CommandContext& ctx, const std::string& experiment_id, const WaitOptions& options,
            const Clock& clock) {
  const TimeMs start = clock.NowMs();
  const bool has_deadline = options.timeout_s.has_value();
  const TimeMs deadline =
      has_deadline ? start + static_cast<TimeMs>(options.timeout_s.value_or(0) * 1000.0) : 0;
  const int interval_ms = std::max(1, options.interval_ms);
  // On a terminal, progress is one bar redrawn in place on stderr.
  const bool bar = ctx.err_is_terminal && !options.json;
  bool bar_drawn = false;
  bool with_trials = false;  // learnt from the first reply: a budget to count iterations of
  EtaEstimator eta;
  std::string last_progress;
  auto end_bar = [&] {
    if (bar_drawn) ctx.err << '\n';
    bar_drawn = false;
  };
  while (true) {
    int code = kExitOk;
    Json trials = Json::array();
    std::optional<Json> read = ReadForWait(ctx, experiment_id, with_trials, &trials, &code);
    if (!read) {
      end_bar();
      return code;
    }
    const Json& experiment = *read;
    if (bar && !with_trials && IterationBudget(experiment).has_value()) {
      with_trials = true;
      continue;  // read again, with the trials
    }
    const bool finished = BoolField(experiment, "finished");
    if (bar) {
      std::vector<const Json*> rows;
      for (const Json& t : trials) rows.push_back(&t);
      const Progress progress = MeasureProgress(experiment, with_trials ? &rows : nullptr);
      const std::optional<double> left =
          eta.Observe(experiment_id, progress.Fraction(),
                      NumberField(experiment, "created_at").value_or(0), WallSeconds());
      ctx.err << '\r' << experiment_id << ' ' << ProgressText(progress, left) << "\x1b[K"
              << std::flush;
      bar_drawn = true;
    }
    if (finished) {
      end_bar();
      if (options.json) {
        PrintJson(ctx.out, experiment);
      } else {
        ctx.out << ExperimentLine(experiment) << '\n';
        const std::string best = BestTrialText(experiment);
        if (!best.empty()) ctx.out << "Best trial: " << best << '\n';
      }
      return kExitOk;
    }
    if (!options.json && !bar) {
      // Progress goes to stderr, once per change, so stdout stays the result.
      const std::string progress = ExperimentLine(experiment);
      if (progress != last_progress) ctx.err << progress << '\n';
      last_progress = progress;
    }
    TimeMs sleep_ms = interval_ms;
    if (has_deadline) {
      const TimeMs remaining = deadline - clock.NowMs();
      if (remaining <= 0) {
        end_bar();
        ctx.err << "error: experiment " << experiment_id << " not finished after "
                << FormatNumber(options.timeout_s.value_or(0)) << " s ("
                << TrialCountsText(experiment) << ")\n";
        if (options.json) PrintJson(ctx.out, experiment);
        return kExitWaitTimeout;
      }
      sleep_ms = std::min(sleep_ms, remaining);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  }
}

}  // namespace ztune::client
