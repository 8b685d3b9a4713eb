#include "tools/receiver/webhook_receiver.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

#include "common/strings.h"

namespace hookrelay::receiver {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr uint64_t kMaxBodyBytes = 64 << 20;
constexpr size_t kReadBufferBytes = 64 << 10;
constexpr auto kIdleTimeout = std::chrono::seconds(120);
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr auto kWriteTimeout = std::chrono::seconds(30);

template <typename T, void (*kFree)(T*)>
struct Deleter {
  void operator()(T* p) const { kFree(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, Deleter<EVP_PKEY_CTX, EVP_PKEY_CTX_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;
void FreeBio(BIO* bio) { BIO_free(bio); }
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, FreeBio>>;

std::string BioContents(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\": expected host:port"));
  }
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = address.substr(colon + 1);
  int value = -1;
  const auto r = std::from_chars(p.data(), p.data() + p.size(), value);
  if (p.empty() || r.ec != std::errc() || r.ptr != p.data() + p.size() || value < 0 ||
      value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\": port must be a number from 0 to 65535"));
  }
  *host = h.empty() ? "0.0.0.0" : h;
  *port = value;
  return absl::OkStatus();
}

Response DefaultResponse() {
  Response r;
  r.headers = {{"Content-Type", "text/plain"}};
  r.body = "ok";
  return r;
}

// What every connection shares with the receiver.
class State {
 public:
  State(bool record, Handler handler) : record_(record) { SetHandler(std::move(handler)); }

  void SetHandler(Handler handler) {
    auto h = handler ? std::make_shared<const Handler>(std::move(handler)) : nullptr;
    absl::MutexLock lock(&handler_mu_);
    handler_ = std::move(h);
  }

  std::shared_ptr<const Handler> handler() const {
    absl::ReaderMutexLock lock(&handler_mu_);
    return handler_;
  }

  void Record(const ReceivedRequest& request) {
    absl::MutexLock lock(&mu_);
    ++request_count_;
    if (record_) requests_.push_back(request);
  }

  std::vector<ReceivedRequest> Requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

  int64_t request_count() const {
    absl::MutexLock lock(&mu_);
    return request_count_;
  }

  bool WaitForRequests(int64_t n, absl::Duration timeout) const {
    struct Arg {
      const State* state;
      int64_t n;
    } arg{this, n};
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        absl::Condition(
            +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->state->request_count_ >= a->n; },
            &arg),
        timeout);
  }

  std::atomic<int64_t> connections{0};

 private:
  const bool record_;

  mutable absl::Mutex handler_mu_;
  std::shared_ptr<const Handler> handler_ ABSL_GUARDED_BY(handler_mu_);

  mutable absl::Mutex mu_;
  std::vector<ReceivedRequest> requests_ ABSL_GUARDED_BY(mu_);
  int64_t request_count_ ABSL_GUARDED_BY(mu_) = 0;
};

// One connection: [TLS handshake,] then read a request, answer (after the delay), repeat while
// both sides keep the connection alive. All its handlers run on its strand.
template <bool kTls>
class Session : public std::enable_shared_from_this<Session<kTls>> {
 public:
  using Stream =
      std::conditional_t<kTls, beast::ssl_stream<beast::tcp_stream>, beast::tcp_stream>;

  Session(tcp::socket socket, State& state, ssl::context* tls)
      : stream_(MakeStream(std::move(socket), tls)),
        timer_(stream_.get_executor()),
        state_(state) {}

