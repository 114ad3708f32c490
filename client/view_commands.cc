// The read-only views of ztune (docs/cli.md): experiments, status, trials,
// trial, results, workers. Each reads from the head (every page of a paged
// read) and renders a table or key/value listing, or the reply as JSON.
#include <algorithm>
#include <chrono>
#include <thread>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "client/command_calls.h"
#include "client/commands.h"
#include "client/json_util.h"
#include "client/report.h"
#include "client/table.h"
#include "common/clock.h"
#include "common/printable.h"

namespace ztune::client {

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

namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool AllFinished(const Json& status_reply) {
  for (const Json& e : ArrayField(status_reply, "experiments")) {
    if (!BoolField(e, "finished")) return false;
  }
  return true;
}

// Draws `text` over the previous frame: cursor home, every line cleared to
// its end, then the rest of the screen (a shorter frame leaves nothing behind).
void Redraw(std::ostream& out, const std::string& text) {
  std::string frame = "\x1b[H";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) frame += line + "\x1b[K\n";
  frame += "\x1b[J";
  out << frame << std::flush;
}

// `status --watch`: see StatusOptions::watch.
int WatchStatus(const CommandContext& ctx, const std::string& experiment_id,
                const StatusOptions& options) {
  EtaEstimator eta;
  StatusOptions render = options;
  render.eta = &eta;
  StatusOptions plain = options;  // no ETA: what decides whether a plain report is new
  const std::string title = "ztune status" + (experiment_id.empty() ? "" : " " + experiment_id) +
                            " \u00b7 every " + FormatNumber(options.interval_s) + " s";
  const bool terminal = ctx.out_is_terminal;
  if (terminal) ctx.out << "\x1b[2J";
  std::string last_plain;
  std::string last_problem;
  std::string last_frame;
  const auto interval = std::chrono::duration<double>(std::max(0.001, options.interval_s));
  while (true) {
    Json args = Json::object();
    if (!experiment_id.empty()) args["experiment_id"] = experiment_id;
    // Errors are held back: an unreachable head (restarting, say) is shown
    // and waited for; anything else ends the watch with its message.
    std::ostringstream problem;
    const CommandContext quiet{ctx.client, ctx.out, problem};
    int code = kExitOk;
    std::optional<Json> reply = CallAllPages(quiet, "status", std::move(args), "trials", &code);
    const double now = WallSeconds();
    if (!reply) {
      if (code != kExitUnreachable) {
        ctx.err << problem.str();
        return code;
      }
      std::string text = problem.str();
      if (!text.empty() && text.back() == '\n') text.pop_back();
      if (terminal) {
        Redraw(ctx.out, title + " \u00b7 " + FormatTime(Json(now)) + "\n" + text +
                            "\n(retrying; the last report follows)\n\n" + last_frame);
      } else if (text != last_problem) {
        ctx.err << text << " (retrying)\n";
      }
      last_problem = text;
    } else {
      last_problem.clear();
      render.now_s = now;
      const bool done = AllFinished(*reply);
      last_frame = RenderStatus(*reply, render);
      if (terminal) {
        Redraw(ctx.out, title + " \u00b7 " + FormatTime(Json(now)) +
                            (done ? " \u00b7 finished" : " \u00b7 Ctrl-C to stop") + "\n\n" +
                            last_frame);
      } else if (std::string key = RenderStatus(*reply, plain); key != last_plain) {
        ctx.out << (last_plain.empty() ? "" : "\n") << "[" << FormatTime(Json(now)) << "]\n"
                << last_frame << std::flush;
        last_plain = std::move(key);
      }
      if (done) return kExitOk;
    }
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace

int RunStatus(const CommandContext& ctx, const std::string& experiment_id,
              const StatusOptions& options) {
  if (options.watch && !options.json) return WatchStatus(ctx, experiment_id, options);
  Json args = Json::object();
  if (!experiment_id.empty()) args["experiment_id"] = experiment_id;
  int code = kExitOk;
  std::optional<Json> reply = CallAllPages(ctx, "status", std::move(args), "trials", &code);
  if (!reply) return code;
  if (options.json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
  } else {
    EtaEstimator eta;
    StatusOptions render = options;
    render.eta = &eta;
    render.now_s = WallSeconds();
    ctx.out << RenderStatus(*reply, render);
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

namespace {

// Exports longer than this are summarised in the human `trial` view.
constexpr size_t kMaxExportChars = 4096;

// `text` line by line, each prefixed by `indent`, control characters escaped.
void PrintIndented(std::ostream& out, const std::string& text, const char* indent) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) out << indent << EscapeControl(line) << '\n';
}

}  // namespace

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
      {"phase", field("phase")},
      {"held", field("held")},
      {"worker", field("worker")},
      {"attempt", field("attempt")},
      {"num_failures", field("num_failures")},
      {"num_restores", field("num_restores")},
      {"restore_from", field("restore_from")},
      {"restarted_as", field("restarted_as")},
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
    PrintIndented(out, ck.ToString(), "  ");
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
    PrintIndented(out, lt.ToString(), "  ");
  }

  // The spec's export_formats, once the trial terminated. A long one (a
  // model's weights) is summarised; --json has it whole.
  const Json* exports = FindField(t, "exports");
  if (exports != nullptr && exports->is_object() && !exports->empty()) {
    out << "exports:\n";
    for (const auto& [format, content] : exports->items()) {
      const std::string text = content.is_string() ? content.get<std::string>() : DumpJson(content);
      if (text.size() > kMaxExportChars) {
        out << "  " << EscapeControl(format) << ": (" << text.size()
            << " bytes; `ztune trial ID --json` has it whole)\n";
        continue;
      }
      out << "  " << EscapeControl(format) << ":\n";
      PrintIndented(out, text, "    ");
    }
  }

  const std::string error = StringField(t, "error");
  out << "error:";
  if (error.empty()) {
    out << " -\n";
  } else {
    out << '\n';
    PrintIndented(out, error, "  ");
  }
  // Every failure, oldest first, when there was more than the one above.
  const Json& error_log = ArrayField(t, "error_log");
  if (error_log.size() > 1 || (error_log.size() == 1 && error.empty())) {
    out << "error_log (every failure, oldest first):\n";
    for (const Json& entry : error_log) {
      PrintIndented(out, entry.is_string() ? entry.get<std::string>() : DumpJson(entry), "  ");
    }
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

int RunHeadStats(const CommandContext& ctx, bool json) {
  int code = kExitOk;
  std::optional<Json> reply = CallOrReport(ctx, "head_stats", Json::object(), &code);
  if (!reply) return code;
  if (json) {
    PrintJson(ctx.out, StripEnvelope(std::move(*reply)));
    return kExitOk;
  }
  const Json& head = ObjectField(*reply, "head");
  auto count = [&](const char* k) { return std::to_string(IntField(head, k)); };
  ctx.out << "Head up " << FormatNumber(NumberField(head, "uptime_s").value_or(0))
          << " s: " << count("turns") << " turns, " << count("commits") << " commits"
          << (head.contains("commits_behind_loop")
                  ? " (" + count("commits_behind_loop") + " behind the loop)"
                  : std::string())
          << ", " << count("messages_in") << " messages in, " << count("result_batches")
          << " result batches"
          << (head.contains("trains_in_acks")
                  ? ", " + count("trains_in_acks") + " TRAINs sent inside ACKs"
                  : std::string())
          << (head.contains("heartbeats_sent")
                  ? ", " + count("heartbeats_sent") + " heartbeats sent"
                  : std::string())
          << (head.contains("worker_sends_dropped")
                  ? ", " + count("worker_sends_dropped") +
                        " messages to workers dropped (no connection)"
                  : std::string())
          << ".\n"
          << "Refused: " << count("malformed") << " malformed, " << count("unknown_senders")
          << " from unknown senders, " << count("unauthorized") << " unauthorized, "
          << count("rate_limited")
          << " over budget. Slow store operations: " << count("slow_store_operations") << ".\n\n";
  // Turns that read a worker message or committed (docs/cli.md says what
  // each phase holds).
  Table table({"time (ms)", "count", "p50", "p99", "max"});
  const Json& times = ObjectField(head, "times");
  for (const char* phase : {"turn", "drain", "handle", "commit", "send", "result_wait"}) {
    const Json& h = ObjectField(times, phase);
    auto ms = [&](const char* k) { return FormatNumber(NumberField(h, k).value_or(0)); };
    table.AddRow(
        {phase, std::to_string(IntField(h, "count")), ms("p50_ms"), ms("p99_ms"), ms("max_ms")});
  }
  table.Render(ctx.out);
  return kExitOk;
}

}  // namespace ztune::client
