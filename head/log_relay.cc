#include "head/log_relay.h"

#include "common/base64.h"
#include "common/status.h"
#include "head/client_reply.h"

namespace ztune::head {
namespace {

// A page: the resolved fields, then bytes [offset, offset + bytes) of a
// section of `size` bytes so far.
Json Page(const LogRead& read, const Json& rid, const std::string& bytes, uint64_t size,
          bool complete) {
  Json reply = read.doc;
  SetReplyRid(reply, rid);
  reply["ok"] = true;
  reply["offset"] = read.offset;
  reply["size"] = size;
  reply["data"] = Base64Encode(bytes);
  reply["next_offset"] = read.offset + bytes.size();
  reply["complete"] = complete;
  return reply;
}

std::string Where(const LogRead& read) {
  return "attempt " + std::to_string(read.attempt) + " of trial " + read.trial_id.str() +
         " on worker " + read.worker_id.str();
}

}  // namespace

protocol::ReadLog LogRelay::RequestFor(const LogRead& read, uint64_t rid) {
  protocol::ReadLog m;
  m.rid = rid;
  m.trial_id = read.trial_id.str();
  m.attempt = read.attempt;
  m.stream = read.stream;
  m.offset = read.offset;
  m.limit = read.limit;
  return m;
}

Json LogRelay::EmptyPage(const LogRead& read, const Json& rid) {
  return Page(read, rid, "", 0, /*complete=*/!read.may_grow);
}

Json LogRelay::WorkerGone(const LogRead& read, const WorkerInfo* known, const Json& rid) {
  const std::string where = known != nullptr && !known->host.empty()
                                ? "on host " + known->host
                                : std::string("on the machine it ran on");
  return ClientErrorReply(
      rid, Status::Unavailable(Where(read) +
                               ": that worker is not connected; its output stays in the "
                               "trial's directory under the worker's --work-dir " +
                               where));
}

void LogRelay::Wait(uint64_t rid, Client client, LogRead read) {
  pending_[rid] = Pending{std::move(client), std::move(read), clock_.NowMs() + timeout_ms_};
}

std::optional<LogRelay::Answer> LogRelay::OnReply(const WorkerId& from,
                                                  const protocol::Reply& reply,
                                                  const std::string& payload) {
  auto it = pending_.find(reply.rid);
  if (it == pending_.end() || it->second.read.worker_id != from) return std::nullopt;
  Pending p = std::move(it->second);
  pending_.erase(it);
  const LogRead& read = p.read;
  // The worker is a peer: every field is checked before use.
  const Json& data = reply.data;
  const auto live = data.is_object() ? data.find("live") : data.end();
  if (live == data.end() || !live->is_boolean()) {
    return Answer{std::move(p.client),
                  ClientErrorReply(p.client.rid,
                                   Status::Internal(Where(read) + ": the worker's answer has no "
                                                                  "boolean \"live\""))};
  }
  if (!reply.ok) {
    const auto code_it = data.find("code");
    StatusCode code = StatusCode::kInternal;
    if (code_it != data.end() && code_it->is_string()) {
      code = StatusCodeFromName(code_it->get<std::string>()).value_or(StatusCode::kInternal);
    }
    if (code == StatusCode::kNotFound && read.may_grow) {
      // The attempt's actor is being created: its output has not begun.
      return Answer{p.client, Page(read, p.client.rid, "", 0, /*complete=*/false)};
    }
    std::string message = Where(read) + ": " + reply.error;
    if (code == StatusCode::kNotFound && reply.error.rfind("no " + read.stream + " file", 0) == 0) {
      message +=
          "; only process trainables write stdout and stderr (a built-in trainable's lines "
          "are in trial.log in the same directory)";
    }
    return Answer{p.client, ClientErrorReply(p.client.rid, Status(code, message))};
  }
  const auto size_it = data.find("size");
  const bool size_ok = size_it != data.end() && size_it->is_number_integer() &&
                       (size_it->is_number_unsigned() || size_it->get<int64_t>() >= 0);
  if (!size_ok || payload.size() > read.limit ||
      size_it->get<uint64_t>() < read.offset + payload.size()) {
    return Answer{
        p.client,
        ClientErrorReply(p.client.rid,
                         Status::Internal(Where(read) + ": the worker's answer is malformed (size, "
                                                        "bytes)"))};
  }
  const bool complete = !live->get<bool>() && !read.may_grow;
  return Answer{p.client, Page(read, p.client.rid, payload, size_it->get<uint64_t>(), complete)};
}

std::vector<LogRelay::Answer> LogRelay::TakeUnanswerable(const WorkerRegistry& registry) {
  std::vector<Answer> out;
  const TimeMs now = clock_.NowMs();
  for (auto it = pending_.begin(); it != pending_.end();) {
    const Pending& p = it->second;
    if (registry.FindAlive(p.read.worker_id) == nullptr) {
      out.push_back(
          Answer{p.client, WorkerGone(p.read, registry.Find(p.read.worker_id), p.client.rid)});
    } else if (now >= p.deadline) {
      out.push_back(Answer{
          p.client, ClientErrorReply(p.client.rid,
                                     Status::Unavailable(Where(p.read) + ": no answer within " +
                                                         std::to_string(timeout_ms_) + " ms"))});
    } else {
      ++it;
      continue;
    }
    it = pending_.erase(it);
  }
  return out;
}

}  // namespace ztune::head
