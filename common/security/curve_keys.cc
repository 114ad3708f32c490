#include "common/security/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <zmq.h>

namespace ztune::security {
namespace {

constexpr size_t kZ85KeyChars = 40;
constexpr size_t kRawKeyBytes = 32;

bool DecodeZ85Key(std::string_view z85, uint8_t* raw) {
  if (z85.size() != kZ85KeyChars) return false;
  const std::string text(z85);  // zmq_z85_decode wants a terminated string
  return zmq_z85_decode(raw, text.c_str()) != nullptr;
}

struct KeyFileFields {
  std::string public_key;
  std::string secret_key;
};

// Parses "name = value" lines; InvalidArgument naming the file and line.
Result<KeyFileFields> ParseKeyFile(const std::string& path, const std::string& text) {
  KeyFileFields fields;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#') continue;
    const size_t eq = line.find('=');
    auto trim = [](std::string s) {
      const size_t b = s.find_first_not_of(" \t\r\"");
      const size_t e = s.find_last_not_of(" \t\r\"");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    if (eq == std::string::npos) {
      return Status::InvalidArgument(path + ":" + std::to_string(number) +
                                     ": expected 'public-key = ...' or 'secret-key = ...'");
    }
    const std::string name = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    if (name == "public-key") {
      fields.public_key = value;
    } else if (name == "secret-key") {
      fields.secret_key = value;
    } else {
      return Status::InvalidArgument(path + ":" + std::to_string(number) + ": unknown field '" +
                                     name + "' (known: public-key, secret-key)");
    }
  }
  return fields;
}

Result<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read key file " + path + ": " + std::strerror(errno));
  std::string text;
  char buffer[4096];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > 64 * 1024) {
      return Status::InvalidArgument(path + " is too large to be a key file");
    }
  }
  return text;
}

// Writes `text` to `path` through a temporary created with `mode`, so that the
// final file never exists with other permissions or half-written.
Status WriteFileWithMode(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::IOError("cannot create " + tmp + ": " + std::strerror(errno));
  // The umask may have narrowed it; it must never widen it, but make it exact.
  bool ok = ::fchmod(fd, mode) == 0;
  size_t done = 0;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(ok ? errno : saved);
    ::unlink(tmp.c_str());
    return Status::IOError("cannot write " + path + ": " + why);
  }
  return Status::Ok();
}

}  // namespace

Result<PublicKey> PublicKey::FromZ85(std::string_view z85) {
  uint8_t raw[kRawKeyBytes];
  if (!DecodeZ85Key(z85, raw)) {
    return Status::InvalidArgument("not a CURVE public key (want 40 characters of Z85 text): '" +
                                   std::string(z85.substr(0, 64)) + "'");
  }
  return PublicKey(std::string(z85));
}

Result<PublicKey> PublicKey::FromBytes(std::string_view raw) {
  if (raw.size() != kRawKeyBytes) {
    return Status::InvalidArgument("a CURVE public key is 32 bytes, got " +
                                   std::to_string(raw.size()));
  }
  char z85[kZ85KeyChars + 1];
  if (zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(raw.data()), raw.size()) == nullptr) {
    return Status::InvalidArgument("cannot encode a CURVE public key");
  }
  return PublicKey(std::string(z85, kZ85KeyChars));
}

std::string PublicKey::Fingerprint() const {
  uint8_t raw[kRawKeyBytes];
  if (!DecodeZ85Key(z85_, raw)) return "(none)";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 6; ++i) {
    out += kHex[raw[i] >> 4];
    out += kHex[raw[i] & 15];
  }
  return out;
}

std::string KeyFingerprint(const std::string& z85) {
  if (z85.empty()) return "(no key)";
  auto key = PublicKey::FromZ85(z85);
  return key.ok() ? key->Fingerprint() : "(bad key)";
}

bool CurveAvailable() { return zmq_has("curve") != 0; }

