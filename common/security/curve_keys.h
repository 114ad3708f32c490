// CURVE keys (docs/security.md): the public key type, key pairs, and the key
// files every ztune program reads. Keys are ZeroMQ's Z85 text, 40 characters
// for 32 bytes.
//
// Key files are text, one "name = value" per line, '#' comments:
//   <base>.key  public-key and secret-key; mode 0600 (refused if group or
//               others can read it, as ssh does)
//   <base>.pub  public-key only; safe to copy anywhere
//
// Pure functions and value types; thread-compatible.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace ztune::security {

// A validated CURVE public key. Value type.
class PublicKey {
 public:
  PublicKey() = default;
  // InvalidArgument unless `z85` is 40 characters of valid Z85.
  static Result<PublicKey> FromZ85(std::string_view z85);
  // From the 32 raw bytes ZAP hands over as credentials.
  static Result<PublicKey> FromBytes(std::string_view raw);

  const std::string& z85() const { return z85_; }
  bool empty() const { return z85_.empty(); }
  // 12 hex digits of the raw key: what logs and tables show.
  std::string Fingerprint() const;

  friend bool operator==(const PublicKey&, const PublicKey&) = default;
  friend auto operator<=>(const PublicKey&, const PublicKey&) = default;

 private:
  explicit PublicKey(std::string z85) : z85_(std::move(z85)) {}
  std::string z85_;
};

// The fingerprint of a Z85 key for logs: "(no key)" when empty (a plain
// connection), "(bad key)" when it does not parse.
std::string KeyFingerprint(const std::string& z85);

struct KeyPair {
  PublicKey public_key;
  std::string secret_z85;  // never logged
};

// A fresh key pair from libzmq (libsodium/tweetnacl). Internal when libzmq
// was built without CURVE.
Result<KeyPair> GenerateKeyPair();

// Whether this libzmq can do CURVE at all.
bool CurveAvailable();

// Writes `<base>.key` (mode 0600, both keys) and `<base>.pub`. AlreadyExists
// if `<base>.key` exists and `overwrite` is false; the secret is never
// written with wider permissions, not even for an instant.
Status WriteKeyPairFiles(const std::string& base, const KeyPair& pair, bool overwrite);

// Reads a secret key file, checks its mode (FailedPrecondition naming the
// fix when group or others may read it) and that its public key matches its
// secret one.
Result<KeyPair> ReadKeyPairFile(const std::string& path);

// A public key given as its Z85 text, or as the path of a .pub or .key file
// holding one.
Result<PublicKey> ReadPublicKey(const std::string& key_or_path);

// The file name `<base>.key` / `<base>.pub` for a base path that may already
// end in ".key".
std::string SecretKeyPath(const std::string& base);
std::string PublicKeyPath(const std::string& base);

}  // namespace ztune::security
