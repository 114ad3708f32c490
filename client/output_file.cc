#include "client/output_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace ztune::client {

OutputFile::OutputFile(std::ostream& stdout_stream, std::string path)
    : stdout_(stdout_stream), path_(std::move(path)) {}

OutputFile::~OutputFile() {
  if (!partial_.empty()) {
    file_.close();
    std::error_code ec;
    std::filesystem::remove(partial_, ec);
  }
}

Status OutputFile::Open() {
  if (!is_file()) return Status::Ok();
  partial_ = path_ + ".partial-" + std::to_string(::getpid());
  file_.open(partial_, std::ios::binary | std::ios::trunc);
  if (!file_) {
    const std::string why = std::strerror(errno);
    partial_.clear();
    return Status::InvalidArgument("cannot write " + path_ + ": " + why);
  }
  return Status::Ok();
}

std::ostream& OutputFile::out() { return is_file() ? file_ : stdout_; }

Status OutputFile::Commit() {
  if (!is_file()) {
    stdout_.flush();
    return stdout_ ? Status::Ok() : Status::IOError("writing to stdout failed");
  }
  file_.flush();
  const bool written = static_cast<bool>(file_);
  file_.close();
  if (!written) return Status::IOError("writing " + partial_ + " failed (disk full?)");
  std::error_code ec;
  std::filesystem::rename(partial_, path_, ec);
  if (ec) {
    return Status::IOError("cannot rename " + partial_ + " to " + path_ + ": " + ec.message());
  }
  partial_.clear();
  return Status::Ok();
}

}  // namespace ztune::client
