// TLS for the deliverer's HTTP sender: the extra trust of Options::ca_file, the client context the
// HTTP/1.1 transport shares between its threads, and the per-connection settings (SNI, host-name
// verification, ALPN).
//
// Certificates are always verified against the system's default store plus the ca_file
// certificates, and the receiver's host name (or IP address, for an IP literal) must match the
// certificate. Thread-safe after construction: an SSL_CTX may be used by many threads at once.
#ifndef HOOKRELAY_DELIVERER_HTTP_TLS_H_
#define HOOKRELAY_DELIVERER_HTTP_TLS_H_

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "deliverer/outcome_policy.h"

namespace hookrelay::deliverer::http {

// The certificates of Options::ca_file, added to each TLS context's store next to the default ones.
class TlsTrust {
 public:
  // InvalidArgument when `path` cannot be read or holds no PEM certificate.
  static absl::StatusOr<std::shared_ptr<const TlsTrust>> Load(const std::string& path);

  TlsTrust() = default;
  TlsTrust(const TlsTrust&) = delete;
  TlsTrust& operator=(const TlsTrust&) = delete;
  ~TlsTrust();

  // Adds the certificates to `ctx`'s store. False when the context has no store.
  bool AddTo(SSL_CTX* ctx) const;

 private:
  std::vector<X509*> certs_;
};

// A client context: default verify paths plus `trust` (may be null), peer verification on.
// Internal when OpenSSL cannot make one.
absl::StatusOr<std::unique_ptr<boost::asio::ssl::context>> MakeClientContext(const TlsTrust* trust);

// Sets SNI (host names only), the name or address the certificate must match, and ALPN offering
// "h2" and "http/1.1". False (with `error` set) when OpenSSL refuses one of them.
bool PrepareClient(SSL* ssl, std::string_view host, std::string* error);

// Whether the server selected "h2" by ALPN. REQUIRES: the handshake completed.
bool SelectedHttp2(const SSL* ssl);

// The outcome of a failed handshake: kTlsVerification with the verification error ("TLS
// certificate problem: self-signed certificate") when the certificate or name did not verify,
// kConnect when the connection broke, kOther for another TLS failure.
TransportError DescribeHandshakeFailure(const SSL* ssl, const boost::system::error_code& ec,
                                        std::string_view host, std::string* detail);

}  // namespace hookrelay::deliverer::http

#endif  // HOOKRELAY_DELIVERER_HTTP_TLS_H_
