// zmqutil::WaitReadable over real sockets (inproc PAIRs and a tcp DEALER to a
// ROUTER on loopback) and an eventfd.
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "common/zmq/socket_util.h"

namespace ztune::zmqutil {
namespace {

using Clock = std::chrono::steady_clock;

long ElapsedMs(Clock::time_point since) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count());
}

class SocketWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_.bind("inproc://a");
    a_peer_.connect("inproc://a");
    b_.bind("inproc://b");
    b_peer_.connect("inproc://b");
    fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override { close(fd_); }

  zmq::context_t ctx_;
  zmq::socket_t a_{ctx_, zmq::socket_type::pair};
  zmq::socket_t a_peer_{ctx_, zmq::socket_type::pair};
  zmq::socket_t b_{ctx_, zmq::socket_type::pair};
  zmq::socket_t b_peer_{ctx_, zmq::socket_type::pair};
  int fd_ = -1;
};

TEST_F(SocketWaitTest, NothingReadyTimesOutAfterTheTimeout) {
  void* const sockets[2] = {a_.handle(), b_.handle()};
  const auto start = Clock::now();
  auto w = WaitReadable(sockets, fd_, 50);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->readable, 0u);
  EXPECT_FALSE(w->fd_readable);
  EXPECT_FALSE(w->interrupted);
  EXPECT_GE(ElapsedMs(start), 45);  // poll's own clock may round down a little
}

TEST_F(SocketWaitTest, AQueuedMessageAnswersAtOnceAndNamesItsSocket) {
  b_peer_.send(zmq::str_buffer("x"), zmq::send_flags::none);
  // The message reaches b_'s pipe a moment after the send returns (a wake-up
  // may come first for a command): wait until a wait without a timeout sees it.
  void* const sockets[2] = {a_.handle(), b_.handle()};
  Result<SocketWait> w = WaitReadable(sockets, fd_, 0);
  for (int tries = 0; w.ok() && w->readable == 0 && tries < 100; ++tries) {
    ASSERT_TRUE(WaitReadable(sockets, fd_, 100).ok());
    w = WaitReadable(sockets, fd_, 0);
  }
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->readable, 2u);  // b_ is socket 1, and only it
  zmq::message_t m;
  ASSERT_TRUE(b_.recv(m, zmq::recv_flags::dontwait).has_value());
  w = WaitReadable(sockets, fd_, 0);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->readable, 0u);
}

TEST_F(SocketWaitTest, AMessageSentWhileBlockedWakesTheWait) {
  void* const sockets[2] = {a_.handle(), nullptr};  // a null entry is skipped
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    a_peer_.send(zmq::str_buffer("y"), zmq::send_flags::none);
  });
  // Until the message is there: a wake-up may be only a command for the
  // socket, after which the next wait sees the message.
  const auto start = Clock::now();
  uint32_t readable = 0;
  zmq::message_t m;
  while (!a_.recv(m, zmq::recv_flags::dontwait).has_value()) {
    auto w = WaitReadable(sockets, fd_, 10'000);
    ASSERT_TRUE(w.ok());
    readable |= w->readable;
  }
  sender.join();
  EXPECT_EQ(readable, 1u);
  EXPECT_LT(ElapsedMs(start), 5'000);  // woken, not timed out
}

TEST_F(SocketWaitTest, TheFileDescriptorWakesTheWait) {
  void* const sockets[1] = {a_.handle()};
  std::thread poker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const uint64_t one = 1;
    ASSERT_EQ(write(fd_, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  });
  auto w = WaitReadable(sockets, fd_, 10'000);
  poker.join();
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->fd_readable);
  EXPECT_EQ(w->readable, 0u);
}

TEST_F(SocketWaitTest, WorksForATcpDealerWithoutAnExtraDescriptor) {
  zmq::socket_t router(ctx_, zmq::socket_type::router);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  zmq::socket_t dealer(ctx_, zmq::socket_type::dealer);
  dealer.connect(endpoint);
  dealer.send(zmq::str_buffer("hello"), zmq::send_flags::none);
  void* const at_router[1] = {router.handle()};
  std::vector<zmq::message_t> parts;
  while (parts.empty()) {
    ASSERT_TRUE(WaitReadable(at_router, -1, 10'000).ok());
    auto got = RecvMultipart(router);
    ASSERT_TRUE(got.ok());
    parts = std::move(*got);
  }
  ASSERT_EQ(parts.size(), 2u);
  ASSERT_TRUE(SendFrames(router, {"back"}, parts[0].to_string_view()).ok());
  void* const at_dealer[1] = {dealer.handle()};
  std::vector<zmq::message_t> reply;
  while (reply.empty()) {
    auto w = WaitReadable(at_dealer, -1, 10'000);
    ASSERT_TRUE(w.ok());
    auto got = RecvMultipart(dealer);
    ASSERT_TRUE(got.ok());
    reply = std::move(*got);
  }
  ASSERT_EQ(reply.size(), 1u);
  EXPECT_EQ(reply[0].to_string_view(), "back");
}

TEST_F(SocketWaitTest, AClosedContextIsAnError) {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::pair);
  void* const sockets[1] = {s.handle()};
  ctx.shutdown();
  auto w = WaitReadable(sockets, -1, 0);
  EXPECT_FALSE(w.ok());
}

}  // namespace
}  // namespace ztune::zmqutil
