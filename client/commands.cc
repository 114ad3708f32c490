#include "client/commands.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "client/json_util.h"
#include "client/project_upload.h"
#include "client/table.h"
#include "common/printable.h"

#include "client/report.h"

namespace ztune::client {
namespace {

void PrintJson(std::ostream& out, const Json& j) { out << DumpJson(j, 2) << '\n'; }

// Calls `op`; on failure reports and sets *exit_code.
std::optional<Json> CallOrReport(const CommandContext& ctx, const std::string& op, Json args,
                                 int* exit_code) {
  Result<Json> r = ctx.client.Call(op, std::move(args));
  if (!r.ok()) {
    *exit_code = ReportCallError(ctx, r.status());
    return std::nullopt;
  }
  *exit_code = kExitOk;
  return std::move(r).value();
}

// A paged read (status, trials, results): asks for every page in turn and
// returns the last reply with `list_key` holding the items of all pages. The
// head answers each page between its commits and heartbeats.
std::optional<Json> CallAllPages(const CommandContext& ctx, const std::string& op, Json args,
                                 const char* list_key, int* exit_code) {
  std::optional<Json> merged;
  uint64_t offset = 0;
  while (true) {
    Json page_args = args;
    page_args["offset"] = offset;
    std::optional<Json> reply = CallOrReport(ctx, op, std::move(page_args), exit_code);
    if (!reply) return std::nullopt;
    Json items = (*reply)[list_key].is_array() ? (*reply)[list_key] : Json::array();
    // Read before the reply is moved from (a moved-from reply has no
    // next_offset, and every read stopped after its first page).
    const Json next = (*reply)["next_offset"];
    if (!merged) {
      merged = std::move(*reply);
    } else {
      for (auto& item : items) (*merged)[list_key].push_back(std::move(item));
      for (const char* key : {"experiments", "resources", "workers_alive"}) {
        if (reply->contains(key)) (*merged)[key] = std::move((*reply)[key]);
      }
    }
    if (!next.is_number_unsigned() || next.get<uint64_t>() <= offset) break;
    offset = next.get<uint64_t>();
  }
  for (const char* key : {"offset", "next_offset", "total"}) merged->erase(key);
  return merged;
}

// "16 trials: 4 RUNNING, 8 PENDING, 4 TERMINATED".
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
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
  } else {
    ctx.out << StringField(*reply, "experiment_id") << '\n';
  }
  return kExitOk;
}

int RunAddTrial(const CommandContext& ctx, const std::string& experiment_id,
                const std::string& config_text, bool json, const std::string& restore_from) {
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
  std::optional<Json> reply = CallOrReport(ctx, "add_trial", std::move(args), &code);
  if (!reply) return code;
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
  } else {
    ctx.out << StringField(*reply, "trial_id") << '\n';
  }
  return kExitOk;
}

int RunExperiments(const CommandContext& ctx, bool json) {
  int code = kExitOk;
  std::optional<Json> reply = CallOrReport(ctx, "experiments", Json::object(), &code);
  if (!reply) return code;
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
    return kExitOk;
  }
  const Json& experiments = ArrayField(*reply, "experiments");
  if (experiments.empty()) {
    ctx.out << "No experiments.\n";
    return kExitOk;
  }
  Table table({"Experiment", "name", "trainable", "status", "trials", "running", "pending",
               "paused", "terminated", "error", "best", "created"});
  for (const Json& e : experiments) {
    const Json& counts = ObjectField(e, "trial_counts");
    const std::string best = BestTrialText(e);
    table.AddRow(
        {StringField(e, "experiment_id", "?"), StringField(e, "name"), StringField(e, "trainable"),
         StringField(e, "status", "?"), std::to_string(IntField(e, "total_trials")),
         std::to_string(IntField(counts, "RUNNING")), std::to_string(IntField(counts, "PENDING")),
         std::to_string(IntField(counts, "PAUSED")), std::to_string(IntField(counts, "TERMINATED")),
         std::to_string(IntField(counts, "ERROR")), best.empty() ? "-" : best,
         FormatTime(FieldOrNull(e, "created_at"))});
  }
  table.Render(ctx.out);
  return kExitOk;
}

