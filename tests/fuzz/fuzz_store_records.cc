// Fuzz target: everything that decodes what the head reads back from its
// store. One target for the whole family, dispatching on the first byte
// (mod 5) so that one corpus and one campaign cover it:
//   0  a trial record (JSON text)       Trial::FromJson, and ScanTrials as Load and
//                                       --check read it (the two must agree), and
//                                       json_text::ReadDom against nlohmann
//   1  an experiment record (JSON text) Experiment::FromJson (spec, search space),
//                                       and ReadDom
//   2  a result / checkpoint key        storage::KeySuffixNumber, and as a
//      trial child record key         storage::ParseTrialChildKey
//   3  a checkpoint's bytes             checkpoint::DecodeEnvelope (what RESTORE hands a worker)
//   4  a whole store image              CheckStore (ztune-head --check), then
//      TrialRunner::Load, a worker re-registering with the live actors the
//      records name, a few head turns, and the client reads of everything.
// A store image is a sequence of records: family byte (mod 5), key length
// (1 byte), key, value length (2 bytes, little-endian), value; lengths are
// clamped to what is left.
//
// Beyond "never crash": a record the head accepted must survive its own
// ToJson -> FromJson (the head rewrites every record it loaded), a key or an
// envelope that decodes must re-encode to the same bytes. A violation aborts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "head/client_service.h"
#include "head/json_text.h"
#include "head/store_check.h"
#include "head/trial.h"
#include "head/trial_records.h"
#include "head/trial_runner.h"
#include "storage/in_memory_store.h"
#include "storage/keys.h"
#include "tests/fakes/same_dom.h"
#include "tests/fuzz/scripted_workers.h"
#include "common/checkpoint/checkpoint_envelope.h"

namespace ztune::fuzz {
namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_store_records: %s: %s\n", what, detail.c_str());
  std::abort();
}

// What a head writes: ToJson().dump() with the default (strict) handler.
template <class T>
std::string Written(const T& record) {
  return record.ToJson().dump();
}

template <class T>
void RecordRoundTrip(std::string_view text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  auto record = T::FromJson(j);
  if (!record.ok()) return;
  const std::string written = Written(*record);
  auto again = T::FromJson(record->ToJson());
  if (!again.ok()) Fail("a loaded record does not load again", again.status().ToString());
  if (Written(*again) != written) Fail("a record changed across store and load", written);
}

using ztune::testing::SameDom;

// The start reads a record's values with json_text::ReadDom instead of
// nlohmann's parser: whatever it reads, nlohmann reads as the same DOM.
void ReadDomAgrees(std::string_view text) {
  const std::optional<Json> got = head::json_text::ReadDom(text);
  if (!got) return;
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) Fail("ReadDom took what nlohmann refuses", std::string(text));
  if (!SameDom(*got, j)) Fail("ReadDom read another DOM", std::string(text));
}

// A start reads trial records through ScanTrials, which keeps the last
// result as its stored text and reads the metric from it
// (head/last_result_scan.h): on every record it must make the trial that
// Trial::FromJson makes of the whole DOM, or refuse it alike.
void LoadPathAgrees(std::string_view text) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  std::string key = "e0001_00000";
  std::string experiment = "e0001";
  if (!j.is_discarded() && j.is_object()) {
    if (auto it = j.find("trial_id"); it != j.end() && it->is_string())
      key = it->get<std::string>();
    if (auto it = j.find("experiment_id"); it != j.end() && it->is_string()) {
      experiment = it->get<std::string>();
    }
  }
  if (key.empty() || storage::IsTrialChildKey(key)) return;
  storage::InMemoryStore store;
  storage::WriteBatch batch;
  batch.Put(storage::Family::kTrials, key, std::string(text));
  if (!store.Commit(batch).ok()) std::abort();
  const head::MetricKeys metrics = {{experiment, "loss"}};
  std::vector<head::StoredTrial> got;
  const Status scanned = head::ScanTrials(
      store,
      [&](head::StoredTrial& st) {
        got.push_back(std::move(st));
        return true;
      },
      &metrics);
  if (!scanned.ok() || got.size() != 1) Fail("the scan of one record failed", scanned.ToString());
  const Result<head::Trial>& fast = got[0].trial;
  if (j.is_discarded()) {
    if (fast.ok()) Fail("the load path took a record that is not JSON", std::string(text));
    return;
  }
  const Result<head::Trial> full = head::Trial::FromJson(j);
  if (fast.ok() != full.ok()) {
    Fail("the load path and the full parse disagree",
         fast.status().ToString() + " / " + full.status().ToString());
  }
  if (!full.ok()) {
    if (fast.status().message() != full.status().message()) {
      Fail("the load path refuses a record differently",
           fast.status().message() + " / " + full.status().message());
    }
    return;
  }
  if (fast->ToJson() != full->ToJson()) Fail("the load path read another trial", std::string(text));
  if (fast->last_result.Metric("loss") != full->last_result.Metric("loss")) {
    Fail("the load path read another metric", std::string(text));
  }
}

