// ClientService: the client API (docs/client-protocol.md). Turns JSON requests
// into TrialRunner calls and builds the JSON documents clients see. Lives on
// the head loop thread; not thread-safe.
#pragma once

#include <string>

#include "common/ids.h"
#include "common/json.h"
#include "head/trial_runner.h"

namespace ztune::head {

class ClientService {
 public:
  explicit ClientService(TrialRunner& runner) : runner_(runner) {}

  // Whether `op` changes state (its reply must wait for the turn's commit and
  // it runs before the turn's scheduling), as opposed to a read (answered
  // after the commit, so it sees what the store holds).
  static bool IsMutation(const std::string& op);

  // Handles one request object; always returns a reply object with "ok".
  Json Handle(const Json& request);

  Json ExperimentDoc(const Experiment& e) const;
  Json TrialDoc(const Trial& t) const;

 private:
  Result<Json> Dispatch(const std::string& op, const Json& request);
  Result<Json> Status(const Json& request);
  Result<Json> Results(const TrialId& trial_id, uint64_t offset, uint64_t limit);
  Json Workers() const;
  Json ResourcesDoc() const;

  TrialRunner& runner_;
};

}  // namespace ztune::head
