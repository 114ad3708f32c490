// RecentRequests: the request ids this worker has accepted lately, and the
// answers it sent for them. The head sends a request again, with the same
// rid, when the worker reconnected and the request or its answer may have been
// lost (docs/protocol.md §3, "Reconnecting"); this makes such a resend safe:
// a request still being worked on is not run twice, and one already answered
// gets its answer again.
//
// Bounded per actor (the newest kPerActor rids: the head has only a few
// requests outstanding per actor) and in actors (of more than `max_actors`
// keys, the first seen are forgotten first). Control thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/protocol/messages.h"
#include "worker/actor_runner.h"

namespace ztune::worker {

class RecentRequests {
 public:
  explicit RecentRequests(size_t max_actors = 4096) : max_actors_(max_actors) {}
  static constexpr size_t kPerActor = 16;

  enum class Seen {
    kNew,       // first time: now recorded as owed
    kOwed,      // accepted before and not answered yet: its answer will follow
    kAnswered,  // answered before: answer again (AnswerOf) or run it again
  };
  // Records `rid` (for actor `key`) unless it is known.
  Seen Accept(uint64_t rid, const ActorKey& key);
  // `rid` was answered. `answer` is kept (a copy) when given: answers with a
  // payload (checkpoints) or results kept in the outbox are not.
  void Answered(uint64_t rid, const protocol::Message* answer);
  // The kept answer of an answered rid, or nullptr.
  const protocol::Message* AnswerOf(uint64_t rid) const;
  // An answered rid is run again (its answer was not kept): owed again.
  void Reopen(uint64_t rid);
  // Rids recorded per actor key, oldest first.
  std::map<ActorKey, std::vector<uint64_t>> ByActor() const;

  // Answers larger than this are not kept (the request runs again instead).
  static constexpr size_t kMaxKeptAnswerBytes = 64 * 1024;

 private:
  // One per request: a few bytes, as there is one per TRAIN (the answer, kept
  // rarely, lives apart).
  struct Entry {
    bool answered = false;
    std::unique_ptr<protocol::Message> answer;
  };
  void EvictActors();

  size_t max_actors_;
  std::unordered_map<uint64_t, Entry> entries_;
  ActorKeyMap<std::deque<uint64_t>> by_actor_;  // acceptance order
  std::deque<ActorKey> actor_order_;  // first use of each key, for eviction
};

}  // namespace ztune::worker
