#include "head/result_processor.h"

#include <algorithm>
#include <utility>

namespace ztune::head {
namespace {

// The result's own `done`, else whether a stopping criterion is reached; an
// error when a criterion's key is missing or not a number.
bool Done(const Json& result, const ExperimentSpec& spec, int64_t iteration, std::string* error) {
  // Ray's _should_stop: a result that says it is done is done; the stopping
  // criteria (and their keys) only matter for the others.
  if (result.value("done", false)) return true;
  for (const auto& [key, threshold] : spec.stop) {
    const Json* v = FindFlatKey(result, key);
    if (v == nullptr || !(v->is_number() || v->is_boolean())) {
      *error = "stopping criterion '" + key + "' not found (or not a number) in the result of "
               "iteration " + std::to_string(iteration);
      return false;
    }
    const double x = v->is_boolean() ? (v->get<bool>() ? 1.0 : 0.0) : v->get<double>();
    if (x >= threshold) return true;
  }
  return false;
}

// The keys the experiment's scheduler judges by must be in every result that
// does not end the trial by itself (Ray's _validate_result_metrics; a final
// `done` result may carry nothing else). Returns the error, or "".
std::string MissingSchedulerKey(const Json& result, const ExperimentSpec& spec, int64_t iteration) {
  if (result.value("done", false)) return "";
  for (const std::string& key : spec.scheduler.RequiredResultKeys()) {
    const Json* v = FindFlatKey(result, key);
    if (v != nullptr && v->is_number()) continue;
    std::string reported;
    size_t listed = 0;
    for (auto it = result.begin(); it != result.end(); ++it) {
      if (++listed > 20) {
        reported += ", ...";
        break;
      }
      reported += (reported.empty() ? "" : ", ") + it.key();
    }
    return "result of iteration " + std::to_string(iteration) + " has " +
           (v == nullptr ? "no '" + key + "'" : "a non-numeric '" + key + "'") +
           ", which scheduler " + spec.scheduler.TypeName() +
           " judges trials by (the result reports: " + reported + ")";
  }
  return "";
}

}  // namespace

BatchOutcome ResultProcessor::Process(const TrialId& trial_id, int64_t last_iteration,
                                      int64_t resume_iteration, const ExperimentSpec& spec,
                                      std::vector<protocol::ResultRecord> results) {
  BatchOutcome out;
  int64_t last = last_iteration;
  for (auto& rec : results) {
    Json& in = rec.result;
    auto it_iter = in.is_object() ? in.find("training_iteration") : in.end();
    if (!in.is_object() || it_iter == in.end() || !it_iter->is_number_integer()) {
      out.error = "result without an integer training_iteration";
      break;
    }
    const int64_t iteration = it_iter->get<int64_t>();
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
      auto it = in.find(flag);
      if (it != in.end() && !it->is_boolean()) {
        out.error = "result of iteration " + std::to_string(iteration) + ": '" + flag +
                    "' must be true or false, got a " + it->type_name();
        break;
      }
    }
    if (!out.error.empty()) break;
    out.error = MissingSchedulerKey(in, spec, iteration);
    if (!out.error.empty()) break;
    Json result = std::move(in);
    result["trial_id"] = trial_id;
    const bool done = Done(result, spec, iteration, &out.error);
    if (!out.error.empty()) break;
    result["done"] = done;
    out.checkpoint =
        out.checkpoint ||
        (spec.checkpoint.frequency > 0 && iteration % spec.checkpoint.frequency == 0) ||
        (done && spec.checkpoint.at_end) || result.value("should_checkpoint", false);
    last = iteration;
    out.accepted.emplace_back(iteration, std::move(result));
    if (done) {
      out.stop = true;
      break;  // a STOP ignores the rest of a buffered batch
    }
  }
  if (!out.error.empty()) out.accepted.clear();
  return out;
}

}  // namespace ztune::head