void KeyRoundTrip(std::string_view key) {
  if (auto child = storage::ParseTrialChildKey(key)) {
    if (!storage::IsTrialChildKey(key) ||
        storage::TrialChildKey(child->trial_id, child->kind, child->n) != key) {
      Fail("a decoded trial child key does not re-encode to itself", std::string(key));
    }
  }
  auto n = storage::KeySuffixNumber(key);
  if (!n) return;
  const std::string_view trial = key.substr(0, key.size() - 9);
  if (storage::ResultKey(trial, *n) != key || storage::CheckpointKey(trial, *n) != key) {
    Fail("a decoded key does not re-encode to itself", std::string(key));
  }
  if (storage::TrialPrefix(trial) != key.substr(0, key.size() - 8)) {
    Fail("a key's trial prefix differs", std::string(key));
  }
}

void EnvelopeRoundTrip(std::string_view bytes) {
  auto env = checkpoint::DecodeEnvelope(bytes);
  if (!env.ok()) return;
  if (checkpoint::EncodeEnvelope(*env) != bytes)
    Fail("a decoded envelope re-encodes differently", "");
}

// The store image format (see the file comment).
void FillStore(std::string_view in, storage::InMemoryStore& store) {
  storage::WriteBatch batch;
  while (in.size() >= 2) {
    auto family = static_cast<storage::Family>(static_cast<uint8_t>(in[0]) % storage::kNumFamilies);
    size_t key_len = std::min<size_t>(static_cast<uint8_t>(in[1]), in.size() - 2);
    std::string key(in.substr(2, key_len));
    in.remove_prefix(2 + key_len);
    size_t value_len = 0;
    if (in.size() >= 2) {
      value_len = static_cast<uint8_t>(in[0]) | (static_cast<size_t>(static_cast<uint8_t>(in[1])) << 8);
      in.remove_prefix(2);
    } else {
      in = {};
    }
    value_len = std::min(value_len, in.size());
    batch.Put(family, std::move(key), std::string(in.substr(0, value_len)));
    in.remove_prefix(value_len);
  }
  if (!store.Commit(batch).ok()) std::abort();  // InMemoryStore never fails
}

void Dump(const Json& doc) { (void)doc.dump(-1, ' ', false, Json::error_handler_t::replace); }

void StoreImage(std::string_view in) {
  storage::InMemoryStore store;
  FillStore(in, store);

  // ztune-head --check --json / text.
  auto report = head::CheckStore(store);
  if (report.ok()) {
    (void)report->ToText();
    (void)report->ToJson().dump(2);  // as head/main.cc prints it: strict UTF-8
  }

  // A head starting on this store, its worker coming back with the actors the
  // store says it hosts, a few turns, and the reads a client would make.
  ScriptedWorkers workers;
  FakeClock clock;
  head::RunnerOptions options;
  options.heartbeat_ms = 100;
  options.pg_removal_delay_ms = 200;
  head::TrialRunner runner(store, workers, clock, options);
  if (!runner.Load().ok()) return;
  std::vector<std::pair<protocol::LiveActor, std::string>> live;
  for (const auto& [id, e] : runner.experiments()) {
    for (const auto& tid : e.trial_ids) {
      const head::Trial* t = runner.FindTrial(tid);
      if (t == nullptr) Fail("an experiment lists an unknown trial", tid);
      if (t->status != head::TrialStatus::kRunning || t->actor_worker != "w1") continue;
      live.push_back({protocol::LiveActor{t->trial_id, t->attempt, 0, t->iteration, false, {}},
                      e.spec.trainable});
    }
  }
  workers.Register(runner, "w1", 4, 1, live);
  for (int i = 0; i < 3; ++i) workers.Turn(runner, store, clock);
  head::ClientService service(runner);
  Dump(service.Handle(Json{{"op", "status"}, {"rid", 1}}, head::ClientCaller::Anonymous()));
  for (const auto& [id, e] : runner.experiments()) {
    for (const auto& tid : e.trial_ids) {
      Dump(service.Handle(Json{{"op", "results"}, {"rid", 2}, {"trial_id", tid}},
                          head::ClientCaller::Anonymous()));
    }
  }
}

}  // namespace
}  // namespace ztune::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ztune::fuzz;
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      RecordRoundTrip<ztune::head::Trial>(rest);
      LoadPathAgrees(rest);
      ReadDomAgrees(rest);
      break;
    case 1:
      RecordRoundTrip<ztune::head::Experiment>(rest);
      ReadDomAgrees(rest);
      break;
    case 2: KeyRoundTrip(rest); break;
    case 3: EnvelopeRoundTrip(rest); break;
    case 4: StoreImage(rest); break;
  }
  return 0;
}
