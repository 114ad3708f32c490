#include "client/project_upload.h"

#include <algorithm>
#include <filesystem>

#include "common/base64.h"
#include "common/checkpoint/directory_archive.h"
#include "common/protocol/messages.h"
#include "common/sha256.h"

namespace ztune::client {

bool LeftOutOfProject(const std::string& rel_path, bool is_dir) {
  const size_t slash = rel_path.rfind('/');
  const std::string name = slash == std::string::npos ? rel_path : rel_path.substr(slash + 1);
  if (is_dir) {
    return name == ".git" || name == ".hg" || name == ".svn" || name == "__pycache__" ||
           name == ".ipynb_checkpoints" || name.rfind(".ztune-", 0) == 0;
  }
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".pyc") == 0;
}

Result<PackedProject> PackProject(const std::string& dir, uint64_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::InvalidArgument("--working-dir " + dir + " is not a directory");
  }
  ASSIGN_OR_RETURN(std::string bytes,
                   checkpoint::PackDirectory(dir, max_bytes, LeftOutOfProject, "project"));
  PackedProject p;
  p.sha256 = Sha256Hex(bytes);
  p.bytes = std::move(bytes);
  return p;
}

Result<UploadStats> UploadProject(HeadClient& client, const PackedProject& project) {
  UploadStats stats;
  const uint64_t size = project.bytes.size();
  auto put = [&](uint64_t offset, std::string_view data) {
    Json args{{"code", project.sha256}, {"size", size}, {"offset", offset}};
    if (!data.empty()) args["data"] = Base64Encode(data);
    return client.Call("put_code", std::move(args));
  };
  // Each round asks where the upload stands, then sends from there; a page
  // refused for its offset (another client uploading the same project, a
  // head restart that forgot the upload) starts a new round.
  constexpr int kMaxRounds = 5;
  for (int round = 0; round < kMaxRounds; ++round) {
    ASSIGN_OR_RETURN(Json reply, put(0, {}));
    if (reply.value("stored", false)) {
      stats.already_stored = stats.bytes_sent == 0;
      return stats;
    }
    bool restart = false;
    while (!restart) {
      const Json& next = reply["next_offset"];
      if (!next.is_number_unsigned() || next.get<uint64_t>() >= size) {
        return Status::Internal("the head's put_code reply has no usable next_offset: " +
                                reply.dump());
      }
      const uint64_t offset = next.get<uint64_t>();
      const uint64_t n = std::min<uint64_t>(protocol::kCodePageBytes, size - offset);
      Result<Json> r = put(offset, std::string_view(project.bytes).substr(offset, n));
      if (!r.ok()) {
        if (r.status().code() != StatusCode::kFailedPrecondition) return r.status();
        restart = true;
        break;
      }
      stats.bytes_sent += n;
      reply = std::move(r).value();
      if (reply.value("stored", false)) return stats;
    }
  }
  return Status::Aborted("the upload of sha256:" + project.sha256 + " was interrupted " +
                         std::to_string(kMaxRounds) + " times; try again");
}

}  // namespace ztune::client
