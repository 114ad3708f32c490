#include "worker/recent_requests.h"

namespace ztune::worker {

RecentRequests::Seen RecentRequests::Accept(uint64_t rid, const ActorKey& key) {
  auto [it, added] = entries_.try_emplace(rid);
  if (!added) return it->second.answered ? Seen::kAnswered : Seen::kOwed;
  auto [actor, first] = by_actor_.try_emplace(key);
  if (first) actor_order_.push_back(key);
  actor->second.push_back(rid);
  if (actor->second.size() > kPerActor) {
    entries_.erase(actor->second.front());
    actor->second.pop_front();
  }
  EvictActors();
  return Seen::kNew;
}

void RecentRequests::EvictActors() {
  while (actor_order_.size() > max_actors_) {
    auto it = by_actor_.find(actor_order_.front());
    if (it != by_actor_.end()) {
      for (uint64_t rid : it->second) entries_.erase(rid);
      by_actor_.erase(it);
    }
    actor_order_.pop_front();
  }
}

void RecentRequests::Answered(uint64_t rid, const protocol::Message* answer) {
  auto it = entries_.find(rid);
  if (it == entries_.end()) return;
  it->second.answered = true;
  if (answer != nullptr && answer->payload.size() <= kMaxKeptAnswerBytes) {
    it->second.answer = std::make_unique<protocol::Message>(*answer);
  } else {
    it->second.answer.reset();
  }
}

const protocol::Message* RecentRequests::AnswerOf(uint64_t rid) const {
  auto it = entries_.find(rid);
  if (it == entries_.end() || !it->second.answered || !it->second.answer) return nullptr;
  return it->second.answer.get();
}

void RecentRequests::Reopen(uint64_t rid) {
  auto it = entries_.find(rid);
  if (it == entries_.end()) return;
  it->second.answered = false;
  it->second.answer.reset();
}

std::map<ActorKey, std::vector<uint64_t>> RecentRequests::ByActor() const {
  std::map<ActorKey, std::vector<uint64_t>> out;
  for (const auto& [key, rids] : by_actor_) out[key].assign(rids.begin(), rids.end());
  return out;
}

}  // namespace ztune::worker
