#include "common/security/curve_socket.h"

#include "common/zmq/socket_util.h"

namespace ztune::security {

Status ApplyCurveClient(zmq::socket_t& socket, const CurveClientKeys& keys) {
  RETURN_IF_ERROR(zmqutil::SetBytesOption(socket, ZMQ_CURVE_SERVERKEY, keys.server.z85()));
  RETURN_IF_ERROR(zmqutil::SetBytesOption(socket, ZMQ_CURVE_PUBLICKEY, keys.own.public_key.z85()));
  return zmqutil::SetBytesOption(socket, ZMQ_CURVE_SECRETKEY, keys.own.secret_z85);
}

Status ApplyCurveServer(zmq::socket_t& socket, const KeyPair& pair, std::string_view zap_domain) {
  RETURN_IF_ERROR(zmqutil::SetIntOption(socket, ZMQ_CURVE_SERVER, 1));
  RETURN_IF_ERROR(zmqutil::SetBytesOption(socket, ZMQ_CURVE_SECRETKEY, pair.secret_z85));
  return zmqutil::SetBytesOption(socket, ZMQ_ZAP_DOMAIN, zap_domain);
}

std::optional<std::string_view> AuthenticatedUserId(zmq::message_t& frame) {
  const char* user = zmq_msg_gets(frame.handle(), "User-Id");
  if (user == nullptr) return std::nullopt;
  return std::string_view(user);
}

Result<CurveClientKeys> LoadCurveClientKeys(const std::string& key_file,
                                            const std::string& head_key) {
  if (key_file.empty()) {
    return Status::InvalidArgument(
        "no key: pass --key FILE (a key pair made by `ztune keygen`), or --insecure for a head "
        "started with --insecure");
  }
  if (head_key.empty()) {
    return Status::InvalidArgument(
        "no head key: pass --head-key KEY|FILE (`ztune-head --data-dir DIR --print-public-key` "
        "prints it), or --insecure for a head started with --insecure");
  }
  CurveClientKeys keys;
  ASSIGN_OR_RETURN(keys.own, ReadKeyPairFile(key_file));
  auto server = ReadPublicKey(head_key);
  if (!server.ok()) {
    return Status(server.status().code(), "--head-key: " + server.status().message());
  }
  keys.server = *server;
  return keys;
}

}  // namespace ztune::security
