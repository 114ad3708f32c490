#include "head/head_keys.h"

#include <filesystem>

#include <spdlog/spdlog.h>

namespace ztune::head {

std::vector<std::string> HeadCompanionFiles() {
  return {std::string(kHeadKeyBase) + ".key", std::string(kHeadKeyBase) + ".pub", kWorkersAllowFile,
          kClientsAllowFile};
}

Result<security::KeyPair> EnsureHeadKeyPair(const std::string& base) {
  const std::string secret = security::SecretKeyPath(base);
  std::error_code ec;
  if (std::filesystem::exists(secret, ec)) return security::ReadKeyPairFile(secret);
  ASSIGN_OR_RETURN(security::KeyPair pair, security::GenerateKeyPair());
  RETURN_IF_ERROR(security::WriteKeyPairFiles(base, pair, /*overwrite=*/false));
  spdlog::info("created the head's key pair: {} (public key {})", secret, pair.public_key.z85());
  return pair;
}

}  // namespace ztune::head
