#include "client/report.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "client/commands.h"
#include "client/json_util.h"
#include "client/progress.h"
#include "common/printable.h"

namespace ztune::client {
namespace {

// Trial states in the order the reports list them.
constexpr const char* kStatusOrder[] = {"RUNNING", "PENDING", "PAUSED", "TERMINATED", "ERROR"};

// Which rows a truncated table keeps first (Ray shows live trials first).
int DisplayPriority(const std::string& status) {
  if (status == "RUNNING") return 0;
  if (status == "ERROR") return 1;
  if (status == "PAUSED") return 2;
  if (status == "PENDING") return 3;
  if (status == "TERMINATED") return 4;
  return 5;
}


constexpr size_t kMaxCellChars = 32;
constexpr size_t kMaxErrorChars = 100;

std::string ResourceName(const std::string& name, const Json& used, const Json& total) {
  return name + " " + FormatAmount(NumberField(used, name).value_or(0)) + "/" +
         FormatAmount(NumberField(total, name).value_or(0));
}


}  // namespace

// Cuts a table cell to kMaxCellChars (params can be long strings or lists).
std::string Cell(const Json& v) { return FirstLine(FormatCell(v), kMaxCellChars); }

std::string TrialCountsText(const Json& experiment) {
  const int64_t total = IntField(experiment, "total_trials");
  std::string text = std::to_string(total) + (total == 1 ? " trial" : " trials");
  const Json& counts = ObjectField(experiment, "trial_counts");
  std::vector<std::string> parts;
  std::set<std::string> known;
  for (const char* s : kStatusOrder) {
    known.insert(s);
    const int64_t n = IntField(counts, s);
    if (n != 0) parts.push_back(std::to_string(n) + " " + s);
  }
  for (const auto& [name, value] : counts.items()) {
    if (known.count(name) != 0) continue;
    const int64_t n = IntField(counts, name);
    if (n != 0) parts.push_back(std::to_string(n) + " " + name);
  }
  for (size_t i = 0; i < parts.size(); ++i) text += (i == 0 ? ": " : ", ") + parts[i];
  return text;
}

// "Experiment e0001 (name): RUNNING — 16 trials: 4 RUNNING, ...".
std::string ExperimentLine(const Json& experiment) {
  std::string line = "Experiment " + StringField(experiment, "experiment_id", "?");
  const std::string name = StringField(experiment, "name");
  if (!name.empty()) line += " (" + name + ")";
  line += ": " + StringField(experiment, "status", "?") + " \u2014 " + TrialCountsText(experiment);
  return line;
}

// "e0001_00003 loss=0.00121 (iteration 50)", or "" when there is no best trial.
std::string BestTrialText(const Json& experiment) {
  const Json* best = FindField(experiment, "best_trial");
  if (best == nullptr || !best->is_object()) return "";
  std::string text = StringField(*best, "trial_id", "?");
  const std::string metric = StringField(*best, "metric", StringField(experiment, "metric"));
  const Json* value = FindField(*best, "value");
  if (!metric.empty() && value != nullptr) text += " " + metric + "=" + FormatCell(*value);
  if (FindField(*best, "iteration") != nullptr) {
    text += " (iteration " + std::to_string(IntField(*best, "iteration")) + ")";
  }
  return text;
}

// The metric column of trial tables: the experiment's metric, else "loss" if
// any trial reports it, else none.
std::string MetricColumn(const Json& experiment, const Json& trials) {
  const std::string metric = StringField(experiment, "metric");
  if (!metric.empty()) return metric;
  for (const Json& t : trials) {
    const Json* last = FindField(t, "last_result");
    if (last != nullptr && Flatten(*last).count("loss") != 0) return "loss";
  }
  return "";
}

// A trial's value of `metric` in its last result, flattened ("a/b" nests).
Json LastMetric(const Json& trial, const std::string& metric) {
  const Json* last = FindField(trial, "last_result");
  if (last == nullptr || metric.empty()) return nullptr;
  std::map<std::string, Json> flat = Flatten(*last);
  auto it = flat.find(metric);
  return it == flat.end() ? Json(nullptr) : it->second;
}

std::string WorkerCell(const Json& trial) { return StringField(trial, "worker", "-"); }

// "RUNNING", or "RUNNING (saving)" while its attempt is in a phase worth
// seeing: any but training (and idle, the phase of every other status).
std::string StatusCell(const Json& trial) {
  std::string status = StringField(trial, "status", "?");
  const std::string phase = StringField(trial, "phase");
  if (!phase.empty() && phase != "idle" && phase != "training") status += " (" + phase + ")";
  return status;
}

// Trial, status, worker, <params...>, iter, <metric>[, failures].
Table TrialTable(const std::vector<const Json*>& trials, const std::string& metric,
                 bool with_failures) {
  std::vector<std::map<std::string, Json>> configs;
  std::set<std::string> param_keys;
  configs.reserve(trials.size());
  for (const Json* t : trials) {
    configs.push_back(Flatten(ObjectField(*t, "config")));
    for (const auto& [k, v] : configs.back()) param_keys.insert(k);
  }
  std::vector<std::string> headers = {"Trial", "status", "worker"};
  headers.insert(headers.end(), param_keys.begin(), param_keys.end());
  headers.push_back("iter");
  if (!metric.empty()) headers.push_back(metric);
  if (with_failures) headers.push_back("failures");
  Table table(headers);
  for (size_t i = 0; i < trials.size(); ++i) {
    const Json& t = *trials[i];
    std::vector<std::string> row = {StringField(t, "trial_id", "?"), StatusCell(t), WorkerCell(t)};
    for (const std::string& k : param_keys) {
      auto it = configs[i].find(k);
      row.push_back(it == configs[i].end() ? "" : Cell(it->second));
    }
    row.push_back(std::to_string(IntField(t, "iteration")));
    if (!metric.empty()) {
      Json v = LastMetric(t, metric);
      row.push_back(v.is_null() ? "" : Cell(v));
    }
    if (with_failures) row.push_back(std::to_string(IntField(t, "num_failures")));
    table.AddRow(std::move(row));
  }
  return table;
}

// Picks at most `max_rows` trials in the order docs/cli.md promises: live
// ones first (RUNNING, ERROR, PAUSED, PENDING, then TERMINATED), each status
// in the trials' own order; the rest are counted per status in *hidden.
std::vector<const Json*> SelectRows(const std::vector<const Json*>& trials, size_t max_rows,
                                    std::map<std::string, int>* hidden) {
  std::vector<const Json*> rows = trials;
  std::stable_sort(rows.begin(), rows.end(), [](const Json* a, const Json* b) {
    return DisplayPriority(StringField(*a, "status")) < DisplayPriority(StringField(*b, "status"));
  });
  for (size_t i = max_rows; i < rows.size(); ++i) ++(*hidden)[StringField(*rows[i], "status", "?")];
  if (rows.size() > max_rows) rows.resize(max_rows);
  return rows;
}

void RenderExperimentStatus(const Json& experiment, const std::vector<const Json*>& trials,
                            const Json& resources, int64_t workers_alive,
                            const StatusOptions& options, std::ostream& out) {
  out << "== Status ==\n";
  out << ExperimentLine(experiment) << '\n';
  const Progress progress = MeasureProgress(experiment, &trials);
  std::optional<double> eta;
  if (options.eta != nullptr) {
    eta = options.eta->Observe(StringField(experiment, "experiment_id"), progress.Fraction(),
                               NumberField(experiment, "created_at").value_or(0), options.now_s);
  }
  out << "Progress: " << ProgressText(progress, eta) << '\n';
  out << "Resources: " << FormatResources(resources) << '\n';
  out << "Workers alive: " << workers_alive << '\n';
  const std::string mode = StringField(experiment, "mode");
  const std::string metric_name = StringField(experiment, "metric");
  if (!metric_name.empty()) {
    out << "Metric: " << metric_name << (mode.empty() ? "" : " (" + mode + ")") << '\n';
  }
  // The scheduler deciding on the results (Ray's reporter prints its debug
  // string); FIFO, the default, goes unsaid.
  const Json& scheduler = ObjectField(ObjectField(experiment, "spec"), "scheduler");
  const std::string type = StringField(scheduler, "type");
  if (!type.empty() && type != "fifo") {
    std::string detail;
    for (const char* key :
         {"time_attr", "max_t", "grace_period", "reduction_factor", "perturbation_interval"}) {
      const Json* v = FindField(scheduler, key);
      if (v == nullptr) continue;
      detail += (detail.empty() ? "" : ", ") + std::string(key) + " " + FormatCell(*v);
    }
    out << "Scheduler: " << type << (detail.empty() ? "" : " (" + detail + ")") << '\n';
  }
  const std::string best = BestTrialText(experiment);
  if (!best.empty()) out << "Best trial: " << best << '\n';
  if (const Json* w = FindField(experiment, "warnings"); w != nullptr && w->is_array()) {
    for (const Json& text : *w) {
      if (text.is_string()) out << "Warning: " << EscapeControl(text.get<std::string>()) << '\n';
    }
  }
  if (trials.empty()) {
    out << "No trials yet.\n";
    return;
  }
  Json trial_array = Json::array();
  for (const Json* t : trials) trial_array.push_back(*t);
  const std::string metric = MetricColumn(experiment, trial_array);

  std::map<std::string, int> hidden;
  std::vector<const Json*> rows =
      options.all ? trials : SelectRows(trials, options.max_rows, &hidden);
  out << '\n';
  TrialTable(rows, metric, /*with_failures=*/false).Render(out);
  if (!hidden.empty()) {
    int n = 0;
    std::string detail;
    for (const char* s : kStatusOrder) {
      auto it = hidden.find(s);
      if (it == hidden.end()) continue;
      n += it->second;
      detail += (detail.empty() ? "" : ", ") + std::to_string(it->second) + " " + s;
      hidden.erase(it);
    }
    for (const auto& [s, c] : hidden) {
      n += c;
      detail += (detail.empty() ? "" : ", ") + std::to_string(c) + " " + s;
    }
    out << "... " << n << " more trials not shown (" << detail << "); use --all to list them\n";
  }

  std::vector<const Json*> errored;
  for (const Json* t : trials) {
    if (StringField(*t, "status") == "ERROR") errored.push_back(t);
  }
  if (!errored.empty()) {
    out << "\nNumber of errored trials: " << errored.size() << '\n';
    Table errors({"Trial", "failures", "error"});
    for (const Json* t : errored) {
      errors.AddRow({StringField(*t, "trial_id", "?"), std::to_string(IntField(*t, "num_failures")),
                     FirstLine(StringField(*t, "error", "-"), kMaxErrorChars)});
    }
    errors.Render(out);
  }
}


std::string FormatResources(const Json& resources) {
  const Json& used = ObjectField(resources, "used");
  const Json& total = ObjectField(resources, "total");
  std::string text = ResourceName("CPU", used, total) + ", " + ResourceName("GPU", used, total);
  std::set<std::string> others;
  for (const Json* side : {&used, &total}) {
    for (const auto& [k, v] : side->items()) {
      if (k != "CPU" && k != "GPU") others.insert(k);
    }
  }
  for (const std::string& k : others) text += ", " + ResourceName(k, used, total);
  return text;
}

std::string RenderStatus(const Json& status_reply, const StatusOptions& options) {
  std::ostringstream out;
  const Json& experiments = ArrayField(status_reply, "experiments");
  const Json& trials = ArrayField(status_reply, "trials");
  const Json& resources = ObjectField(status_reply, "resources");
  const int64_t workers_alive = IntField(status_reply, "workers_alive");
  if (experiments.empty()) {
    out << "== Status ==\n";
    out << "Resources: " << FormatResources(resources) << '\n';
    out << "Workers alive: " << workers_alive << '\n';
    out << "No experiments.\n";
    return out.str();
  }
  // Group trials by experiment once (no per-experiment scans of all trials).
  std::map<std::string, std::vector<const Json*>> by_experiment;
  for (const Json& t : trials) by_experiment[StringField(t, "experiment_id")].push_back(&t);
  bool first = true;
  for (const Json& e : experiments) {
    if (!first) out << '\n';
    first = false;
    const auto it = by_experiment.find(StringField(e, "experiment_id"));
    static const std::vector<const Json*> kNone;
    RenderExperimentStatus(e, it == by_experiment.end() ? kNone : it->second, resources,
                           workers_alive, options, out);
  }
  return out.str();
}

std::string ResultsCsv(const Json& results) {
  std::vector<std::map<std::string, Json>> rows;
  std::set<std::string> keys;
  if (results.is_array()) {
    rows.reserve(results.size());
    for (const Json& r : results) {
      rows.push_back(Flatten(r));
      for (const auto& [k, v] : rows.back()) keys.insert(k);
    }
  }
  std::vector<std::string> header = {"training_iteration"};
  for (const std::string& k : keys) {
    if (k != "training_iteration") header.push_back(k);
  }
  std::string csv = CsvLine(header);
  for (const auto& row : rows) {
    std::vector<std::string> fields;
    fields.reserve(header.size());
    for (const std::string& k : header) {
      auto it = row.find(k);
      fields.push_back(it == row.end() ? "" : CsvValue(it->second));
    }
    csv += CsvLine(fields);
  }
  return csv;
}


}  // namespace ztune::client
