// libzmq's CURVE buffers on the heap (common/curve_buffers.h): linked as the
// head, the worker and the CLI are, in an executable of its own, the
// process's sodium_* resolve to ours, a CURVE handshake goes through them,
// and the connection's frames arrive intact both ways.
#include "common/curve_buffers.h"

#include <cerrno>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <zmq.h>
#include <zmq.hpp>

extern "C" {
void* sodium_malloc(size_t size);
void* sodium_allocarray(size_t count, size_t size);
void sodium_free(void* ptr);
}

namespace ztune {
namespace {

TEST(CurveBuffersTest, TheProcessesSodiumAllocationsAreOurs) {
  EXPECT_TRUE(CurveBuffersOnHeap());
  EXPECT_EQ(CurveBuffersDescription(), "the heap, wiped at free");
}

TEST(CurveBuffersTest, AllocationsBehaveAsLibsodiumsDo) {
  errno = 0;
  EXPECT_EQ(sodium_allocarray(SIZE_MAX / 2, 3), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(sodium_malloc(SIZE_MAX - 8), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  sodium_free(nullptr);

  void* empty = sodium_allocarray(0, 16);
  ASSERT_NE(empty, nullptr);
  sodium_free(empty);

  auto* block = static_cast<unsigned char*>(sodium_allocarray(1000, 3));
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % 16, 0u);
  for (int i = 0; i < 3000; ++i) block[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(block[2999], static_cast<unsigned char>(2999));
  sodium_free(block);
}

TEST(CurveBuffersTest, ACurveConnectionsFramesGoThroughThemIntact) {
  ASSERT_TRUE(zmq_has("curve"));
  char server_public[41], server_secret[41], client_public[41], client_secret[41];
  ASSERT_EQ(zmq_curve_keypair(server_public, server_secret), 0);
  ASSERT_EQ(zmq_curve_keypair(client_public, client_secret), 0);

  zmq::context_t context(1);
  zmq::socket_t server(context, zmq::socket_type::pair);
  server.set(zmq::sockopt::curve_server, 1);
  server.set(zmq::sockopt::curve_secretkey, std::string(server_secret));
  server.set(zmq::sockopt::linger, 0);
  server.bind("tcp://127.0.0.1:*");
  const std::string endpoint = server.get(zmq::sockopt::last_endpoint);

  zmq::socket_t client(context, zmq::socket_type::pair);
  client.set(zmq::sockopt::curve_serverkey, std::string(server_public));
  client.set(zmq::sockopt::curve_publickey, std::string(client_public));
  client.set(zmq::sockopt::curve_secretkey, std::string(client_secret));
  client.set(zmq::sockopt::linger, 0);
  client.set(zmq::sockopt::rcvtimeo, 10'000);
  server.set(zmq::sockopt::rcvtimeo, 10'000);
  const uint64_t before = CurveBufferAllocations();
  client.connect(endpoint);

  // The first exchange waits for the handshake, whose commands' plaintexts
  // (HELLO to READY, both ends in this process) are what libzmq 4.3 boxes and
  // opens in these buffers: 12 of them.
  ASSERT_TRUE(client.send(zmq::str_buffer("hello"), zmq::send_flags::none));
  zmq::message_t got;
  ASSERT_TRUE(server.recv(got));
  ASSERT_EQ(got.to_string(), "hello");
  EXPECT_GE(CurveBufferAllocations() - before, 8u);

  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 1);
  constexpr int kMessages = 10;
  for (int i = 0; i < kMessages; ++i) {
    const std::string body = i % 2 == 0 ? big : "small " + std::to_string(i);
    ASSERT_TRUE(client.send(zmq::buffer(body), zmq::send_flags::none));
    ASSERT_TRUE(server.recv(got));
    ASSERT_EQ(got.to_string(), body) << "message " << i;
    ASSERT_TRUE(server.send(zmq::buffer(body), zmq::send_flags::none));
    ASSERT_TRUE(client.recv(got));
    ASSERT_EQ(got.to_string(), body) << "answer " << i;
  }
}

}  // namespace
}  // namespace ztune
