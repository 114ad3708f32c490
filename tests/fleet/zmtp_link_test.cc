// The fleet's own ZMTP client (bench/fleet/zmtp_link.h) against libzmq: a
// real ROUTER on loopback, with CURVE and without, as the head binds it.
// What the link sends must arrive as a libzmq DEALER's messages would, and
// what the ROUTER sends must come out of the link frame for frame; the ways
// a connection ends must be told apart (refused, cut, refused key, wrong
// head key, another mechanism).
#include "bench/fleet/zmtp_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/protocol/codec.h"

namespace ztune::fleet {
namespace {

using Frames = std::vector<std::string>;

struct Z85Pair {
  std::string public_z85, secret_z85;
};

Z85Pair NewPair() {
  char pub[41], sec[41];
  EXPECT_EQ(zmq_curve_keypair(pub, sec), 0);
  return {pub, sec};
}

CurveKeys RawKeys(const std::string& server_z85, const Z85Pair& own) {
  CurveKeys k{};
  EXPECT_NE(zmq_z85_decode(k.server, server_z85.c_str()), nullptr);
  EXPECT_NE(zmq_z85_decode(k.public_key, own.public_z85.c_str()), nullptr);
  EXPECT_NE(zmq_z85_decode(k.secret_key, own.secret_z85.c_str()), nullptr);
  return k;
}

class ZmtpLinkTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    ASSERT_GE(epoll_fd_, 0);
    server_pair_ = NewPair();
    client_pair_ = NewPair();
  }
  void TearDown() override { close(epoll_fd_); }

  bool curve() const { return GetParam(); }

  // A ROUTER as the head binds it (CURVE server, or plain), on a free port
  // unless `endpoint` names one (zmq::error_t if it is taken).
  void Bind(const std::string& zap_domain = "", const std::string& endpoint = "tcp://127.0.0.1:*") {
    router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::rcvtimeo, 5000);
    if (curve()) {
      router_.set(zmq::sockopt::curve_server, 1);
      router_.set(zmq::sockopt::curve_secretkey, server_pair_.secret_z85);
      if (!zap_domain.empty()) router_.set(zmq::sockopt::zap_domain, zap_domain);
    }
    router_.bind(endpoint);
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  }

  void Connect(const CurveKeys* keys) {
    auto address = ResolveTcpEndpoint(endpoint_);
    ASSERT_TRUE(address.ok()) << address.status().ToString();
    auto link =
        ZmtpLink::Connect(*address, epoll_fd_, 7, "worker-1", keys, protocol::kMaxFrameBytes);
    ASSERT_TRUE(link.ok()) << link.status().ToString();
    link_ = std::move(*link);
  }
  void Connect() {
    const CurveKeys keys = RawKeys(server_pair_.public_z85, client_pair_);
    Connect(curve() ? &keys : nullptr);
  }

  // Runs the link's events until `done` or 5 s; returns the last outcome.
  ZmtpLink::Outcome Pump(const std::function<bool()>& done) {
    ZmtpLink::Outcome outcome = ZmtpLink::Outcome::kOpen;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      if (link_->closed())
        return outcome == ZmtpLink::Outcome::kOpen ? ZmtpLink::Outcome::kRefused : outcome;
      epoll_event ev[4];
      const int n = epoll_wait(epoll_fd_, ev, 4, 10);
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(ev[k].data.u64, 7u);
        outcome = link_->OnEvents(ev[k].events, [&](std::span<const std::string_view> frames) {
          received_.emplace_back(frames.begin(), frames.end());
        });
        if (outcome != ZmtpLink::Outcome::kOpen) return outcome;
      }
    }
    return outcome;
  }

  Frames ServerRecv() {
    Frames frames;
    while (true) {
      zmq::message_t m;
      if (!router_.recv(m)) break;
      frames.push_back(m.to_string());
      if (!m.more()) break;
    }
    return frames;
  }

  void ServerSend(const Frames& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      router_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  zmq::context_t ctx_;
  zmq::socket_t router_;
  std::string endpoint_;
  int epoll_fd_ = -1;
  Z85Pair server_pair_, client_pair_;
  std::unique_ptr<ZmtpLink> link_;
  std::vector<Frames> received_;
};

TEST_P(ZmtpLinkTest, CarriesMultipartMessagesBothWaysAsADealer) {
  Bind();
  Connect();
  // Sent before the handshake: it waits for it, as in libzmq's queue.
  const std::string long_frame(300, 'x');
  link_->Send(Frames{"hello", long_frame});
  EXPECT_EQ(link_->Flush(), ZmtpLink::Outcome::kOpen);
  std::thread pump([&] { Pump([&] { return link_->ready() && !received_.empty(); }); });
  // The ROUTER sees the Identity property as the routing id.
  EXPECT_EQ(ServerRecv(), (Frames{"worker-1", "hello", long_frame}));
  const std::string big(70'000, 'y');
  ServerSend(Frames{"worker-1", "a", big, ""});
  pump.join();
  ASSERT_EQ(received_.size(), 1u);
  EXPECT_EQ(received_[0], (Frames{"a", big, ""}));

  // Many in a row each way: nonces count up, frames stay in order.
  constexpr int kMessages = 500;
  for (int i = 0; i < kMessages; ++i) link_->Send(Frames{"up", std::to_string(i)});
  EXPECT_EQ(link_->Flush(), ZmtpLink::Outcome::kOpen);
  std::thread pump2([&] { Pump([&] { return received_.size() == 1 + kMessages; }); });
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(ServerRecv(), (Frames{"worker-1", "up", std::to_string(i)}));
  }
  for (int i = 0; i < kMessages; ++i) ServerSend(Frames{"worker-1", "down", std::to_string(i)});
  pump2.join();
  ASSERT_EQ(received_.size(), 1u + kMessages);
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_EQ(received_[1 + i], (Frames{"down", std::to_string(i)}));
  }
}

