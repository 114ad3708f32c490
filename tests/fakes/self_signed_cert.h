// WriteSelfSignedCert: a certificate and key for a test's HTTPS server, made
// with OpenSSL's API (no `openssl` command needed): an EC P-256 key and a
// self-signed certificate for localhost and 127.0.0.1, valid from
// `not_before_s` to `not_after_s` seconds from now. The key file gets mode
// `key_mode`. A test client trusts the certificate file as its CA.
//
// Header-only, test-thread only. Aborts the test binary when a file cannot be
// made (nothing HTTPS can be tested without it).
#pragma once

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ztune::testing {

struct CertFiles {
  std::string cert;
  std::string key;
};

inline CertFiles WriteSelfSignedCert(const std::string& base, long not_before_s = -60,
                                     long not_after_s = 24 * 3600, mode_t key_mode = 0600) {
  auto fail = [](const char* what) {
    std::fprintf(stderr, "WriteSelfSignedCert: %s\n", what);
    std::abort();
  };
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) fail("EVP_EC_gen");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(cert), not_after_s);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1"},
                                   std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (ext == nullptr) fail("X509V3_EXT_conf_nid");
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert, key, EVP_sha256()) == 0) fail("X509_sign");
  CertFiles files{base + ".crt", base + ".pem"};
  FILE* out = std::fopen(files.cert.c_str(), "w");
  if (out == nullptr || PEM_write_X509(out, cert) != 1) fail("write the certificate");
  std::fclose(out);
  out = std::fopen(files.key.c_str(), "w");
  if (out == nullptr ||
      PEM_write_PrivateKey(out, key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    fail("write the key");
  }
  std::fclose(out);
  ::chmod(files.key.c_str(), key_mode);
  X509_free(cert);
  EVP_PKEY_free(key);
  return files;
}

}  // namespace ztune::testing
