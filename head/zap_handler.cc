#include "head/zap_handler.h"

#include <spdlog/spdlog.h>

#include "common/security/curve_keys.h"
#include "common/zmq/socket_util.h"

namespace ztune::head {
namespace {
constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr size_t kMaxLoggedKeys = 10000;
}  // namespace

Status ZapHandler::Start(std::shared_ptr<const AccessLists> lists) {
  {
    std::lock_guard lock(mu_);
    lists_ = std::move(lists);
  }
  try {
    socket_.emplace(context_, zmq::socket_type::rep);
    socket_->set(zmq::sockopt::linger, 0);
    socket_->bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    socket_.reset();
    return Status::Unavailable(std::string("cannot bind the ZAP handler: ") + e.what());
  }
  // The socket moves to the handler thread; thread creation orders the two.
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void ZapHandler::Publish(std::shared_ptr<const AccessLists> lists) {
  std::lock_guard lock(mu_);
  lists_ = std::move(lists);
  lists_changed_ = true;
}

void ZapHandler::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  thread_.join();
  socket_.reset();
}

std::shared_ptr<const AccessLists> ZapHandler::Published() {
  std::lock_guard lock(mu_);
  return lists_;
}

std::shared_ptr<const AccessLists> ZapHandler::Current() {
  std::lock_guard lock(mu_);
  if (lists_changed_) {
    lists_changed_ = false;
    logged_.clear();  // a key refused again after a reload is worth a line again
  }
  return lists_;
}

std::vector<std::string> ZapHandler::Answer(const std::vector<zmq::message_t>& request) {
  // version, request id, domain, address, identity, mechanism, credentials...
  std::string request_id = request.size() > 1 ? request[1].to_string() : std::string();
  auto reply = [&](const char* code, const std::string& text, const std::string& user) {
    return std::vector<std::string>{"1.0", request_id, code, text, user, ""};
  };
  if (request.size() < 6 || request[0].to_string_view() != "1.0") {
    refused_.fetch_add(1);
    spdlog::warn("malformed ZAP request ({} frames) refused", request.size());
    return reply("500", "malformed ZAP request", "");
  }
  const std::string domain = request[2].to_string();
  const std::string address = request[3].to_string();
  const std::string mechanism = request[5].to_string();
  if (mechanism != "CURVE" || request.size() != 7) {
    refused_.fetch_add(1);
    spdlog::warn("refused a {} connection from {}: mechanism {} (the head requires CURVE)", domain,
                 address, mechanism);
    return reply("400", "CURVE required", "");
  }
  auto key = security::PublicKey::FromBytes(request[6].to_string_view());
  if (!key.ok()) {
    refused_.fetch_add(1);
    return reply("400", "bad credentials", "");
  }
  std::shared_ptr<const AccessLists> lists = Current();
  const AllowedKey* allowed = nullptr;
  const char* list_name = "";
  if (domain == kWorkersZapDomain) {
    allowed = lists ? lists->FindWorker(key->z85()) : nullptr;
    list_name = "workers";
  } else if (domain == kClientsZapDomain) {
    allowed = lists ? lists->FindClient(key->z85()) : nullptr;
    list_name = "clients";
  }
  if (allowed == nullptr) {
    refused_.fetch_add(1);
    const std::string fingerprint = key->Fingerprint();
    if (logged_.size() >= kMaxLoggedKeys) logged_.clear();
    if (logged_.insert(domain + "/" + fingerprint).second) {
      spdlog::warn("refused a {} connection from {}: key {} ({}) is not in the {} allow-list",
                   domain, address, fingerprint, key->z85(), list_name);
    }
    return reply("400", "key not allowed", "");
  }
  accepted_.fetch_add(1);
  spdlog::debug("{} connection from {} authenticated: key {} ({})", domain, address,
                key->Fingerprint(), allowed->name);
  return reply("200", "OK", key->z85());
}

void ZapHandler::Run() {
  zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
  while (!stop_.load()) {
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      spdlog::error("ZAP handler poll: {}; authentication stops", e.what());
      return;
    }
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    auto request = zmqutil::RecvMultipart(*socket_);
    if (!request.ok()) {
      spdlog::error("ZAP handler: {}", request.status().ToString());
      continue;
    }
    if (request->empty()) continue;
    Status sent = zmqutil::SendFrames(*socket_, Answer(*request));
    if (!sent.ok()) spdlog::error("ZAP handler reply: {}", sent.ToString());
  }
}

}  // namespace ztune::head
