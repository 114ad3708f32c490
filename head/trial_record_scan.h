// Reading a stored trial record without building its DOM. A head's start on
// 100,000 finished trials is CPU-bound in reading their records
// (docs/benchmarks.md, "recovery"); nlohmann's DOM of each record (a map of
// two dozen members, then Trial::FromJson's lookups in it) was most of that.
// This reads the record's members in one pass straight into a Trial, and
// keeps its last result as the stored text (head/last_result_scan.h).
//
// Pure function; thread-safe (the start parses records on two threads).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "head/trial.h"

namespace ztune::head {

// Experiment id -> its metric (ExperimentSpec::metric).
using MetricKeys = std::map<std::string, std::string>;

// The trial Trial::FromJson makes of record `text`, its last result kept as
// the stored text with its value at the metric `metric_keys` gives for the
// trial's experiment (none when `metric_keys` is null or names none). nullopt
// when the record must take the full parse instead: any damage (the full
// parse names it), a schema-1 record, PBT exploits, a key it does not read,
// a key written twice or with an escape, a value it cannot be sure to read
// as nlohmann does. What it accepts is valid JSON, read as the DOM reads it.
std::optional<Trial> ReadTrialRecordText(std::string_view text, const MetricKeys* metric_keys);

}  // namespace ztune::head
