// The framing of the process-trainable protocol: one line per message over a
// pair of non-blocking pipes (docs/process-protocol.md "Framing").
//
// Thread affinity: one thread (the actor's runner thread) uses a channel.
// Every wait polls in short slices and asks `check` between them, so that a
// child that died (while something it started keeps the pipe open) or a
// worker that gave up on the actor ends the wait within one slice.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ztune::worker {

inline constexpr size_t kMaxProtocolLineBytes = 64u << 20;

class LineChannel {
 public:
  // Asked between poll slices; a non-OK status ends the wait with it.
  using Check = std::function<Status()>;

  // The fds stay owned by the caller and must outlive the channel's use.
  LineChannel(int write_fd, int read_fd) : write_fd_(write_fd), read_fd_(read_fd) {}

  // Writes `line` and '\n'. IOError when the reader is gone (EPIPE).
  Status Write(std::string_view line, const Check& check);

  // The next line, without its '\n'. Unavailable at end of file (nothing
  // after the last complete line), ResourceExhausted for a line longer than
  // kMaxProtocolLineBytes (the channel is then unusable).
  Result<std::string> Read(const Check& check);

  // Reads what the peer has written and nobody asked for yet (without
  // waiting) and returns how many bytes are buffered past the last line
  // returned: before a command is sent this must be 0, since the protocol
  // lets a child speak only to answer.
  size_t Unasked();

 private:
  // Waits until `fd` is ready for `events`, one slice at a time.
  Status Wait(int fd, short events, const Check& check);

  int write_fd_;
  int read_fd_;
  std::string buffer_;
  size_t start_ = 0;  // buffer_[start_..] is not yet returned
};

}  // namespace ztune::worker
