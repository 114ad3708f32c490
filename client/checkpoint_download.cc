#include "client/checkpoint_download.h"

#include <filesystem>
#include <fstream>

#include "common/base64.h"
#include "common/checkpoint/checkpoint_envelope.h"
#include "common/checkpoint/directory_archive.h"

namespace ztune::client {
namespace fs = std::filesystem;
namespace {

// The whole checkpoint, page by page; checks that the pages add up.
Result<Json> Download(const CommandContext& ctx, const std::string& trial_id,
                      std::optional<int64_t> iteration, std::string& bytes) {
  Json first;
  uint64_t offset = 0;
  while (true) {
    Json args{{"trial_id", trial_id}, {"offset", offset}};
    if (iteration.has_value()) args["iteration"] = *iteration;
    Result<Json> reply = ctx.client.Call("checkpoint", std::move(args));
    if (!reply.ok()) return reply.status();
    const Json& r = *reply;
    if (!r.contains("data") || !r["data"].is_string() || !r.contains("size") ||
        !r["size"].is_number_unsigned() || !r.contains("checkpoint_id")) {
      return Status::Internal("the head's checkpoint reply lacks data, size or checkpoint_id");
    }
    if (first.is_null()) {
      first = r;
      first.erase("data");
      // Pin the checkpoint: a newer one saved meanwhile must not mix in.
      iteration = r.value("iteration", int64_t{0});
    } else if (r["checkpoint_id"] != first["checkpoint_id"]) {
      return Status::Aborted("the checkpoint changed while it was being read; try again");
    }
    auto piece = Base64Decode(r["data"].get<std::string>());
    if (!piece.ok())
      return Status::Internal("the head sent bad base64: " + piece.status().message());
    bytes += *piece;
    const Json& next = r["next_offset"];
    if (!next.is_number_unsigned() || next.get<uint64_t>() <= offset) break;
    offset = next.get<uint64_t>();
  }
  if (bytes.size() != first["size"].get<uint64_t>()) {
    return Status::Internal("got " + std::to_string(bytes.size()) + " checkpoint bytes of " +
                            std::to_string(first["size"].get<uint64_t>()));
  }
  return first;
}

// `dir` must be new, or an empty directory: nothing is overwritten. Checked
// before the download; created only once there is something to write.
Status CheckDirectory(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::Ok();
  if (!fs::is_directory(dir, ec))
    return Status::InvalidArgument(dir + " exists and is not a directory");
  if (!fs::is_empty(dir, ec)) {
    return Status::InvalidArgument(
        dir + " is not empty (nothing is overwritten; choose a new directory)");
  }
  return Status::Ok();
}

// Writes the checkpoint's data into `dir` (created if new): a packed
// directory unpacked, other bytes as checkpoint.bin. On failure nothing the
// command made is left: the directory is removed if it created it, emptied
// otherwise.
Status WriteCheckpoint(std::string_view data, const std::string& dir, bool directory) {
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  Status s = Status::Ok();
  if (directory) {
    s = checkpoint::UnpackDirectory(data, dir);
  } else {
    const fs::path file = fs::path(dir) / "checkpoint.bin";
    std::ofstream out(file, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.close();
    if (!out) s = Status::IOError("cannot write " + file.string());
  }
  if (!s.ok()) {
    if (existed) {
      for (const auto& entry : fs::directory_iterator(dir, ec)) fs::remove_all(entry.path(), ec);
    } else {
      fs::remove_all(dir, ec);
    }
  }
  return s;
}

}  // namespace

int RunCheckpoint(const CommandContext& ctx, const std::string& trial_id,
                  std::optional<int64_t> iteration, const std::string& out_dir, bool json) {
  if (Status s = CheckDirectory(out_dir); !s.ok()) {
    ctx.err << "error: " << s.message() << "\n";
    return kExitUsage;
  }
  std::string bytes;
  Result<Json> info = Download(ctx, trial_id, iteration, bytes);
  if (!info.ok()) return ReportCallError(ctx, info.status());
  auto envelope = checkpoint::DecodeEnvelope(bytes);
  if (!envelope.ok()) {
    ctx.err << "error: checkpoint of " << trial_id << " is damaged: " << envelope.status().message()
            << "\n";
    return kExitUsage;
  }
  // A process trainable's checkpoint is a packed directory; anything else is
  // the opaque bytes of a built-in trainable's Save.
  const bool directory = checkpoint::IsDirectoryArchive(envelope->data);
  const std::string kind = directory ? "directory" : "bytes";
  if (Status s = WriteCheckpoint(envelope->data, out_dir, directory); !s.ok()) {
    if (s.code() == StatusCode::kCorruption) {
      ctx.err << "error: checkpoint of " << trial_id << " is damaged: " << s.message() << "\n";
    } else {
      ctx.err << "error: " << s.message() << "\n";
    }
    return kExitUsage;
  }
  Json summary{{"trial_id", trial_id},
               {"iteration", envelope->iteration},
               {"checkpoint_id", (*info)["checkpoint_id"]},
               {"trainable", envelope->trainable},
               {"saved_by", envelope->trial_id},
               {"time_total_s", envelope->time_total_s},
               {"kind", kind},
               {"bytes", bytes.size()},
               {"directory", out_dir}};
  if (envelope->timesteps_total.has_value())
    summary["timesteps_total"] = *envelope->timesteps_total;
  if (json) {
    ctx.out << summary.dump(2) << "\n";
  } else {
    ctx.out << "checkpoint of trial " << trial_id << " at iteration " << envelope->iteration
            << " (trainable " << envelope->trainable << ", " << bytes.size()
            << " bytes) written to " << out_dir << (kind == "bytes" ? "/checkpoint.bin" : "")
            << "\n";
  }
  return kExitOk;
}

}  // namespace ztune::client
