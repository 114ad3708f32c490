// `ztune report` (docs/dashboard.md): one experiment, its trials and each
// trial's metric series, read page by page and written into the dashboard
// page (common/dashboard/dashboard_page.h) as one self-contained HTML file.
#include "client/command_calls.h"
#include "client/commands.h"
#include "client/json_util.h"
#include "client/output_file.h"
#include "common/clock.h"
#include "common/dashboard/dashboard_page.h"
#include "common/flat_key.h"
#include "common/printable.h"

namespace ztune::client {

int RunReport(const CommandContext& ctx, const std::string& experiment_id,
              const std::string& output) {
  int code = kExitOk;
  std::optional<Json> exp_reply =
      CallOrReport(ctx, "experiment", Json{{"experiment_id", experiment_id}}, &code);
  if (!exp_reply) return code;
  Json experiment = ObjectField(*exp_reply, "experiment");
  const std::string metric = StringField(experiment, "metric");
  std::optional<Json> trials_reply =
      CallAllPages(ctx, "trials", Json{{"experiment_id", experiment_id}}, "trials", &code);
  if (!trials_reply) return code;
  Json trials = std::move((*trials_reply)["trials"]);
  if (!trials.is_array()) trials = Json::array();

  // Per trial: [training_iteration, metric or null, timestamp] per result.
  Json series = Json::object();
  uint64_t results = 0;
  for (Json& t : trials) {
    if (t.is_object()) t.erase("exports");  // a model's weights do not belong in a page
    const std::string trial_id = StringField(t, "trial_id");
    if (trial_id.empty()) continue;
    Json points = Json::array();
    const bool read = ForEachPage(
        ctx, "results", Json{{"trial_id", trial_id}}, "results",
        [&](Json& page) {
          for (const Json& r : page["results"]) {
            const Json* value = metric.empty() ? nullptr : FindFlatKey(r, metric);
            points.push_back(Json::array({FieldOrNull(r, "training_iteration"),
                                          value != nullptr && value->is_number() ? *value : Json(),
                                          FieldOrNull(r, "timestamp")}));
            ++results;
          }
          return true;
        },
        &code);
    if (!read) return code;
    series[trial_id] = std::move(points);
  }

  Json data{{"generated_at", WallSeconds()},
            {"experiments", Json::array({experiment})},
            {"trials", Json{{experiment_id, std::move(trials)}}},
            {"series", std::move(series)}};
  OutputFile file(ctx.out, output);
  Status s = file.Open();
  if (s.ok()) {
    file.out() << dashboard::Page(data);
    s = file.Commit();
  }
  if (!s.ok()) {
    ctx.err << "error: " << s.message() << '\n';
    return kExitUsage;
  }
  if (file.is_file()) {
    ctx.err << "wrote " << EscapeControl(output) << " (" << data["trials"][experiment_id].size()
            << " trials, " << results << " results)\n";
  }
  return kExitOk;
}

}  // namespace ztune::client