int RunStatus(const CommandContext& ctx, const std::string& experiment_id,
              const StatusOptions& options) {
  Json args = Json::object();
  if (!experiment_id.empty()) args["experiment_id"] = experiment_id;
  int code = kExitOk;
  std::optional<Json> reply = CallAllPages(ctx, "status", std::move(args), "trials", &code);
  if (!reply) return code;
  if (options.json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
  } else {
    ctx.out << RenderStatus(*reply, options);
  }
  return kExitOk;
}

int RunTrials(const CommandContext& ctx, const std::string& experiment_id, bool json) {
  int code = kExitOk;
  std::optional<Json> reply =
      CallAllPages(ctx, "trials", Json{{"experiment_id", experiment_id}}, "trials", &code);
  if (!reply) return code;
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
    return kExitOk;
  }
  const Json& trials = ArrayField(*reply, "trials");
  if (trials.empty()) {
    ctx.out << "No trials.\n";
    return kExitOk;
  }
  // The experiment names the metric column; without it fall back to "loss".
  Json experiment = Json::object();
  Result<Json> exp_reply = ctx.client.Call("experiment", Json{{"experiment_id", experiment_id}});
  if (exp_reply.ok()) experiment = ObjectField(*exp_reply, "experiment");
  std::vector<const Json*> rows;
  rows.reserve(trials.size());
  for (const Json& t : trials) rows.push_back(&t);
  TrialTable(rows, MetricColumn(experiment, trials), /*with_failures=*/true).Render(ctx.out);
  return kExitOk;
}

int RunTrial(const CommandContext& ctx, const std::string& trial_id, bool json) {
  int code = kExitOk;
  std::optional<Json> reply = CallOrReport(ctx, "trial", Json{{"trial_id", trial_id}}, &code);
  if (!reply) return code;
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
    return kExitOk;
  }
  const Json& t = ObjectField(*reply, "trial");
  auto field = [&](const char* key) {
    const Json* f = FindField(t, key);
    return f == nullptr ? std::string("-") : FormatCell(*f);
  };
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"trial_id", field("trial_id")},
      {"experiment_id", field("experiment_id")},
      {"status", field("status")},
      {"worker", field("worker")},
      {"attempt", field("attempt")},
      {"num_failures", field("num_failures")},
      {"iteration", field("iteration")},
      {"start_time", FormatTime(FieldOrNull(t, "start_time"))},
      {"end_time", FormatTime(FieldOrNull(t, "end_time"))},
      {"resources", field("resources")},
  };
  std::ostream& out = ctx.out;
  size_t width = 0;
  for (const auto& [k, v] : fields) width = std::max(width, k.size());
  for (const auto& [k, v] : fields) {
    out << k << ':' << std::string(width - k.size() + 2, ' ') << v << '\n';
  }

  out << "config:\n";
  std::map<std::string, Json> config = Flatten(ObjectField(t, "config"));
  if (config.empty()) out << "  (empty)\n";
  for (const auto& [k, v] : config) out << "  " << k << ": " << FormatCell(v) << '\n';

  out << "last_result:\n";
  const Json* last = FindField(t, "last_result");
  if (last == nullptr || !last->is_object()) {
    out << "  (none)\n";
  } else {
    for (const auto& [k, v] : Flatten(*last)) out << "  " << k << ": " << FormatCell(v) << '\n';
  }

  out << "checkpoints:\n";
  const Json& checkpoints = ArrayField(t, "checkpoints");
  if (checkpoints.empty()) {
    out << "  (none)\n";
  } else {
    Table ck({"id", "iteration", "storage"});
    for (const Json& c : checkpoints) {
      const Json* id = FindField(c, "id");
      ck.AddRow({id ? FormatCell(*id) : "?", std::to_string(IntField(c, "iteration")),
                 StringField(c, "storage", "-")});
    }
    std::istringstream lines(ck.ToString());
    for (std::string line; std::getline(lines, line);) out << "  " << line << '\n';
  }

  // What the experiment's scheduler keeps of the trial (ASHA's rungs,
  // HyperBand's bracket, PBT's score and times), and PBT's exploits.
  const Json* scheduler = FindField(t, "scheduler");
  if (scheduler != nullptr && scheduler->is_object()) {
    out << "scheduler:\n";
    for (const auto& [k, v] : Flatten(*scheduler))
      out << "  " << k << ": " << FormatCell(v) << '\n';
  }
  const Json* lineage = FindField(t, "exploits");
  if (lineage != nullptr && lineage->is_array() && !lineage->empty()) {
    out << "lineage (PBT exploits, oldest first):\n";
    Table lt({"iteration", "cloned", "at", "config change"});
    for (const Json& x : *lineage) {
      std::string change;
      const std::map<std::string, Json> before = Flatten(ObjectField(x, "old_config"));
      for (const auto& [k, v] : Flatten(ObjectField(x, "new_config"))) {
        auto old = before.find(k);
        if (old != before.end() && old->second == v) continue;
        if (!change.empty()) change += ", ";
        change += k + " " + (old == before.end() ? "-" : FormatCell(old->second)) + " -> " +
                  FormatCell(v);
      }
      lt.AddRow({std::to_string(IntField(x, "iteration")), StringField(x, "donor", "?"),
                 std::to_string(IntField(x, "donor_iteration")), change.empty() ? "-" : change});
    }
    std::istringstream lines(lt.ToString());
    for (std::string line; std::getline(lines, line);) out << "  " << line << '\n';
  }

  const std::string error = StringField(t, "error");
  out << "error:";
  if (error.empty()) {
    out << " -\n";
  } else {
    out << '\n';
    std::istringstream lines(error);
    for (std::string line; std::getline(lines, line);) out << "  " << EscapeControl(line) << '\n';
  }
  return kExitOk;
}

