// ClientService: the client API (docs/client-protocol.md). Turns JSON requests
// into TrialRunner calls and builds the JSON documents clients see. Lives on
// the head loop thread; not thread-safe.
#pragma once

#include <optional>

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/ids.h"
#include "common/json.h"
#include "common/protocol/payload_source.h"
#include "head/access_lists.h"
#include "head/log_relay.h"
#include "head/trial_runner.h"

namespace ztune::head {

// Who sent a request: the key its connection authenticated with, that key's
// name and role in the clients allow-list.
struct ClientCaller {
  std::string key;  // Z85; empty for an anonymous caller
  std::string name;
  ClientRole role = ClientRole::kRead;

  // A head started with --insecure cannot tell callers apart: each may do
  // everything.
  static ClientCaller Anonymous() { return ClientCaller{"", "anonymous", ClientRole::kAdmin}; }
};

class ClientService {
 public:
  explicit ClientService(TrialRunner& runner) : runner_(runner) {}

  // Whether `op` changes state (its reply must wait for the turn's commit and
  // it runs before the turn's scheduling), as opposed to a read (answered
  // after the commit, so it sees what the store holds).
  static bool IsMutation(const std::string& op);

  // Handles one request object from `caller`; always returns a reply object
  // with "ok". A request its role does not allow changes nothing and is
  // answered PermissionDenied.
  Json Handle(const Json& request, const ClientCaller& caller);
  // Handle's reply as the JSON text a client is sent. A `trials` or `status`
  // read writes its page of trial documents as text (TrialDocText) instead of
  // building their DOMs; its members may come in another order than Handle's
  // dump. Every other request (and every refused one) is Handle's reply.
  std::string HandleText(const Json& request, const ClientCaller& caller);

  // How long `request` may wait on the head before it is handled
  // (docs/client-protocol.md, "Waiting requests"): the wait_ms of an
  // add_trial whose experiment has no trial slot now, or of a wait_trials
  // none of whose trials has finished. nullopt: handle it now, also when it
  // is malformed (Handle says why).
  std::optional<TimeMs> Waits(const Json& request) const;
  static constexpr TimeMs kMaxWaitMs = 60'000;
  static constexpr size_t kMaxWaitTrialIds = 1000;

  // A `logs` request resolved to the attempt and worker to read from
  // (head/log_relay.h). Reads are allowed to every role. InvalidArgument for
  // bad arguments, NotFound for an unknown trial or an attempt without a
  // remembered host.
  Result<LogRead> PlanLogRead(const Json& request) const;

  Json ExperimentDoc(const Experiment& e) const;
  Json TrialDoc(const Trial& t) const;

 private:
  Result<Json> Dispatch(const std::string& op, const Json& request, const ClientCaller& caller);
  // read ops: any role; submit, add_trial, stop, pause, resume: submit on
  // one's own experiments, admin on any. Unknown ops pass (Dispatch names them).
  ztune::Status Authorize(const std::string& op, const Json& request,
                          const ClientCaller& caller) const;
  // The experiment a mutation acts on (by experiment id, or a trial's), null
  // when it names none that exists.
  const Experiment* TargetOf(const std::string& op, const Json& request) const;
  // The trials a `trials` or `status` read shows (one page), and for a
  // status the experiments it shows.
  struct TrialSelection {
    std::vector<const Experiment*> experiments;
    std::vector<const Trial*> trials;
    uint64_t offset = 0;
    uint64_t total = 0;  // trials of the experiments selected
  };
  Result<TrialSelection> SelectTrials(const Json& request) const;
  Result<TrialSelection> SelectStatus(const Json& request) const;
  // A status reply but its trials.
  Json StatusRest(const TrialSelection& sel) const;
  Result<Json> Status(const Json& request);
  // add_trial: adds the config; with wait_ms, only into a free trial slot
  // (Unavailable when none came free in time; HeadServer held the request).
  Result<Json> AddTrial(const Json& request);
  // wait_trials: which of the listed trials have finished (TrialDocs) and
  // which have not.
  Result<Json> WaitTrials(const Json& request) const;
  Result<Json> Results(const TrialId& trial_id, uint64_t offset, uint64_t limit);
  // Bytes [offset, offset + limit) of a trial's persistent checkpoint (the
  // newest, or the one taken at `iteration`), base64 in "data".
  Result<Json> Checkpoint(const TrialId& trial_id, std::optional<int64_t> iteration,
                          uint64_t offset, uint64_t limit);
  Json Workers() const;
  Json ResourcesDoc() const;

  TrialRunner& runner_;
  // The checkpoint `checkpoint` reads are serving, whole, until its last
  // page is served (head loop only).
  struct CachedCheckpoint {
    TrialId trial_id;
    uint64_t id = 0;
    // The bytes in memory (inline checkpoints), or the open file.
    std::unique_ptr<protocol::PayloadSource> bytes;
  };
  CachedCheckpoint cached_checkpoint_;
};

}  // namespace ztune::head
