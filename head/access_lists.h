// AccessLists: which public keys may connect to the head, and as what
// (docs/security.md). Two text files, one key per line, '#' comments:
//   workers.allow   <public key> [name]
//   clients.allow   <public key> <role> [name]      role: read | submit | admin
// A name is a label for logs and for the owner of an experiment; it defaults
// to the key's fingerprint.
//
// Value type, immutable once loaded: a reload builds a new one, published to
// the ZAP thread as a shared_ptr<const AccessLists> (head/zap_handler.h).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/security/curve_keys.h"
#include "common/status.h"

namespace ztune::head {

// What a client key may do. Ordered: each role may do what the one before it may.
enum class ClientRole { kRead = 0, kSubmit = 1, kAdmin = 2 };
const char* ClientRoleName(ClientRole role);
std::optional<ClientRole> ParseClientRole(std::string_view name);

struct AllowedKey {
  security::PublicKey key;
  std::string name;
  ClientRole role = ClientRole::kRead;  // clients only
};

class AccessLists {
 public:
  using KeyMap = std::map<std::string, AllowedKey, std::less<>>;

  // Loads both files. A missing file is created empty (with a header saying
  // how to fill it); a malformed line is InvalidArgument naming file and line,
  // and nothing is loaded.
  static Result<AccessLists> Load(const std::string& workers_file, const std::string& clients_file);
  // Parses one file's text (`what` names it in errors).
  static Status ParseWorkers(std::string_view text, const std::string& what, KeyMap* out);
  static Status ParseClients(std::string_view text, const std::string& what, KeyMap* out);

  // Keyed by the Z85 text; null when the key is not allowed.
  const AllowedKey* FindWorker(std::string_view z85) const;
  const AllowedKey* FindClient(std::string_view z85) const;
  size_t num_workers() const { return workers_.size(); }
  size_t num_clients() const { return clients_.size(); }

 private:
  KeyMap workers_;
  KeyMap clients_;
};

}  // namespace ztune::head
