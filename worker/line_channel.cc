#include "worker/line_channel.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ztune::worker {
namespace {

constexpr int kSliceMs = 20;

}  // namespace

Status LineChannel::Wait(int fd, short events, const Check& check) {
  while (true) {
    if (Status s = check(); !s.ok()) return s;
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, kSliceMs);
    if (r > 0) return Status::Ok();  // ready, or an error/hang-up the caller's call reports
    if (r < 0 && errno != EINTR)
      return Status::IOError(std::string("poll: ") + std::strerror(errno));
  }
}

Status LineChannel::Write(std::string_view line, const Check& check) {
  std::string data(line);
  data.push_back('\n');
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(write_fd_, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Status s = Wait(write_fd_, POLLOUT, check); !s.ok()) return s;
      continue;
    }
    return Status::IOError(std::string("cannot write to the process: ") +
                           (n < 0 ? std::strerror(errno) : "short write"));
  }
  return Status::Ok();
}

Result<std::string> LineChannel::Read(const Check& check) {
  size_t scanned = start_;
  while (true) {
    size_t nl = buffer_.find('\n', scanned);
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(start_, nl - start_);
      start_ = nl + 1;
      if (start_ == buffer_.size()) {
        buffer_.clear();
        start_ = 0;
      } else if (start_ > (1u << 20)) {
        buffer_.erase(0, start_);
        start_ = 0;
      }
      return line;
    }
    scanned = buffer_.size();
    if (buffer_.size() - start_ > kMaxProtocolLineBytes) {
      return Status::ResourceExhausted("a reply line is longer than " +
                                       std::to_string(kMaxProtocolLineBytes) + " bytes");
    }
    char buf[65536];
    ssize_t n = read(read_fd_, buf, sizeof(buf));
    if (n > 0) {
      buffer_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      return Status::Unavailable(buffer_.size() > start_ ? "the reply pipe closed mid-line"
                                                         : "the reply pipe closed");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Status s = Wait(read_fd_, POLLIN, check); !s.ok()) return s;
      continue;
    }
    return Status::IOError(std::string("cannot read from the process: ") + std::strerror(errno));
  }
}

size_t LineChannel::Unasked() {
  char buf[4096];
  while (buffer_.size() - start_ <= kMaxProtocolLineBytes) {
    ssize_t n = read(read_fd_, buf, sizeof(buf));
    if (n > 0) {
      buffer_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // nothing more now, end of file, or an error the next Read reports
  }
  return buffer_.size() - start_;
}

}  // namespace ztune::worker
