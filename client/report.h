// Text reports of the `ztune` commands: the status view (experiment lines,
// trial tables with parameter columns, truncation that keeps live trials),
// resources, and results as CSV. Pure functions of the head's replies.
#pragma once

#include <string>
#include <vector>

#include "client/table.h"
#include "common/json.h"

namespace ztune::client {

// A table cell of at most 32 characters (params can be long strings or lists).
std::string Cell(const Json& v);
// "16 trials: 4 RUNNING, 8 PENDING, 4 TERMINATED".
std::string TrialCountsText(const Json& experiment);
// "Experiment e0001 (name): RUNNING — 16 trials: ...".
std::string ExperimentLine(const Json& experiment);
std::string BestTrialText(const Json& experiment);
// The metric to show in trial tables: the experiment's, else none.
std::string MetricColumn(const Json& experiment, const Json& trials);
Table TrialTable(const std::vector<const Json*>& trials, const std::string& metric,
                 bool with_failures);

}  // namespace ztune::client
