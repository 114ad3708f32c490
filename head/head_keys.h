// The head's own CURVE key pair and the default places of its security files
// in the data directory (docs/security.md).
#pragma once

#include <string>
#include <vector>

#include "common/security/curve_keys.h"
#include "common/status.h"

namespace ztune::head {

inline constexpr char kHeadKeyBase[] = "head";  // head.key (0600), head.pub
inline constexpr char kWorkersAllowFile[] = "workers.allow";
inline constexpr char kClientsAllowFile[] = "clients.allow";

// The file names above: the store treats a directory holding only these as fresh.
std::vector<std::string> HeadCompanionFiles();

// Reads `<base>.key`, or creates the pair (and `<base>.pub`) at first start.
// FailedPrecondition when the secret file may be read by others: the head
// refuses to start with a key that may have leaked.
Result<security::KeyPair> EnsureHeadKeyPair(const std::string& base);

}  // namespace ztune::head