TEST_P(ZmtpLinkTest, AHeadThatGoesAwayCutsTheConnection) {
  Bind();
  Connect();
  link_->Send(Frames{"hello"});
  EXPECT_EQ(link_->Flush(), ZmtpLink::Outcome::kOpen);
  std::thread pump([&] { Pump([&] { return link_->ready(); }); });
  EXPECT_EQ(ServerRecv(), (Frames{"worker-1", "hello"}));
  pump.join();
  router_.close();
  EXPECT_EQ(Pump([] { return false; }), ZmtpLink::Outcome::kCut);
  EXPECT_TRUE(link_->closed());
  EXPECT_FALSE(link_->closed_in_handshake());
  EXPECT_EQ(link_->auth_status(), 0);
  EXPECT_FALSE(link_->error().empty());
}

TEST_P(ZmtpLinkTest, NothingListeningIsRefusedAndRetriedWithWhatWaits) {
  // A port bound but not listening: connects to it are refused at once
  // (libzmq's unbind closes its listener later, on its I/O thread).
  const int held = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&any), sizeof any), 0);
  socklen_t len = sizeof any;
  ASSERT_EQ(getsockname(held, reinterpret_cast<sockaddr*>(&any), &len), 0);
  endpoint_ = "tcp://127.0.0.1:" + std::to_string(ntohs(any.sin_port));
  Connect();
  link_->Send(Frames{"register"});
  EXPECT_EQ(Pump([] { return false; }), ZmtpLink::Outcome::kRefused);
  EXPECT_TRUE(link_->closed());
  EXPECT_NE(link_->error().find("connect"), std::string::npos) << link_->error();
  // A head on that port now: the message sent while refused arrives.
  close(held);
  try {
    Bind("", endpoint_);
  } catch (const zmq::error_t& e) {
    GTEST_SKIP() << "port taken meanwhile: " << e.what();
  }
  ASSERT_TRUE(link_->Reconnect().ok());
  std::thread pump([&] { Pump([&] { return link_->ready(); }); });
  EXPECT_EQ(ServerRecv(), (Frames{"worker-1", "register"}));
  pump.join();
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, ZmtpLinkTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Curve" : "Null"; });

class ZmtpLinkCurveTest : public ZmtpLinkTest {};

TEST_P(ZmtpLinkCurveTest, AKeyTheHeadRefusesSaysItsZapStatus) {
  // The head's ZAP handler, answering 400 for every key.
  zmq::socket_t zap(ctx_, zmq::socket_type::rep);
  zap.bind("inproc://zeromq.zap.01");
  std::thread handler([&] {
    std::vector<zmq::message_t> request;
    zmq::pollitem_t item{zap.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(5000)) <= 0) return;
    while (true) {
      zmq::message_t m;
      if (!zap.recv(m)) return;
      const bool more = m.more();
      request.push_back(std::move(m));
      if (!more) break;
    }
    const Frames reply{"1.0", request.at(1).to_string(), "400", "not allowed", "", ""};
    for (size_t i = 0; i < reply.size(); ++i) {
      zap.send(zmq::buffer(reply[i]),
               i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  });
  Bind("workers");
  Connect();
  EXPECT_EQ(Pump([] { return false; }), ZmtpLink::Outcome::kCut);
  handler.join();
  EXPECT_FALSE(link_->ready());
  EXPECT_EQ(link_->auth_status(), 400) << link_->error();
  EXPECT_FALSE(link_->closed_in_handshake());
}

TEST_P(ZmtpLinkCurveTest, AWrongHeadKeyEndsInTheHandshake) {
  Bind();
  const CurveKeys keys = RawKeys(NewPair().public_z85, client_pair_);
  Connect(&keys);
  EXPECT_EQ(Pump([] { return false; }), ZmtpLink::Outcome::kCut);
  EXPECT_FALSE(link_->ready());
  EXPECT_TRUE(link_->closed_in_handshake()) << link_->error();
}

TEST_P(ZmtpLinkCurveTest, APlainLinkToACurveHeadEndsInTheHandshake) {
  Bind();
  Connect(nullptr);
  EXPECT_EQ(Pump([] { return false; }), ZmtpLink::Outcome::kCut);
  EXPECT_FALSE(link_->ready());
  // libzmq resets the connection once it read the greeting, often before
  // this side read the head's: the mechanism is named only when it did.
  EXPECT_TRUE(link_->closed_in_handshake()) << link_->error();
}

INSTANTIATE_TEST_SUITE_P(Curve, ZmtpLinkCurveTest, ::testing::Values(true));

TEST(ResolveTcpEndpointTest, TakesTcpHostPortOnly) {
  auto ok = ResolveTcpEndpoint("tcp://127.0.0.1:7501");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ntohs(ok->sin_port), 7501);
  EXPECT_FALSE(ResolveTcpEndpoint("ipc:///tmp/x").ok());
  EXPECT_FALSE(ResolveTcpEndpoint("tcp://127.0.0.1").ok());
}

}  // namespace
}  // namespace ztune::fleet