  void Start() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->Begin(); });
  }

 private:
  static Stream MakeStream(tcp::socket socket, ssl::context* tls) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *tls);
    } else {
      return Stream(std::move(socket));
    }
  }

  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  void Begin() {
    if constexpr (kTls) {
      lowest().expires_after(kHandshakeTimeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) {
                                  self->Close();
                                  return;
                                }
                                self->Read();
                              });
    } else {
      Read();
    }
  }

  void Read() {
    parser_.emplace();
    parser_->body_limit(kMaxBodyBytes);
    // Beast reads at most the read buffer's free room (at least 512 bytes), and the body parser
    // empties the buffer after each read, so it would never grow: batched webhooks would arrive
    // 512 bytes per read.
    buffer_.reserve(kReadBufferBytes);
    lowest().expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->OnRead(ec);
                     });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      res_ = {};
      res_.result(http::status::payload_too_large);
      res_.version(11);
      res_.keep_alive(false);
      res_.body() = "body too large\n";
      res_.prepare_payload();
      keep_alive_ = false;
      Write();
      return;
    }
    if (ec) {
      Close();  // end of stream, reset, timeout or a malformed request: nothing to answer
      return;
    }
    http::request<http::string_body> req = parser_->release();
    ReceivedRequest received;
    received.method = std::string(req.method_string());
    received.target = std::string(req.target());
    received.headers.reserve(8);
    for (const auto& field : req) {
      received.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    received.body = std::move(req.body());
    received.at = absl::Now();
    state_.Record(received);

    Response response;
    if (std::shared_ptr<const Handler> handler = state_.handler()) {
      try {
        response = (*handler)(received);
      } catch (...) {  // a test's handler must not take the receiver's thread down
        response = Response{500, {}, "handler threw\n", absl::ZeroDuration()};
      }
    } else {
      response = DefaultResponse();
    }

    res_ = {};
    const int status = response.status >= 100 && response.status <= 999 ? response.status : 500;
    res_.result(static_cast<unsigned>(status));
    res_.version(req.version());
    res_.keep_alive(req.keep_alive());
    for (const auto& [name, value] : response.headers) {
      if (!name.empty()) res_.insert(name, value);
    }
    res_.body() = std::move(response.body);
    res_.prepare_payload();
    keep_alive_ = res_.keep_alive();

    if (response.delay > absl::ZeroDuration()) {
      lowest().expires_never();
      timer_.expires_after(absl::ToChronoNanoseconds(response.delay));
      timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
        if (ec) {
          self->Close();
          return;
        }
        self->Write();
      });
      return;
    }
    Write();
  }

  void Write() {
    lowest().expires_after(kWriteTimeout);
    http::async_write(stream_, res_,
                      [self = this->shared_from_this()](beast::error_code ec, size_t) {
                        if (ec || !self->keep_alive_) {
                          self->Close();
                          return;
                        }
                        self->Read();
                      });
  }

  void Close() {
    beast::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    lowest().close();
  }

  Stream stream_;
  net::steady_timer timer_;
  State& state_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  bool keep_alive_ = true;
};

}  // namespace

std::string ReceivedRequest::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (absl::EqualsIgnoreCase(common::ToAbsl(n), common::ToAbsl(name))) return v;
  }
  return "";
}

absl::StatusOr<SelfSignedCert> GenerateSelfSignedCert() {
  auto fail = [](std::string_view step) {
    return absl::InternalError(absl::StrCat("self-signed certificate: ", common::ToAbsl(step),
                                            " failed"));
  };
  PkeyCtxPtr pctx(EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr));
  if (pctx == nullptr || EVP_PKEY_keygen_init(pctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_ec_paramgen_curve_nid(pctx.get(), NID_X9_62_prime256v1) <= 0) {
    return fail("EC key setup");
  }
  EVP_PKEY* raw_key = nullptr;
  if (EVP_PKEY_keygen(pctx.get(), &raw_key) <= 0) return fail("EC key generation");
  PkeyPtr key(raw_key);

  X509Ptr cert(X509_new());
  if (cert == nullptr || X509_set_version(cert.get(), 2) != 1) return fail("X509_new");
  uint64_t serial = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof(serial)) != 1) {
    return fail("RAND_bytes");
  }
  serial = (serial >> 1) | 1;  // positive and non-zero
  if (ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), 365L * 24 * 3600) == nullptr ||
      X509_set_pubkey(cert.get(), key.get()) != 1) {
    return fail("certificate fields");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(cert.get(), name) != 1) {
    return fail("certificate name");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  const std::pair<int, const char*> extensions[] = {
      {NID_basic_constraints, "critical,CA:TRUE"},
      {NID_key_usage, "critical,digitalSignature,keyCertSign"},
      {NID_ext_key_usage, "serverAuth"},
      {NID_subject_key_identifier, "hash"},
      {NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"},
  };
  for (const auto& [nid, value] : extensions) {
    ExtPtr ext(X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value));
    if (ext == nullptr || X509_add_ext(cert.get(), ext.get(), -1) != 1) {
      return fail(absl::StrCat("extension ", value));
    }
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0) return fail("X509_sign");

  BioPtr cert_bio(BIO_new(BIO_s_mem()));
  BioPtr key_bio(BIO_new(BIO_s_mem()));
  if (cert_bio == nullptr || key_bio == nullptr ||
      PEM_write_bio_X509(cert_bio.get(), cert.get()) != 1 ||
      PEM_write_bio_PrivateKey(key_bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) !=
          1) {
    return fail("PEM encoding");
  }
  return SelfSignedCert{BioContents(cert_bio.get()), BioContents(key_bio.get())};
}

