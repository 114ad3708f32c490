// CodeCache: submitted project code on this worker (docs/process-protocol.md
// "Submitted code"). An archive is fetched from the head page by page
// (FETCH_CODE / CODE) into <root>/<sha256>.part, checked against its sha256,
// renamed to <root>/<sha256>.zar, and unpacked by the first actor that needs
// it into <root>/<sha256>/, which then serves every later actor (and a
// restarted worker: the directory is the cache).
//
// Thread affinity: Want, DueRequests, ResendAll and OnPage belong to the
// control thread, which never waits and never unpacks (a big project would
// stall heartbeats). Await runs on actor threads: it waits for the fetch and
// unpacks. The state both sides see is under mu_; unpacking is serialised by
// unpack_mu_, never held with mu_.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/protocol/messages.h"
#include "common/sha256.h"
#include "common/status.h"

namespace ztune::worker {

class CodeCache {
 public:
  // The largest archive a worker accepts: what a head can be configured to store.
  static constexpr uint64_t kMaxArchiveBytes = 4ULL << 30;

  // `root` is made absolute and created on first use; leftovers of an
  // interrupted fetch or unpack are removed.
  explicit CodeCache(std::string root);

  // <root>/<hex>: where the project `hex` is (or will be) unpacked.
  std::string DirOf(std::string_view hex) const;

  // Control thread. Makes sure `hex` is here or on its way: starts a fetch
  // unless the directory or the archive is here or a fetch is under way (a
  // failed one starts again).
  void Want(const std::string& hex);
  // Control thread. The requests to send now: the first page of new fetches,
  // and the current page of fetches that heard nothing for `resend_ms`.
  std::vector<protocol::FetchCode> DueRequests(TimeMs now, TimeMs resend_ms);
  // Control thread. Every fetch asks again at the next DueRequests (the link
  // to the head was renewed: what was in flight is lost).
  void ResendAll();
  // Control thread. A CODE page. Returns the next request of that fetch, if
  // it goes on; a page of no current fetch or at another offset (a resent
  // request's second answer) is ignored.
  std::optional<protocol::FetchCode> OnPage(const protocol::CodePage& page, std::string_view bytes,
                                            TimeMs now);

  // Actor threads. Waits until `hex` is fetched, unpacks it if that was not
  // done, and returns its directory. Aborted once `*stop` is set (the actor
  // was abandoned); the fetch's error if it failed (Unavailable "cannot get
  // code ..."); Corruption or IOError if unpacking failed.
  Result<std::string> Await(const std::string& hex, const std::atomic<bool>* stop);

  // Fetches in progress (tests).
  size_t fetching() const;

 private:
  enum class State { kFetching, kFetched, kFailed };
  struct Entry {
    State state = State::kFetching;
    std::string error;
    // Fetching only (control thread): the .part file, the bytes so far.
    std::ofstream file;
    Sha256 hasher;
    uint64_t offset = 0;
    uint64_t size = 0;         // from the first page
    TimeMs last_request = -1;  // -1: due now
  };
  // Control thread, mu_ held: ends a fetch.
  void FailLocked(const std::string& hex, Entry& e, std::string error);
  std::string PathOf(std::string_view hex, const char* suffix) const;

  const std::string root_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Entry, std::less<>> entries_;
  std::mutex unpack_mu_;
  uint64_t unpack_serial_ = 0;  // under unpack_mu_
};

}  // namespace ztune::worker
