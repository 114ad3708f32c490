#include "head/dashboard_tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace ztune::head {
namespace {

// OpenSSL's reasons for the last failure, oldest first; clears its queue.
std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no reason given" : out;
}

// An encrypted key fails to read instead of OpenSSL asking on the terminal.
int NoPassword(char*, int, int, void*) { return 0; }

Status CheckKeyFileMode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::InvalidArgument("cannot read the dashboard's TLS key " + path + ": " +
                                   std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::FailedPrecondition("the dashboard's TLS key " + path + " has mode " + mode +
                                      ": others can read it. Run: chmod 600 " + path);
  }
  return Status::Ok();
}

}  // namespace

Status ConfigureDashboardTls(SSL_CTX* ctx, const TlsFiles& files) {
  ERR_clear_error();
  if (Status s = CheckKeyFileMode(files.key_file); !s.ok()) return s;
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
    return Status::Internal("cannot require TLS 1.2: " + OpenSslErrors());
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
    return Status::InvalidArgument("cannot read the dashboard's TLS certificate " +
                                   files.cert_file + " (want PEM): " + OpenSslErrors());
  }
  X509* cert = SSL_CTX_get0_certificate(ctx);
  if (cert == nullptr) {
    return Status::InvalidArgument(files.cert_file + " holds no certificate");
  }
  // Read apart from the context, so that a key of another certificate is
  // told from one that cannot be read.
  std::unique_ptr<FILE, decltype(&std::fclose)> key_file(std::fopen(files.key_file.c_str(), "r"),
                                                         &std::fclose);
  if (key_file == nullptr) {
    return Status::InvalidArgument("cannot read the dashboard's TLS key " + files.key_file + ": " +
                                   std::strerror(errno));
  }
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_PrivateKey(key_file.get(), nullptr, NoPassword, nullptr), &EVP_PKEY_free);
  if (key == nullptr) {
    return Status::InvalidArgument("cannot read the dashboard's TLS key " + files.key_file +
                                   " (want an unencrypted PEM key): " + OpenSslErrors());
  }
  if (X509_check_private_key(cert, key.get()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument("the TLS key " + files.key_file +
                                   " does not belong to the certificate " + files.cert_file);
  }
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    return Status::InvalidArgument("cannot use the dashboard's TLS key " + files.key_file + ": " +
                                   OpenSslErrors());
  }
  // Browsers refuse such a certificate; say so now rather than leave users
  // with a connection error.
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0) {
    return Status::InvalidArgument("the dashboard's TLS certificate " + files.cert_file +
                                   " has expired; renew it");
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0) {
    return Status::InvalidArgument("the dashboard's TLS certificate " + files.cert_file +
                                   " is not valid yet (is this machine's clock right?)");
  }
  return Status::Ok();
}

Status CheckDashboardTls(const TlsFiles& files) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_server_method()),
                                                        &SSL_CTX_free);
  if (ctx == nullptr) return Status::Internal("cannot make a TLS context: " + OpenSslErrors());
  return ConfigureDashboardTls(ctx.get(), files);
}

}  // namespace ztune::head
