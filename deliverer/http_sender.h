// Sends webhook POSTs with libcurl's multi interface: many requests in flight per thread,
// connections kept alive and reused across requests to the same host.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<HttpSender> sender, HttpSender::Create({.threads = 2}));
//   sender->Send({.url = url, .headers = headers, .body = body},
//                [](HttpResult r) { /* on a sender thread */ });
//
// Each request is a POST of `body` with the caller's headers plus `User-Agent: hookrelay/1.0` and
// `Content-Type: application/json` (unless the caller set those headers itself) and no
// `Expect: 100-continue`. Redirects are not followed (a 3xx is the result). Only http and https
// URLs are accepted; proxy settings in the environment are ignored; TLS certificates and host
// names are always verified. The response body is read and discarded; only the status and the
// Retry-After header are kept.
//
// Private networks: unless Options::allow_private_networks, a connection to any address that
// deliverer/address_policy.h refuses is never opened. The check runs on the address being
// connected to, after DNS resolution, so DNS rebinding cannot get around it. The result is then
// TransportError::kForbiddenAddress and nothing was sent.
//
// Connection slots (honest timeouts): each worker thread lets at most
// Options::max_host_connections requests per receiver host (scheme, host and port) into libcurl
// at once. Further requests to that host wait in the worker's own FIFO queue for that host,
// outside libcurl, and enter it when a request to the host completes. A request's timeout starts
// when it enters libcurl (name resolution, connect and TLS count, or the first byte sent on a
// kept-alive connection), so it measures the receiver, never the wait for a slot; that wait is reported separately (HttpResult::queued). libcurl itself has no
// per-host limit, so nothing queues inside the multi handle and the multi handle never holds more
// easy handles than there are slots in use.
//
// Connections: HTTP keep-alive always (a connection goes back to the thread's cache after its
// request and is reused by the next one to that host). HTTPS receivers that offer HTTP/2 through
// ALPN get HTTP/2, with requests to them multiplexed over shared connections; plain-HTTP
// receivers stay on HTTP/1.1 (no h2c upgrade). Easy handles are kept and reused: the options
// that never change are set once per handle, the per-request ones on each request.
//
// Threading: Options::threads worker threads, each with its own curl multi handle, connection
// cache, per-host queues and pool of easy handles; requests are spread round-robin. Send() is
// thread-safe and never blocks on the network. Each callback runs exactly once, on a worker
// thread (or, for requests still pending when the sender is destroyed, on the destroying thread),
// and must not block: it holds up every other transfer of its thread. A callback may call Send().
//
// The process should ignore SIGPIPE (the deliverer's main does); curl is told not to use signals.
#ifndef HOOKRELAY_DELIVERER_HTTP_SENDER_H_
#define HOOKRELAY_DELIVERER_HTTP_SENDER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "deliverer/outcome_policy.h"

namespace hookrelay::deliverer {

struct HttpRequest {
  // http:// or https://, used exactly as given.
  std::string url;
  // Static and signature headers, sent in this order. Names and values must not contain CR, LF or
  // NUL (such a request fails with kOther, nothing sent). An empty value is sent as an empty
  // header. A `User-Agent` or `Content-Type` here replaces the sender's own.
  std::vector<std::pair<std::string, std::string>> headers;
  // The exact bytes to POST, shared by the URLs of one job; never copied. nullptr = empty body.
  std::shared_ptr<const std::string> body;
  // The whole request, connect and TLS handshake included, from when it enters libcurl (time
  // waiting for a connection slot excluded). At least 1 ms is used.
  absl::Duration timeout = absl::Seconds(5);
};

struct HttpResult {
  // url: the request's; status and retry_after when error is kNone; error otherwise.
  UrlResult result;
  // Human text for logs when there was no response, e.g. curl's "SSL certificate problem:
  // self-signed certificate" or "refused 127.0.0.1: loopback address; --allow_private_networks
  // permits it". Empty when a response arrived.
  std::string error_detail;
  // Wall time from entering libcurl to completion: the receiver's time (connect, TLS, request,
  // response). Zero when the request never entered libcurl (refused before, or shut down while
  // waiting for a slot).
  absl::Duration duration;
  // Wall time from Send() to entering libcurl (or to failing without entering): the wait for a
  // connection slot to the receiver's host.
  absl::Duration queued;
  // The HTTP version of the response: 10, 11, 20 (HTTP/2), 30; 0 when there was none.
  int http_version = 0;
};

class HttpSender {
 public:
  struct Options {
    // Allows loopback, private, link-local and metadata addresses (tests, on-premises receivers).
    bool allow_private_networks = false;
    // A PEM file of extra CA certificates to trust besides the system's default store (tests with
    // a self-signed receiver). Empty = the default store only. Create() fails when it cannot be
    // read or holds no certificate.
    std::string ca_file;
    // Worker threads, each with its own multi handle; at least 1.
    int threads = 1;
    // Connection slots per receiver host per thread: requests to one host in libcurl at once.
    // Further requests to that host wait in the thread's FIFO queue for it (see above). At least 1.
    long max_host_connections = 64;
    // Open connections kept per thread once their request is done (all hosts together); beyond
    // it the least recently used are closed. At least 1. (libcurl's own default, 4 x the
    // requests in flight at that moment, closes connections whenever a thread's load dips.)
    long max_cached_connections = 256;
  };

  // Called exactly once per request with its result. Must not block.
  using Callback = absl::AnyInvocable<void(HttpResult) &&>;

  // Starts the worker threads. InvalidArgument for bad options or an unreadable ca_file; Internal
  // when libcurl cannot be initialised.
  static absl::StatusOr<std::unique_ptr<HttpSender>> Create(Options options);

  HttpSender(const HttpSender&) = delete;
  HttpSender& operator=(const HttpSender&) = delete;

  // Stops and joins the worker threads. Requests still pending (queued or in flight) complete
  // with TransportError::kOther, "sender shutting down", as do requests Sent by those callbacks.
  // REQUIRES: no thread other than the sender's own callbacks calls Send() concurrently.
  ~HttpSender();

  // Queues `request`; `done` receives its result. Thread-safe; never blocks on the network.
  // REQUIRES: `done` is non-null.
  void Send(HttpRequest request, Callback done);

  // Requests sent whose callback has not started yet (waiting for a slot or in libcurl).
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

 private:
  class Worker;
  struct TlsTrust;

  HttpSender(Options options, std::shared_ptr<const TlsTrust> trust);

  // Constant after construction.
  const Options options_;
  const std::shared_ptr<const TlsTrust> trust_;  // null when options_.ca_file is empty
  std::vector<std::unique_ptr<Worker>> workers_;

  std::atomic<uint64_t> next_worker_{0};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_HTTP_SENDER_H_
