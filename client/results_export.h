// The rows of `ztune export` (docs/cli.md): one per stored result of every
// trial of an experiment, each carrying the trial's id, status and the config
// it trained that iteration with, as CSV (flattened columns, one
// pandas.read_csv away) or JSON lines. Pure functions of the head's trial and
// result documents; thread-compatible.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/json.h"

namespace ztune::client {

enum class ExportFormat { kCsv, kJsonl };

// The config `trial` (a TrialDoc) trained `iteration` with. Under PBT the
// stored results after an exploit's donor_iteration come from the exploit's
// new config, so this is the new_config of the newest exploit whose
// donor_iteration is below `iteration`; before any exploit it is the first
// exploit's old_config (the head keeps the newest 64 exploits: older rows
// get the oldest kept one's). Without exploits it is the trial's config.
const Json& ConfigAtIteration(const Json& trial, int64_t iteration);

// One export record: {"trial_id", "status", "config", ...the result's
// fields}. `result` null = a trial that reported nothing (its row keeps it
// in the export with empty result columns). A result field named like a
// trial column ("trial_id" aside, which names the same trial) is kept as
// "result/<name>".
Json ExportRecord(const Json& trial, const Json* result);

// The CSV column order for a set of flattened keys: trial_id, status, the
// config/ columns, training_iteration, then the rest, each group sorted.
std::vector<std::string> ExportColumns(const std::set<std::string>& keys);

}  // namespace ztune::client