int RunResults(const CommandContext& ctx, const std::string& trial_id, ResultsFormat format) {
  int code = kExitOk;
  std::optional<Json> reply =
      CallAllPages(ctx, "results", Json{{"trial_id", trial_id}}, "results", &code);
  if (!reply) return code;
  if (format == ResultsFormat::kJson) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
    return kExitOk;
  }
  const Json& results = ArrayField(*reply, "results");
  if (format == ResultsFormat::kCsv) {
    ctx.out << ResultsCsv(results);
    return kExitOk;
  }
  if (results.empty()) {
    ctx.out << "No results.\n";
    return kExitOk;
  }
  // Auto-filled bookkeeping fields (and the echoed config) are left to --csv.
  static const std::set<std::string> kHidden = {"training_iteration",
                                                "trial_id",
                                                "timestamp",
                                                "date",
                                                "hostname",
                                                "pid",
                                                "node_ip",
                                                "done",
                                                "time_this_iter_s",
                                                "iterations_since_restore",
                                                "time_since_restore",
                                                "timesteps_since_restore",
                                                "experiment_id",
                                                "experiment_tag"};
  std::vector<std::map<std::string, Json>> rows;
  std::set<std::string> metrics;
  rows.reserve(results.size());
  for (const Json& r : results) {
    rows.push_back(Flatten(r));
    for (const auto& [k, v] : rows.back()) {
      if (kHidden.count(k) == 0 && k.rfind("config/", 0) != 0) metrics.insert(k);
    }
  }
  std::vector<std::string> columns;
  if (metrics.erase("time_total_s") != 0) columns.push_back("time_total_s");
  columns.insert(columns.end(), metrics.begin(), metrics.end());
  std::vector<std::string> headers = {"iter"};
  headers.insert(headers.end(), columns.begin(), columns.end());
  Table table(headers);
  for (const auto& row : rows) {
    auto it = row.find("training_iteration");
    std::vector<std::string> cells = {it == row.end() ? "?" : FormatCell(it->second)};
    for (const std::string& c : columns) {
      auto v = row.find(c);
      cells.push_back(v == row.end() ? "" : Cell(v->second));
    }
    table.AddRow(std::move(cells));
  }
  table.Render(ctx.out);
  return kExitOk;
}

