#include "head/client_args.h"

#include <set>

namespace ztune::head {

Result<std::string> StringArg(const Json& request, const char* key) {
  auto it = request.find(key);
  if (it == request.end() || !it->is_string() || it->get<std::string>().empty()) {
    return Status::InvalidArgument(std::string("missing string argument '") + key + "'");
  }
  return it->get<std::string>();
}

Result<TrialId> TrialIdArg(const Json& request, const char* key) {
  ASSIGN_OR_RETURN(std::string text, StringArg(request, key));
  return TrialId(std::move(text));
}

Result<uint64_t> UIntArg(const Json& request, const char* key) {
  auto it = request.find(key);
  if (it == request.end() ||
      !(it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0))) {
    return Status::InvalidArgument(std::string("argument '") + key + "' must be an integer >= 0");
  }
  return it->get<uint64_t>();
}

Result<std::optional<uint64_t>> OptionalUIntArg(const Json& request, const char* key,
                                                uint64_t max) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return std::optional<uint64_t>();
  ASSIGN_OR_RETURN(uint64_t v, UIntArg(request, key));
  if (v > max) {
    return Status::InvalidArgument(std::string("argument '") + key + "' must be at most " +
                                   std::to_string(max));
  }
  return std::optional<uint64_t>(v);
}

Result<std::vector<TrialId>> TrialIdsArg(const Json& request, const char* key, size_t max) {
  auto it = request.find(key);
  const std::string what = std::string("argument '") + key + "'";
  if (it == request.end() || !it->is_array() || it->empty() || it->size() > max) {
    return Status::InvalidArgument(what + " must be an array of 1 to " + std::to_string(max) +
                                   " trial ids");
  }
  std::vector<TrialId> ids;
  std::set<std::string> seen;
  ids.reserve(it->size());
  for (const Json& id : *it) {
    if (!id.is_string() || id.get<std::string>().empty()) {
      return Status::InvalidArgument(what + " must hold trial ids (non-empty strings)");
    }
    if (!seen.insert(id.get<std::string>()).second) {
      return Status::InvalidArgument(what + " names trial " + id.get<std::string>() + " twice");
    }
    ids.emplace_back(id.get<std::string>());
  }
  return ids;
}

}  // namespace ztune::head
