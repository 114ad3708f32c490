#include "head/store_check.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "common/json_parse.h"
#include "common/printable.h"
#include "common/protocol/messages.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "head/checkpoint_files.h"
#include "head/scheduler_set.h"
#include "head/stored_result.h"
#include "head/trial.h"
#include "head/trial_records.h"
#include "storage/keys.h"

namespace ztune::head {
namespace {

// The trial id part of a result / checkpoint key (before the '\0').
std::string TrialOfKey(std::string_view key) {
  auto zero = key.find('\0');
  return std::string(key.substr(0, zero));
}

// A stored result names its own iteration and trial. Types are checked
// before reading: value<int64_t>() casts a float (UB when out of range) and
// value<std::string>() throws on a number, and --check must report a damaged
// record, not abort on it (both found by tests/fuzz/fuzz_store_records).
bool StoredIterationIs(const Json& r, uint64_t iteration) {
  auto it = r.find("training_iteration");
  return it != r.end() && it->is_number_integer() &&
         (it->is_number_unsigned() || it->get<int64_t>() >= 0) &&
         it->get<uint64_t>() == iteration;
}

bool StoredTrialIs(const Json& r, const std::string& trial) {
  auto it = r.find("trial_id");
  return it != r.end() && it->is_string() && it->get_ref<const std::string&>() == trial;
}

}  // namespace

Json StoreCheckReport::ToJson() const {
  return Json{{"ok", ok()},
              {"experiments", experiments},
              {"trials", trials},
              {"results", results},
              {"checkpoints", checkpoints},
              {"checkpoint_bytes", checkpoint_bytes},
              {"checkpoint_files", checkpoint_files},
              {"code_archives", code_archives},
              {"code_bytes", code_bytes},
              {"problems", problems}};
}

std::string StoreCheckReport::ToText() const {
  std::string s = std::to_string(experiments) + " experiments, " + std::to_string(trials) +
                  " trials, " + std::to_string(results) + " results, " +
                  std::to_string(checkpoints) + " checkpoints (" +
                  std::to_string(checkpoint_bytes) + " bytes), " + std::to_string(code_archives) +
                  " code archives (" + std::to_string(code_bytes) + " bytes): ";
  if (ok()) return s + "consistent";
  s += std::to_string(problems.size()) + " problems\n";
  for (const auto& p : problems) s += "  - " + p + "\n";
  return s;
}

Result<StoreCheckReport> CheckStore(storage::Store& store, const std::string& checkpoint_dir) {
  StoreCheckReport report;
  // Problem texts quote keys and values of a possibly corrupt store: they are
  // made valid UTF-8 (the JSON report) and printable (the terminal).
  auto problem = [&](std::string p) {
    if (report.problems.size() < 1000) report.problems.push_back(EscapeControl(Utf8OrReplaced(p)));
  };
  std::map<std::string, Experiment> experiments;
  RETURN_IF_ERROR(store.Scan(storage::Family::kExperiments, "",
                             [&](std::string_view key, std::string_view v) {
                               ++report.experiments;
                               Json j = Json::parse(v, nullptr, false);
                               auto e = j.is_discarded()
                                            ? Result<Experiment>(Status::Corruption("not JSON"))
                                            : Experiment::FromJson(j);
                               if (!e.ok()) {
                                 problem("experiment " + std::string(key) + ": " +
                                         e.status().message());
                               } else {
                                 const std::string id = e->experiment_id;
                                 experiments.emplace(id, std::move(e).value());
                               }
                               return true;
                             }));
  std::map<std::string, Trial> trials;
  RETURN_IF_ERROR(ScanTrials(store, [&](StoredTrial& stored) {
    ++report.trials;
    if (!stored.trial.ok()) {
      problem("trial " + stored.key + ": " + stored.trial.status().message());
      return true;
    }
    Trial& t = *stored.trial;
    if (auto e = experiments.find(t.experiment_id); e == experiments.end()) {
      problem("trial " + t.trial_id + " belongs to unknown experiment " + t.experiment_id);
    } else if (Status issued = CheckTrialIdIssued(e->second, t.trial_id); !issued.ok()) {
      problem(issued.message());
    }
    const std::string id = t.trial_id;
    trials.emplace(id, std::move(t));
    return true;
  }));
  // Each trial's scheduler state, as a starting head reads it (a damaged one
  // refuses the start).
  SchedulerSet schedulers;
  for (const auto& [id, e] : experiments) schedulers.OnExperimentAdd(e);
  for (auto& [id, t] : trials) {
    if (!experiments.count(t.experiment_id)) continue;
    const TrialId trial_id = t.trial_id;
    Status taken = schedulers.OnTrialCreate(t, [&] { return ReadStoredResults(store, trial_id); });
    if (!taken.ok()) problem(taken.message());
  }

  // Results: one scan over the family, grouped by trial (keys are ordered).
  std::map<std::string, std::pair<int64_t, int64_t>> ranges;  // trial -> (first, last)
  std::set<std::string> reported_gap;
  RETURN_IF_ERROR(store.Scan(storage::Family::kResults, "", [&](std::string_view key,
                                                                std::string_view v) {
    ++report.results;
    std::string trial = TrialOfKey(key);
    auto iteration = storage::KeySuffixNumber(key);
    if (!iteration) {
      problem("malformed result key for trial " + trial);
      return true;
    }
    if (!trials.count(trial)) {
      if (!reported_gap.count(trial)) problem("results of unknown trial " + trial);
      reported_gap.insert(trial);
      return true;
    }
    Result<Json> parsed = ParseStoredResult(v);
    if (!parsed.ok()) {
      problem("result " + std::to_string(*iteration) + " of " + trial + " " +
              parsed.status().message());
    } else if (const Json& r = *parsed;
               !StoredIterationIs(r, *iteration) || !StoredTrialIs(r, trial)) {
      problem("result " + std::to_string(*iteration) + " of " + trial +
              " does not match its key (training_iteration / trial_id)");
    }
    auto [it, inserted] = ranges.try_emplace(trial, *iteration, *iteration);
    if (!inserted) {
      if (static_cast<int64_t>(*iteration) != it->second.second + 1 && !reported_gap.count(trial)) {
        problem("results of " + trial + " jump from iteration " +
                std::to_string(it->second.second) + " to " + std::to_string(*iteration));
        reported_gap.insert(trial);
      }
      it->second.second = static_cast<int64_t>(*iteration);
    }
    return true;
  }));
  for (const auto& [id, t] : trials) {
    auto r = ranges.find(id);
    int64_t last = r == ranges.end() ? 0 : r->second.second;
    // Results are committed without the trial record, which a state change
    // writes: a live trial's record may be behind its results, never ahead;
    // a finished trial's record was written with its last result.
    if (IsFinished(t.status) ? last != t.iteration : last < t.iteration) {
      problem("trial " + id + " (" + TrialStatusName(t.status) + ") records iteration " +
              std::to_string(t.iteration) + " but its stored results end at " +
              std::to_string(last));
    }
    if (r != ranges.end() && r->second.first != 1 && t.restore_from.empty()) {
      problem("results of " + id + " start at iteration " + std::to_string(r->second.first));
    }
  }

  // Checkpoints: every retained one readable, none orphaned; a file
  // checkpoint's file present, of its recorded size, and the one its record
  // names.
  std::set<std::pair<std::string, uint64_t>> present;
  std::map<std::pair<std::string, uint64_t>, std::string> files_of;  // (trial, id) -> file
  RETURN_IF_ERROR(
      store.Scan(storage::Family::kCheckpoints, "", [&](std::string_view key, std::string_view v) {
        ++report.checkpoints;
        auto id = storage::KeySuffixNumber(key);
        std::string trial = TrialOfKey(key);
        const std::string what = "checkpoint " + std::to_string(id.value_or(0)) + " of " + trial;
        if (!id) {
          problem("malformed checkpoint key for trial " + trial);
        } else {
          present.insert({trial, *id});
        }
        auto ref = DecodeCheckpointFileRef(v);
        if (!ref.ok()) {
          problem(what + ": " + ref.status().message());
        } else if (ref->has_value()) {
          const CheckpointFileRef& r = **ref;
          report.checkpoint_bytes += static_cast<int64_t>(r.size);
          ++report.checkpoint_files;
          if (id) files_of[{trial, *id}] = r.name;
          if (!checkpoint_dir.empty()) {
            std::error_code ec;
            const auto size = std::filesystem::file_size(checkpoint_dir + "/" + r.name, ec);
            if (ec) {
              problem(what + ": its file " + r.name + " is missing (" + ec.message() + ")");
            } else if (size != r.size) {
              problem(what + ": its file " + r.name + " holds " + std::to_string(size) +
                      " bytes; " + std::to_string(r.size) + " were recorded");
            }
          }
        } else {
          report.checkpoint_bytes += static_cast<int64_t>(v.size());
          if (v.empty()) problem(what + " is empty");
        }
        return true;
      }));
  for (const auto& [id, t] : trials) {
    for (const auto& c : t.checkpoints) {
      if (!present.count({id, c.id})) {
        problem("trial " + id + " retains checkpoint " + std::to_string(c.id) +
                " (iteration " + std::to_string(c.iteration) + ") but its bytes are missing");
        continue;
      }
      auto f = files_of.find({id, c.id});
      const std::string stored = f == files_of.end() ? std::string() : f->second;
      if (stored != c.file) {
        problem("trial " + id + ": the record of checkpoint " + std::to_string(c.id) +
                " names file '" + c.file + "', the store holds " +
                (stored.empty() ? std::string("its bytes inline") : "file '" + stored + "'"));
      }
    }
  }
  for (const auto& [trial, cid] : present) {
    auto it = trials.find(trial);
    bool retained = false;
    if (it != trials.end()) {
      for (const auto& c : it->second.checkpoints) retained = retained || c.id == cid;
    }
    if (!retained) {
      problem("checkpoint " + std::to_string(cid) + " of " + trial + " is not retained by any trial");
    }
  }

  // Submitted code: each archive whole and under its own sha256.
  struct StoredCode {
    std::optional<Json> record;
    std::map<uint64_t, std::string> pages;
  };
  std::map<std::string, StoredCode> codes;
  const std::string code_prefix = storage::kMetaCodePrefix;
  RETURN_IF_ERROR(store.Scan(
      storage::Family::kMeta, code_prefix, [&](std::string_view key, std::string_view v) {
        const std::string rest(key.substr(code_prefix.size()));
        const size_t slash = rest.find('/');
        StoredCode& c = codes[rest.substr(0, slash)];
        if (slash == std::string::npos) {
          Result<Json> record = ParseJson(v);
          if (record.ok() && record->is_object() && (*record)["size"].is_number_unsigned()) {
            c.record = std::move(record).value();
          } else {
            problem("the record of code " + rest + " is not {\"size\", \"pages\"}");
          }
        } else {
          char* end = nullptr;
          const std::string index = rest.substr(slash + 1);
          const uint64_t page = std::strtoull(index.c_str(), &end, 10);
          if (index.size() != 8 || end != index.c_str() + index.size()) {
            problem("malformed code page key " + rest);
          } else {
            c.pages[page] = std::string(v);
          }
        }
        return true;
      }));
  for (const auto& [hex, c] : codes) {
    if (!c.record.has_value()) {
      problem("code " + hex + " has " + std::to_string(c.pages.size()) + " page(s) but no record");
      continue;
    }
    ++report.code_archives;
    const uint64_t size = (*c.record)["size"].get<uint64_t>();
    report.code_bytes += static_cast<int64_t>(size);
    Sha256 hasher;
    uint64_t seen = 0;
    bool whole = true;
    for (uint64_t i = 0; seen < size; ++i) {
      auto page = c.pages.find(i);
      if (page == c.pages.end()) {
        problem("code " + hex + " lacks page " + std::to_string(i));
        whole = false;
        break;
      }
      hasher.Update(page->second);
      seen += page->second.size();
    }
    if (whole && (seen != size || c.pages.size() != (size + protocol::kCodePageBytes - 1) /
                                                        protocol::kCodePageBytes)) {
      problem("code " + hex + " has " + std::to_string(seen) + " bytes in " +
              std::to_string(c.pages.size()) + " pages; its record says " + std::to_string(size));
    } else if (whole && DigestHex(hasher.Finish()) != hex) {
      problem("code " + hex + " is damaged: its bytes have another sha256");
    }
  }
  for (const auto& [id, e] : experiments) {
    if (e.spec.IsSubmittedCode()) {
      auto c = codes.find(e.spec.CodeHash());
      if (c == codes.end() || !c->second.record.has_value()) {
        problem("experiment " + id + " runs code " + e.spec.working_dir +
                ", which is not in the store");
      }
    }
  }
  return report;
}

}  // namespace ztune::head
