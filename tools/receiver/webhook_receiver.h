// A real HTTP/1.1 webhook receiver (Boost.Beast), plain or TLS, for tests, benchmarks and the
// demo: it accepts any method and path, records what arrives and answers what a Handler says.
//
//   ASSIGN_OR_RETURN(auto receiver, WebhookReceiver::Start({}));  // 127.0.0.1, a free port
//   ... POST to receiver->Url() ...
//   receiver->WaitForRequests(1, absl::Seconds(5));
//   receiver->Requests()[0].Header("X-Signature");
//
// Keep-alive is supported (HTTP/1.1 default; `Connection: close` honoured both ways). A response
// delay is an Asio timer on its connection: it never holds up other connections. Requests are
// recorded (and counted) when fully read, before the handler runs, so a client that has its
// answer always finds its request in Requests(). Bodies over 64 MiB are refused with 413.
//
// Thread-safe: every public method may be called from any thread, handlers included.
#ifndef HOOKRELAY_TOOLS_RECEIVER_WEBHOOK_RECEIVER_H_
#define HOOKRELAY_TOOLS_RECEIVER_WEBHOOK_RECEIVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace hookrelay::receiver {

// One request as it arrived.
struct ReceivedRequest {
  std::string method;  // "POST"
  std::string target;  // "/hooks?x=1", as sent
  std::vector<std::pair<std::string, std::string>> headers;  // in arrival order, names as sent
  std::string body;
  absl::Time at;  // when the request had been read completely

  // The first value of header `name`, compared case-insensitively; "" when absent.
  std::string Header(std::string_view name) const;
};

// What to answer. Content-Length is set from `body`; `headers` are added as given (a
// `Connection: close` here closes the connection after the answer).
struct Response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  absl::Duration delay = absl::ZeroDuration();  // wait this long before answering
};

// Decides the answer to a request. Called on receiver threads, concurrently; must not throw.
using Handler = std::function<Response(const ReceivedRequest&)>;

struct SelfSignedCert {
  std::string cert_pem;
  std::string key_pem;  // PKCS#8 PEM, unencrypted
};

// A fresh EC P-256 key and a self-signed X.509 v3 certificate for it: CN=127.0.0.1,
// subjectAltName IP:127.0.0.1 and DNS:localhost, valid from an hour ago for a year, SHA-256
// signature. Trusting `cert_pem` as a CA (e.g. HttpSender::Options::ca_file) makes TLS to the
// receiver verify. Internal error if OpenSSL fails.
absl::StatusOr<SelfSignedCert> GenerateSelfSignedCert();

class WebhookReceiver {
 public:
  struct Options {
    // host:port to listen on; IPv6 as "[::1]:0". Port 0 picks a free port (see port()).
    std::string address = "127.0.0.1:0";
    // I/O threads; at least 1.
    int threads = 1;
    // Serve HTTPS with this certificate instead of HTTP.
    std::optional<SelfSignedCert> tls;
    // false: keep only the counts, not the requests (benchmarks: memory stays flat).
    bool record = true;
  };

  // Binds, listens and starts the I/O threads. `handler` nullptr = always 200 "ok".
  // InvalidArgument for a bad address or certificate; Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<WebhookReceiver>> Start(Options options,
                                                                Handler handler = nullptr);

  WebhookReceiver(const WebhookReceiver&) = delete;
  WebhookReceiver& operator=(const WebhookReceiver&) = delete;

  // Stops accepting, closes every connection (delayed answers are dropped) and joins the threads.
  ~WebhookReceiver();

  // The port listened on.
  int port() const;
  // "http://127.0.0.1:<port><path>" ("https" with TLS). The host is the listening address, or
  // the loopback address of its family when it listens on all addresses.
  std::string Url(std::string_view path = "/hooks") const;

  // A copy of every request recorded so far, in arrival order (empty when !record).
  std::vector<ReceivedRequest> Requests() const;
  // Requests read completely so far.
  int64_t request_count() const;
  // TCP connections accepted so far, including those whose TLS handshake failed.
  int64_t connection_count() const;
  // Waits until request_count() >= n; false if `timeout` passes first.
  bool WaitForRequests(int64_t n, absl::Duration timeout) const;

  // Replaces the handler for requests read from now on; nullptr = always 200 "ok".
  void SetHandler(Handler handler);

 private:
  class Impl;
  explicit WebhookReceiver(std::unique_ptr<Impl> impl);

  const std::unique_ptr<Impl> impl_;
};

}  // namespace hookrelay::receiver

#endif  // HOOKRELAY_TOOLS_RECEIVER_WEBHOOK_RECEIVER_H_
