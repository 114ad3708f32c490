// CURVE on a ZeroMQ socket: the options each side sets (docs/security.md).
// The head's sockets are CURVE servers whose ZAP handler (head/zap_handler.h)
// decides who may connect; workers and clients are CURVE clients that must
// know the head's public key.
//
// Stateless helpers; a socket is used on its owner's thread only.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <zmq.hpp>

#include "common/security/curve_keys.h"
#include "common/status.h"

namespace ztune::security {

// What a connecting side needs: the head's public key and a pair of its own.
struct CurveClientKeys {
  PublicKey server;
  KeyPair own;
};

// Makes `socket` a CURVE client of a server with `keys.server`. Before connect.
Status ApplyCurveClient(zmq::socket_t& socket, const CurveClientKeys& keys);

// Makes `socket` a CURVE server with `pair`, asking the ZAP handler about every
// connecting key under `zap_domain` ("workers", "clients"). Before bind.
Status ApplyCurveServer(zmq::socket_t& socket, const KeyPair& pair, std::string_view zap_domain);

// The user id the ZAP handler gave the connection a received frame came from
// (the connecting side's public key in Z85); nullopt on a plain connection.
std::optional<std::string_view> AuthenticatedUserId(zmq::message_t& frame);

// Reads the keys of a connecting side from files: `key_file` (its .key) and
// `head_key` (the head's public key or a file holding it). Errors name which
// one is missing or wrong and how to make it.
Result<CurveClientKeys> LoadCurveClientKeys(const std::string& key_file,
                                            const std::string& head_key);

}  // namespace ztune::security
