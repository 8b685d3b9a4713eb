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
// Threading: Options::threads worker threads, each with its own curl multi handle, connection
// cache and pool of easy handles; requests are spread round-robin. Send() is thread-safe and never
// blocks on the network. Each callback runs exactly once, on a worker thread (or, for requests
// still pending when the sender is destroyed, on the destroying thread), and must not block: it
// holds up every other transfer of its thread. A callback may call Send().
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
  // The whole request, connect and TLS handshake included. At least 1 ms is used.
  absl::Duration timeout = absl::Seconds(5);
};

struct HttpResult {
  // url: the request's; status and retry_after when error is kNone; error otherwise.
  UrlResult result;
  // Human text for logs when there was no response, e.g. curl's "SSL certificate problem:
  // self-signed certificate" or "refused 127.0.0.1: loopback address; --allow_private_networks
  // permits it". Empty when a response arrived.
  std::string error_detail;
  // Wall time from Send() to completion (time queued behind the per-host connection limit
  // included).
  absl::Duration duration;
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
    // Connections per host per thread; further requests to that host wait for one. At least 1.
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

  // Requests sent whose callback has not started yet.
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