class WebhookReceiver::Impl {
 public:
  Impl(Options options, Handler handler)
      : options_(std::move(options)),
        state_(options_.record, std::move(handler)),
        ioc_(options_.threads),
        acceptor_(ioc_) {}

  ~Impl() {
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
  }

  absl::Status Start() {
    if (options_.threads < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("threads must be at least 1, got ", options_.threads));
    }
    std::string host;
    int port = 0;
    if (absl::Status s = SplitHostPort(options_.address, &host, &port); !s.ok()) return s;
    beast::error_code ec;
    const net::ip::address ip = net::ip::make_address(host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", options_.address, "\": ", ec.message()));
    }
    if (options_.tls.has_value()) {
      tls_.emplace(ssl::context::tls_server);
      tls_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                            ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                            ssl::context::no_tlsv1_1,
                        ec);
      if (!ec) tls_->use_certificate_chain(net::buffer(options_.tls->cert_pem), ec);
      if (!ec) tls_->use_private_key(net::buffer(options_.tls->key_pem), ssl::context::pem, ec);
      if (ec) return absl::InvalidArgumentError(absl::StrCat("tls certificate: ", ec.message()));
    }
    const tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options_.address, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    if (ip.is_unspecified()) {
      url_host_ = ip.is_v6() ? "[::1]" : "127.0.0.1";
    } else {
      url_host_ = ip.is_v6() ? absl::StrCat("[", ip.to_string(), "]") : ip.to_string();
    }
    Accept();
    threads_.reserve(options_.threads);
    for (int i = 0; i < options_.threads; ++i) {
      threads_.emplace_back([this] { ioc_.run(); });
    }
    return absl::OkStatus();
  }

  int port() const { return port_; }
  std::string Url(std::string_view path) const {
    return absl::StrCat(tls_.has_value() ? "https://" : "http://", url_host_, ":", port_,
                        common::ToAbsl(path));
  }
  State& state() { return state_; }
  const State& state() const { return state_; }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) return;
      if (!ec) {
        state_.connections.fetch_add(1);
        socket.set_option(tcp::no_delay(true), ec);
        if (tls_.has_value()) {
          std::make_shared<Session<true>>(std::move(socket), state_, &*tls_)->Start();
        } else {
          std::make_shared<Session<false>>(std::move(socket), state_, nullptr)->Start();
        }
      }
      Accept();  // also after a failed accept (e.g. out of descriptors): keep serving
    });
  }

  // Constant after Start().
  const Options options_;
  int port_ = 0;
  std::string url_host_;

  State state_;
  std::optional<ssl::context> tls_;
  // Destroyed before state_ and tls_: its pending handlers own the sessions that use them.
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
};

absl::StatusOr<std::unique_ptr<WebhookReceiver>> WebhookReceiver::Start(Options options,
                                                                        Handler handler) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler));
  if (absl::Status s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<WebhookReceiver>(new WebhookReceiver(std::move(impl)));
}

WebhookReceiver::WebhookReceiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

WebhookReceiver::~WebhookReceiver() = default;

int WebhookReceiver::port() const { return impl_->port(); }

std::string WebhookReceiver::Url(std::string_view path) const { return impl_->Url(path); }

std::vector<ReceivedRequest> WebhookReceiver::Requests() const { return impl_->state().Requests(); }

int64_t WebhookReceiver::request_count() const { return impl_->state().request_count(); }

int64_t WebhookReceiver::connection_count() const {
  return impl_->state().connections.load();
}

bool WebhookReceiver::WaitForRequests(int64_t n, absl::Duration timeout) const {
  return impl_->state().WaitForRequests(n, timeout);
}

void WebhookReceiver::SetHandler(Handler handler) { impl_->state().SetHandler(std::move(handler)); }

}  // namespace hookrelay::receiver
