#include "deliverer/http/tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>

#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace hookrelay::deliverer::http {
namespace {

namespace ssl = boost::asio::ssl;

bool IsIpLiteral(std::string_view host) {
  const std::string h(host);
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

}  // namespace

TlsTrust::~TlsTrust() {
  for (X509* cert : certs_) X509_free(cert);
}

absl::StatusOr<std::shared_ptr<const TlsTrust>> TlsTrust::Load(const std::string& path) {
  auto trust = std::make_shared<TlsTrust>();
  BIO* bio = BIO_new_file(path.c_str(), "r");
  if (bio == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("ca_file \"", path, "\": cannot be opened"));
  }
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    trust->certs_.push_back(cert);
  }
  BIO_free(bio);
  ERR_clear_error();  // the read that ended the loop leaves "no start line" behind
  if (trust->certs_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ca_file \"", path, "\": no PEM certificate in it"));
  }
  return std::shared_ptr<const TlsTrust>(std::move(trust));
}

bool TlsTrust::AddTo(SSL_CTX* ctx) const {
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  if (store == nullptr) return false;
  for (X509* cert : certs_) {
    // Fails harmlessly for a certificate already in the store.
    X509_STORE_add_cert(store, cert);
  }
  ERR_clear_error();
  return true;
}

absl::StatusOr<std::unique_ptr<ssl::context>> MakeClientContext(const TlsTrust* trust) {
  std::unique_ptr<ssl::context> ctx;
  try {
    ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("TLS context: ", e.what()));
  }
  boost::system::error_code ec;
  ctx->set_default_verify_paths(ec);
  if (!ec) ctx->set_verify_mode(ssl::verify_peer, ec);
  if (ec) return absl::InternalError(absl::StrCat("TLS context: ", ec.message()));
  if (trust != nullptr && !trust->AddTo(ctx->native_handle())) {
    return absl::InternalError("TLS context: no certificate store");
  }
  return ctx;
}

bool PrepareClient(SSL* ssl, std::string_view host, std::string* error) {
  const std::string name(host);
  bool ok = true;
  if (IsIpLiteral(host)) {
    ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) == 1;
  } else {
    ok = SSL_set_tlsext_host_name(ssl, name.c_str()) == 1 && SSL_set1_host(ssl, name.c_str()) == 1;
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  }
  static constexpr unsigned char kAlpn[] = "\x02h2\x08http/1.1";
  ok = ok && SSL_set_alpn_protos(ssl, kAlpn, sizeof(kAlpn) - 1) == 0;
  if (!ok) {
    *error = absl::StrCat("TLS setup for ", name, " failed");
    ERR_clear_error();
  }
  return ok;
}

bool SelectedHttp2(const SSL* ssl) {
  const unsigned char* protocol = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(ssl, &protocol, &length);
  return length == 2 && protocol[0] == 'h' && protocol[1] == '2';
}

TransportError DescribeHandshakeFailure(const SSL* ssl, const boost::system::error_code& ec,
                                        std::string_view host, std::string* detail) {
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    *detail = absl::StrCat("TLS certificate problem: ", X509_verify_cert_error_string(verify),
                           " (", std::string(host), ")");
    ERR_clear_error();
    return TransportError::kTlsVerification;
  }
  ERR_clear_error();
  if (ec.category() == boost::asio::error::get_ssl_category()) {
    *detail = absl::StrCat("TLS handshake with ", std::string(host), " failed: ", ec.message());
    return TransportError::kOther;
  }
  *detail = absl::StrCat("connection to ", std::string(host), " lost during the TLS handshake: ",
                         ec.message());
  return TransportError::kConnect;
}

}  // namespace hookrelay::deliverer::http