Result<KeyPair> GenerateKeyPair() {
  if (!CurveAvailable()) return Status::Internal("this libzmq was built without CURVE");
  char pub[kZ85KeyChars + 1];
  char sec[kZ85KeyChars + 1];
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Status::Internal(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  }
  ASSIGN_OR_RETURN(PublicKey key, PublicKey::FromZ85(std::string_view(pub, kZ85KeyChars)));
  KeyPair pair{std::move(key), std::string(sec, kZ85KeyChars)};
  std::memset(sec, 0, sizeof(sec));
  return pair;
}

std::string SecretKeyPath(const std::string& base) {
  if (base.size() > 4 && base.ends_with(".key")) return base;
  return base + ".key";
}

std::string PublicKeyPath(const std::string& base) {
  std::string stem = base;
  if (stem.size() > 4 && stem.ends_with(".key")) stem.resize(stem.size() - 4);
  return stem + ".pub";
}

Status WriteKeyPairFiles(const std::string& base, const KeyPair& pair, bool overwrite) {
  const std::string secret_path = SecretKeyPath(base);
  const std::string public_path = PublicKeyPath(base);
  std::error_code ec;
  if (!overwrite && std::filesystem::exists(secret_path, ec)) {
    return Status::AlreadyExists(secret_path + " exists; refusing to overwrite a key");
  }
  RETURN_IF_ERROR(WriteFileWithMode(secret_path,
                                    "# ztune CURVE key pair: keep this file secret (mode 0600)\n"
                                    "public-key = " +
                                        pair.public_key.z85() +
                                        "\nsecret-key = " + pair.secret_z85 + "\n",
                                    0600));
  return WriteFileWithMode(
      public_path,
      "# ztune CURVE public key: safe to share\npublic-key = " + pair.public_key.z85() + "\n",
      0644);
}

Result<KeyPair> ReadKeyPairFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::NotFound("cannot read key file " + path + ": " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::FailedPrecondition("secret key file " + path + " has mode " + mode +
                                      ": others can read it. Run: chmod 600 " + path);
  }
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path));
  ASSIGN_OR_RETURN(KeyFileFields fields, ParseKeyFile(path, text));
  if (fields.secret_key.empty()) {
    return Status::InvalidArgument(path + " holds no secret-key (a .pub file? pass the .key)");
  }
  uint8_t raw[kRawKeyBytes];
  if (!DecodeZ85Key(fields.secret_key, raw)) {
    return Status::InvalidArgument(path + ": secret-key is not 40 characters of Z85 text");
  }
  char derived[kZ85KeyChars + 1];
  if (zmq_curve_public(derived, fields.secret_key.c_str()) != 0) {
    return Status::InvalidArgument(path + ": cannot derive the public key from secret-key");
  }
  ASSIGN_OR_RETURN(PublicKey key, PublicKey::FromZ85(std::string_view(derived, kZ85KeyChars)));
  if (!fields.public_key.empty() && fields.public_key != key.z85()) {
    return Status::InvalidArgument(path + ": public-key does not belong to secret-key");
  }
  return KeyPair{std::move(key), std::move(fields.secret_key)};
}

Result<PublicKey> ReadPublicKey(const std::string& key_or_path) {
  // A file first: a 40-character path such as "/tmp/ztune-schema-1-cYexqW/keys/
  // head.pub" is valid Z85 too.
  std::error_code ec;
  if (!std::filesystem::exists(key_or_path, ec)) {
    if (key_or_path.size() == kZ85KeyChars) {
      if (auto key = PublicKey::FromZ85(key_or_path); key.ok()) return key;
    }
    return Status::NotFound("'" + key_or_path +
                            "' is neither a public key (40 characters of Z85) nor a key file");
  }
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(key_or_path));
  ASSIGN_OR_RETURN(KeyFileFields fields, ParseKeyFile(key_or_path, text));
  if (fields.public_key.empty()) {
    return Status::InvalidArgument(key_or_path + " holds no public-key");
  }
  auto key = PublicKey::FromZ85(fields.public_key);
  if (!key.ok()) return Status::InvalidArgument(key_or_path + ": " + key.status().message());
  return key;
}

}  // namespace ztune::security
