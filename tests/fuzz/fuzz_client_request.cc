// Fuzz target: client requests as the head handles them (head/head_server.cc
// DrainClients, head/client_service.cc ClientService::Handle).
//
// Input: up to 8 request bodies (the JSON frame a client sends) separated by
// NUL bytes, which valid JSON text never contains. Each input gets a fresh
// head: an InMemoryStore, a TrialRunner on a FakeClock, and ScriptedWorkers
// (one worker "w1", 4 CPUs, 1 GPU) that answer what the runner sends. The
// head already has experiment e0001 (quadratic, trial e0001_00000 PENDING,
// started by the first turn; a checkpoint every 2 iterations), so that ids
// in the seeds name real things; later submits get e0002, e0003, ...
//
// Each request that parses is one head turn, in DrainClients' order: parse
// (ParseJson, depth-limited), mutations handled before the turn's Tick,
// commit, the workers' answers, reads handled after the commit; every reply
// is dumped as SendClientReply does. After a successful mutation a final
// status read dumps every document. Anything that throws out of the head or
// trips a sanitizer is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/json_parse.h"
#include "head/client_service.h"
#include "head/trial_runner.h"
#include "storage/in_memory_store.h"
#include "tests/fuzz/scripted_workers.h"

namespace ztune::fuzz {
namespace {

constexpr size_t kMaxRequests = 8;

head::RunnerOptions Options() {
  head::RunnerOptions o;
  o.heartbeat_ms = 100;
  o.liveness = 3;
  o.pg_removal_delay_ms = 200;
  return o;
}

// The head loop's parts that matter for a request.
struct Head {
  Head() : runner(store, workers, clock, Options()), service(runner) {}

  void Turn() { workers.Turn(runner, store, clock); }

  storage::InMemoryStore store;
  ScriptedWorkers workers;
  FakeClock clock;
  head::TrialRunner runner;
  head::ClientService service;
};

// A head with one registered worker and one submitted experiment whose
// trial waits for the first turn. Deliberately small: the fuzzed requests make
// the states (pause, stop, failing and finished experiments, ...); a richer
// baseline (a store with trials in every state, loaded per input) made the
// target ten times slower, JSON under ASan being what it is, and so did
// running the first turn here (its commit writes the whole spec).
void Setup(Head& h) {
  static const Json kSpec = Json::parse(
      R"({"name": "base", "trainable": "quadratic", "seed": 1, "max_failures": 1,
          "param_space": {"lr": 0.1, "x0": {"uniform": [0, 1]}},
          "metric": "loss", "mode": "min", "stop": {"training_iteration": 40},
          "checkpoint": {"frequency": 2, "num_to_keep": 2, "at_end": true},
          "export_formats": ["json"]})");
  if (!h.runner.Load().ok()) std::abort();
  h.workers.Register(h.runner, "w1", 4, 1);
  if (!h.runner.Submit(kSpec).ok()) std::abort();
}

// What SendClientReply puts on the wire.
void Send(const Json& reply) {
  std::string wire = reply.dump(-1, ' ', false, Json::error_handler_t::replace);
  (void)wire;
}

Json ErrorReply(const std::string& message) {
  return Json{{"ok", false}, {"error", {{"code", "InvalidArgument"}, {"message", message}}}};
}

std::vector<std::string_view> SplitRequests(std::string_view input) {
  std::vector<std::string_view> out;
  while (out.size() < kMaxRequests) {
    size_t nul = input.find('\0');
    out.push_back(input.substr(0, nul));
    if (nul == std::string_view::npos) break;
    input.remove_prefix(nul + 1);
  }
  return out;
}

// Returns whether the request was a mutation that succeeded.
bool HandleRequest(Head& h, std::string_view body) {
  Result<Json> parsed = ParseJson(body);
  if (!parsed.ok()) {
    Send(ErrorReply(parsed.status().message()));
    return false;  // nothing reached the runner: no turn needed
  }
  Json request = std::move(parsed).value();
  if (!request.is_object()) {
    Send(ErrorReply("request is not a JSON object"));
    return false;
  }
  auto op_it = request.find("op");
  const std::string op =
      op_it != request.end() && op_it->is_string() ? op_it->get<std::string>() : "";
  const bool mutation = head::ClientService::IsMutation(op);
  // The caller follows from the input, so that role and ownership checks are
  // fuzzed too: an admin (as on a head without CURVE), a submit key that owns
  // what it submits, or a read key.
  static const head::ClientCaller kCallers[] = {
      head::ClientCaller::Anonymous(),
      head::ClientCaller{"fuzz-submit-key", "fuzzer", head::ClientRole::kSubmit},
      head::ClientCaller{"fuzz-read-key", "reader", head::ClientRole::kRead}};
  const head::ClientCaller& caller = kCallers[body.size() % 3];
  // HeadServer asks first whether the request waits on the head; a held one
  // is handled later (here at once, as at its deadline).
  if (std::optional<TimeMs> wait = h.service.Waits(request);
      wait && (*wait <= 0 || *wait > head::ClientService::kMaxWaitMs)) {
    std::abort();  // Waits' contract: a wait in (0, kMaxWaitMs]
  }
  Json reply;
  if (mutation) reply = h.service.Handle(request, caller);
  h.Turn();
  if (!mutation) reply = h.service.Handle(request, caller);
  if (!reply.is_object() || !reply.contains("ok")) std::abort();  // Handle's contract
  Send(reply);
  return mutation && reply["ok"] == true;
}

}  // namespace
}  // namespace ztune::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ztune::fuzz;
  Head h;
  Setup(h);
  std::string_view input(reinterpret_cast<const char*>(data), size);
  bool changed = false;
  for (std::string_view body : SplitRequests(input)) changed |= HandleRequest(h, body);
  if (changed) {
    // Every document once more, after the mutations' consequences.
    h.Turn();
    Send(h.service.Handle(ztune::Json{{"op", "status"}, {"rid", 0}},
                          ztune::head::ClientCaller::Anonymous()));
  }
  return 0;
}
