// DashboardTls: the dashboard's HTTPS certificate chain and private key
// (--http-tls-cert, --http-tls-key), checked with a clear reason before the
// head starts and installed into the server's OpenSSL context. TLS 1.2 is the
// oldest version offered. Files are read once, at start: a renewed
// certificate takes a head restart.
//
// Thread affinity: any; no shared state.
#pragma once

#include <string>

#include "common/status.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace ztune::head {

struct TlsFiles {
  std::string cert_file;  // PEM: the certificate, then any intermediates
  std::string key_file;   // PEM private key; group and others may not read it
};

// Installs the chain and key into `ctx` and restricts it to TLS 1.2 and
// newer. FailedPrecondition for a key file others may read (naming the
// chmod), InvalidArgument for a file that is unreadable, not PEM, a key that
// does not belong to the certificate, or a certificate that has expired or
// is not valid yet.
Status ConfigureDashboardTls(SSL_CTX* ctx, const TlsFiles& files);

// The same checks on a context of its own: for the head's start-up, before
// anything is bound.
Status CheckDashboardTls(const TlsFiles& files);

}  // namespace ztune::head