int RunWorkers(const CommandContext& ctx, bool json) {
  int code = kExitOk;
  std::optional<Json> reply = CallOrReport(ctx, "workers", Json::object(), &code);
  if (!reply) return code;
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
    return kExitOk;
  }
  const Json& workers = ArrayField(*reply, "workers");
  if (workers.empty()) {
    ctx.out << "No workers.\n";
    return kExitOk;
  }
  Table table({"Worker", "name", "host", "pid", "alive", "CPU", "GPU", "other", "gpu_ids", "actors",
               "last_seen"});
  for (const Json& w : workers) {
    const Json& total = ObjectField(w, "resources_total");
    const Json& avail = ObjectField(w, "resources_available");
    // used = total - available, shown as used/total.
    Json used = Json::object();
    for (const auto& [k, v] : total.items()) {
      used[k] = AsNumber(v).value_or(0) - NumberField(avail, k).value_or(0);
    }
    auto usage = [&](const std::string& k) {
      return FormatAmount(NumberField(used, k).value_or(0)) + "/" +
             FormatAmount(NumberField(total, k).value_or(0));
    };
    std::string other;
    for (const auto& [k, v] : total.items()) {
      if (k == "CPU" || k == "GPU") continue;
      other += (other.empty() ? "" : ", ") + k + " " + usage(k);
    }
    const Json* gpu_ids = FindField(w, "gpu_ids");
    const int64_t seen_ms = IntField(w, "last_seen_ms_ago");
    table.AddRow(
        {StringField(w, "worker_id", "?"), StringField(w, "name"), StringField(w, "host"),
         std::to_string(IntField(w, "pid")), BoolField(w, "alive") ? "yes" : "no", usage("CPU"),
         usage("GPU"), other.empty() ? "-" : other,
         gpu_ids != nullptr && gpu_ids->is_array() && !gpu_ids->empty() ? DumpJson(*gpu_ids) : "-",
         std::to_string(IntField(w, "actors")),
         FormatNumber(static_cast<double>(seen_ms) / 1000.0) + "s ago"});
  }
  table.Render(ctx.out);
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

int RunWait(const CommandContext& ctx, const std::string& experiment_id, const WaitOptions& options,
            const Clock& clock) {
  const TimeMs start = clock.NowMs();
  const bool has_deadline = options.timeout_s.has_value();
  const TimeMs deadline =
      has_deadline ? start + static_cast<TimeMs>(options.timeout_s.value_or(0) * 1000.0) : 0;
  const int interval_ms = std::max(1, options.interval_ms);
  std::string last_progress;
  while (true) {
    int code = kExitOk;
    std::optional<Json> reply =
        CallOrReport(ctx, "experiment", Json{{"experiment_id", experiment_id}}, &code);
    if (!reply) return code;
    const Json& experiment = ObjectField(*reply, "experiment");
    const bool finished = BoolField(experiment, "finished");
    if (finished) {
      if (options.json) {
        PrintJson(ctx.out, experiment);
      } else {
        ctx.out << ExperimentLine(experiment) << '\n';
        const std::string best = BestTrialText(experiment);
        if (!best.empty()) ctx.out << "Best trial: " << best << '\n';
      }
      return kExitOk;
    }
    if (!options.json) {
      // Progress goes to stderr, once per change, so stdout stays the result.
      const std::string progress = ExperimentLine(experiment);
      if (progress != last_progress) ctx.err << progress << '\n';
      last_progress = progress;
    }
    TimeMs sleep_ms = interval_ms;
    if (has_deadline) {
      const TimeMs remaining = deadline - clock.NowMs();
      if (remaining <= 0) {
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
