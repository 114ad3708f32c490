#include "head/result_processor.h"

#include <algorithm>
#include <utility>

#include "common/protocol/result_view.h"

namespace ztune::head {
namespace {

using protocol::ResultView;

bool IsTrue(const std::optional<ResultView::Value>& v) {
  return v && v->kind == ResultView::Kind::kBoolean && v->boolean;
}

// The result's keys as a user sees them (sorted, the first 20), for an error
// naming a key it lacks. The error path: a DOM is fine here.
std::string ReportedKeys(const protocol::RawResult& raw) {
  const Json dom = raw.ToJson();
  std::string reported;
  size_t listed = 0;
  for (auto it = dom.begin(); it != dom.end(); ++it) {
    if (++listed > 20) {
      reported += ", ...";
      break;
    }
    reported += (reported.empty() ? "" : ", ") + it.key();
  }
  return "(the result reports: " + reported + ")";
}

// The result's own `done`, else whether a stopping criterion is reached; an
// error when a criterion's key is missing or not a number.
bool Done(const ResultView& result, const protocol::RawResult& raw, const ExperimentSpec& spec,
          int64_t iteration, std::string* error) {
  // Ray's _should_stop: a result that says it is done is done; the stopping
  // criteria (and their keys) only matter for the others.
  if (IsTrue(result.Find("done"))) return true;
  for (const auto& [key, threshold] : spec.stop) {
    // The stamped trial_id is a string: as a criterion it is "not a number".
    auto v = key == "trial_id" ? std::nullopt : result.FindFlat(key);
    if (!v || !(v->is_number() || v->kind == ResultView::Kind::kBoolean)) {
      *error = "stopping criterion '" + key +
               "' not found (or not a number) in the result of "
               "iteration " +
               std::to_string(iteration) + " " + ReportedKeys(raw);
      return false;
    }
    const double x =
        v->kind == ResultView::Kind::kBoolean ? (v->boolean ? 1.0 : 0.0) : v->AsDouble();
    if (x >= threshold) return true;
  }
  return false;
}

// The experiment's metric and the keys its scheduler judges by must be in
// every result that does not end the trial by itself (Ray's
// _validate_result_metrics with strict checking: the runner's, scheduler's
// and searcher's metrics; a final `done` result may carry nothing else).
// `metric` is the experiment's metric as found in the result (looked up once
// by the caller, which keeps it). Returns the error, or "".
std::string MissingRequiredKey(const ResultView& result, const protocol::RawResult& raw,
                               const ExperimentSpec& spec,
                               const std::optional<ResultView::Value>& metric, int64_t iteration) {
  if (IsTrue(result.Find("done"))) return "";
  auto missing = [&](const std::string& key, const std::string& role,
                     const std::optional<ResultView::Value>& v) -> std::string {
    if (v && v->is_number()) return "";
    return "result of iteration " + std::to_string(iteration) + " has " +
           (!v ? "no '" + key + "'" : "a non-numeric '" + key + "'") + ", " + role + " " +
           ReportedKeys(raw);
  };
  // The scheduler's keys first: its metric is usually the experiment's too,
  // and the scheduler is what needs it on every result.
  for (const std::string& key : spec.scheduler.RequiredResultKeys()) {
    std::string error = missing(
        key, "which scheduler " + std::string(spec.scheduler.TypeName()) + " judges trials by",
        key == spec.metric ? metric : result.FindFlat(key));
    if (!error.empty()) return error;
  }
  if (!spec.metric.empty()) return missing(spec.metric, "the experiment's metric", metric);
  return "";
}

}  // namespace

BatchOutcome ResultProcessor::Process(const TrialId& trial_id, int64_t last_iteration,
                                      int64_t resume_iteration, const ExperimentSpec& spec,
                                      std::vector<protocol::ResultRecord> results) {
  BatchOutcome out;
  int64_t last = last_iteration;
  for (auto& rec : results) {
    const ResultView in(rec.result.bytes);
    const auto iter = in.Find("training_iteration");
    if (!in.is_object() || !iter || !iter->is_integer()) {
      out.error = "result without an integer training_iteration";
      break;
    }
    const int64_t iteration = iter->AsInt64();
    if (iteration <= last) continue;  // already stored (replay or re-run)
    // Results are keyed and resumed by iteration: a gap would be permanent.
    const int64_t expected = std::max(last, resume_iteration) + 1;
    if (iteration != expected) {
      out.error = "result with training_iteration " + std::to_string(iteration) +
                  " does not follow iteration " + std::to_string(expected - 1) + " (expected " +
                  std::to_string(expected) + ")";
      break;
    }
    // A trainable's own result: the flags the runner acts on must be booleans
    // (a number or string here aborted the head, on every replay).
    for (const char* flag : {"done", "should_checkpoint"}) {
      auto v = in.Find(flag);
      if (v && v->kind != ResultView::Kind::kBoolean) {
        out.error = "result of iteration " + std::to_string(iteration) + ": '" + flag +
                    "' must be true or false, got a " + v->TypeName();
        break;
      }
    }
    if (!out.error.empty()) break;
    std::optional<ResultView::Value> metric_value;
    if (!spec.metric.empty()) metric_value = in.FindFlat(spec.metric);
    out.error = MissingRequiredKey(in, rec.result, spec, metric_value, iteration);
    if (!out.error.empty()) break;
    const bool done = Done(in, rec.result, spec, iteration, &out.error);
    if (!out.error.empty()) break;
    out.checkpoint =
        out.checkpoint ||
        (spec.checkpoint.frequency > 0 && iteration % spec.checkpoint.frequency == 0) ||
        (done && spec.checkpoint.at_end) || IsTrue(in.Find("should_checkpoint"));
    last = iteration;
    std::string stored = in.StampedMsgpack(trial_id.str(), done);  // `in` reads rec.result
    std::optional<double> metric;
    if (metric_value && metric_value->is_number()) metric = metric_value->AsDouble();
    out.accepted.push_back({iteration, std::move(rec.result), done, std::move(stored), metric});
    if (done) {
      out.stop = true;
      break;  // a STOP ignores the rest of a buffered batch
    }
  }
  if (!out.error.empty()) out.accepted.clear();
  return out;
}

std::string ResultProcessor::StoredValue(const TrialId& trial_id, const AcceptedResult& r) {
  return ResultView(r.raw.bytes).StampedMsgpack(trial_id.str(), r.done);
}

Json ResultProcessor::StoredJson(const TrialId& trial_id, const AcceptedResult& r) {
  Json j = r.raw.ToJson();
  j["trial_id"] = trial_id;
  j["done"] = r.done;
  return j;
}

}  // namespace ztune::head
