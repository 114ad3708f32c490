#include "common/protocol/chunked_transfer.h"

#include <algorithm>

#include "common/check.h"

namespace ztune::protocol {

uint64_t AnnouncedPayloadBytes(const Body& body) {
  if (const auto* r = std::get_if<Reply>(&body)) return r->payload_bytes;
  if (const auto* r = std::get_if<Restore>(&body)) return r->payload_bytes;
  return 0;
}

void SetAnnouncedPayloadBytes(Body& body, uint64_t bytes) {
  if (auto* r = std::get_if<Reply>(&body)) {
    r->payload_bytes = bytes;
    return;
  }
  auto* restore = std::get_if<Restore>(&body);
  CHECK(restore != nullptr);
  restore->payload_bytes = bytes;
}

uint64_t HeaderRid(const Body& body) {
  if (const auto* r = std::get_if<Reply>(&body)) return r->rid;
  const auto* restore = std::get_if<Restore>(&body);
  CHECK(restore != nullptr);
  return restore->rid;
}

// ---------------------------------------------------------------- sender

ChunkSender::ChunkSender(uint64_t chunk_bytes, uint64_t window_bytes)
    : chunk_bytes_(chunk_bytes), window_bytes_(std::max(window_bytes, chunk_bytes)) {
  CHECK(chunk_bytes_ > 0);
}

void ChunkSender::Start(const std::string& peer, uint64_t rid,
                        std::unique_ptr<PayloadSource> payload) {
  CHECK(payload != nullptr && payload->size() > 0);
  auto [it, inserted] = transfers_.try_emplace({peer, rid});
  CHECK(inserted);
  it->second.payload = std::move(payload);
}

Status ChunkSender::OnCredit(const std::string& peer, const Credit& credit) {
  auto it = transfers_.find({peer, credit.rid});
  if (it == transfers_.end()) return Status::Ok();
  if (credit.cancel) {
    transfers_.erase(it);
    return Status::Ok();
  }
  Transfer& t = it->second;
  if (credit.received > t.sent || credit.received < t.credited) {
    return Status::InvalidArgument("CREDIT for request " + std::to_string(credit.rid) +
                                   " reports " + std::to_string(credit.received) +
                                   " bytes received; " + std::to_string(t.credited) +
                                   " were confirmed and " + std::to_string(t.sent) + " sent");
  }
  t.credited = credit.received;
  if (t.credited == t.payload->size()) transfers_.erase(it);
  return Status::Ok();
}

void ChunkSender::TakeSendable(std::vector<Outgoing>& out, std::vector<Failure>* failures) {
  for (auto it = transfers_.begin(); it != transfers_.end();) {
    const auto& key = it->first;
    Transfer& t = it->second;
    const uint64_t size = t.payload->size();
    Status read = Status::Ok();
    // The window counts bytes sent but not yet credited.
    while (t.sent < size && t.sent - t.credited < window_bytes_) {
      const uint64_t n = std::min(chunk_bytes_, size - t.sent);
      Message m{Chunk{key.second, t.sent}, {}};
      read = t.payload->ReadAt(t.sent, n, m.payload);
      if (!read.ok()) break;
      out.push_back({key.first, std::move(m)});
      t.sent += n;
    }
    if (read.ok()) {
      ++it;
      continue;
    }
    CHECK(failures != nullptr);
    failures->push_back({key.first, key.second, std::move(read)});
    it = transfers_.erase(it);
  }
}

bool ChunkSender::Cancel(const std::string& peer, uint64_t rid) {
  return transfers_.erase({peer, rid}) > 0;
}

std::vector<std::pair<uint64_t, std::unique_ptr<PayloadSource>>> ChunkSender::TakePeer(
    const std::string& peer) {
  std::vector<std::pair<uint64_t, std::unique_ptr<PayloadSource>>> out;
  auto it = transfers_.lower_bound({peer, 0});
  while (it != transfers_.end() && it->first.first == peer) {
    out.emplace_back(it->first.second, std::move(it->second.payload));
    it = transfers_.erase(it);
  }
  return out;
}

std::vector<std::string> ChunkSender::Peers() const {
  std::vector<std::string> peers;
  for (const auto& [key, t] : transfers_) {
    if (peers.empty() || peers.back() != key.first) peers.push_back(key.first);
  }
  return peers;
}

// ---------------------------------------------------------------- assembler

Status ChunkAssembler::Expect(const std::string& peer, Message header,
                              std::unique_ptr<PayloadSink> sink) {
  const uint64_t total = AnnouncedPayloadBytes(header.body);
  const uint64_t rid = HeaderRid(header.body);
  const char* name = CommandName(header.body);
  if (total == 0) {
    return Status::InvalidArgument(std::string(name) + " announces an empty chunked payload");
  }
  if (total > max_payload_bytes_) {
    return Status::InvalidArgument(std::string(name) + " announces a payload of " +
                                   std::to_string(total) + " bytes; the limit is " +
                                   std::to_string(max_payload_bytes_) + " bytes");
  }
  if (!header.payload.empty()) {
    return Status::InvalidArgument(std::string(name) +
                                   " announces a chunked payload and carries one inline");
  }
  auto [it, inserted] = pending_.try_emplace({peer, rid});
  if (!inserted) {
    return Status::InvalidArgument(std::string(name) + " for request " + std::to_string(rid) +
                                   " while its payload is already arriving");
  }
  it->second.total = total;
  it->second.sink = std::move(sink);
  // Nothing is allocated for a header alone: a peer that announces the limit
  // and sends nothing costs nothing. See OnChunk for the first chunk.
  it->second.header = std::move(header);
  return Status::Ok();
}

std::variant<ChunkAssembler::Progress, ChunkAssembler::Refusal> ChunkAssembler::OnChunk(
    const std::string& peer, const Chunk& chunk, std::string_view bytes) {
  auto it = pending_.find({peer, chunk.rid});
  if (it == pending_.end()) {
    return Refusal{Status::NotFound("CHUNK for request " + std::to_string(chunk.rid) +
                                    " without a pending header"),
                   std::nullopt};
  }
  Pending& p = it->second;
  const uint64_t received = p.received;
  std::string error;
  if (bytes.empty()) {
    error = "an empty CHUNK";
  } else if (chunk.offset != received) {
    error = "CHUNK at offset " + std::to_string(chunk.offset) + " while " +
            std::to_string(received) + " bytes were received";
  } else if (bytes.size() > p.total - received) {
    error = "CHUNK of " + std::to_string(bytes.size()) + " bytes at offset " +
            std::to_string(chunk.offset) + " runs past the announced " +
            std::to_string(p.total) + " bytes";
  } else if (p.sink != nullptr) {
    if (Status s = p.sink->Append(bytes); !s.ok()) error = s.message();
  }
  if (!error.empty()) {
    Message header = std::move(p.header);
    header.payload.clear();
    pending_.erase(it);
    return Refusal{Status::InvalidArgument("request " + std::to_string(chunk.rid) + ": " + error),
                   std::move(header)};
  }
  if (p.sink == nullptr && received == 0) {
    // The whole announced size at once, so that no later chunk reallocates:
    // a growing string copies everything received into fresh pages at every
    // doubling (and a 64 MiB + 88-byte payload doubles to 128 MiB at its last
    // chunk). On this project's 2-core VM with two CPU burners, perf showed
    // those copies (memmove in page faults) holding the head's loop and the
    // worker's control thread for 0.3-1.3 s, and the peer was declared dead.
    // The reservation is virtual: pages become resident as chunks fill them.
    p.header.payload.reserve(p.total);
  }
  if (p.sink == nullptr) p.header.payload.append(bytes);
  p.received += bytes.size();
  Progress progress;
  progress.credit = Credit{chunk.rid, p.received};
  if (p.received == p.total) {
    progress.done = std::move(p.header);
    progress.sink = std::move(p.sink);
    pending_.erase(it);
  }
  return progress;
}

std::optional<Message> ChunkAssembler::Cancel(const std::string& peer, uint64_t rid) {
  auto it = pending_.find({peer, rid});
  if (it == pending_.end()) return std::nullopt;
  Message header = std::move(it->second.header);
  header.payload.clear();
  pending_.erase(it);
  return header;
}

std::vector<Message> ChunkAssembler::TakePeer(const std::string& peer) {
  std::vector<Message> out;
  auto it = pending_.lower_bound({peer, 0});
  while (it != pending_.end() && it->first.first == peer) {
    Message header = std::move(it->second.header);
    header.payload.clear();
    out.push_back(std::move(header));
    it = pending_.erase(it);
  }
  return out;
}

std::vector<std::string> ChunkAssembler::Peers() const {
  std::vector<std::string> peers;
  for (const auto& [key, p] : pending_) {
    if (peers.empty() || peers.back() != key.first) peers.push_back(key.first);
  }
  return peers;
}

}  // namespace ztune::protocol
