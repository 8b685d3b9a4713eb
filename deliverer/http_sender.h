// Sends webhook POSTs: HTTP/1.1 with keep-alive on Boost.Beast and Asio, many requests in flight
// per thread, connections pooled per receiver host and reused across requests; receivers that
// choose HTTP/2 by ALPN are served by libcurl instead (see "Transports" below).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<HttpSender> sender, HttpSender::Create({.threads = 2}));
//   sender->Send({.url = url, .headers = headers, .body = body},
//                [](HttpResult r) { /* on a sender thread */ });
//
// Each request is a POST of `body` with the caller's headers plus `User-Agent: hookrelay/1.0` and
// `Content-Type: application/json` (unless the caller set those headers itself) and no
// `Expect: 100-continue`. Redirects are not followed (a 3xx is the result). Only http and https
// URLs are accepted; proxy settings in the environment are ignored; TLS certificates and host
// names are always verified. The response body is read and discarded; only the status, the HTTP
// version and the Retry-After header are kept.
//
// Private networks: unless Options::allow_private_networks, a connection to any address that
// deliverer/address_policy.h refuses is never opened. The check runs on the address being
// connected to, after DNS resolution, so DNS rebinding cannot get around it. The result is then
// TransportError::kForbiddenAddress and nothing was sent.
//
// Connection slots (honest timeouts): each worker thread lets at most
// Options::max_host_connections requests per receiver host (scheme, host and port) run at once.
// Further requests to that host wait in the worker's own FIFO queue for that host and start when
// a request to the host completes. A request's timeout starts when it gets its slot (name
// resolution, connect and TLS count, or the first byte sent on a kept-alive connection), so it
// measures the receiver, never the wait for a slot; that wait is reported separately
// (HttpResult::queued).
//
// Connections: HTTP keep-alive always: a connection goes back to its thread's pool for its host
// after its request and is reused by the next one to that host (most recently used first). A
// pooled connection keeps a read waiting, so one that the receiver closes (or sends anything on)
// while idle leaves the pool as soon as that read ends. No pipelining: a connection carries one
// request at a time. A request on a reused connection that the receiver resets before any byte of
// an answer (the reset shows that the request was never read whole), or answers with a 408 (a
// receiver's idle timeout that crossed the request), is sent once more on a fresh connection; a
// clean close without an answer is reported (kConnect), since the receiver may have processed it.
//
// Transports: plain http:// is always HTTP/1.1 (no h2c upgrade), on deliverer/http/h1_connection.h.
// https:// connections offer ALPN "h2,http/1.1"; when a receiver selects http/1.1 (or offers no
// ALPN) the connection is used as above. When it selects h2, the connection is closed before
// anything was sent, the worker remembers the host as HTTP/2 (for the sender's lifetime), and that
// request and every later one to the host go through libcurl's multi interface
// (deliverer/http/curl_sender.h, one extra thread, started on first use), multiplexed over shared
// connections, still within this sender's slots and timeouts (the request's remaining time is
// libcurl's timeout).
//
// Threading: Options::threads worker threads, each with its own io_context, connection pools,
// per-host queues and slots; requests are spread round-robin. Send() is thread-safe and never
// blocks on the network. Each callback runs exactly once, on a worker thread (or, for requests
// still pending when the sender is destroyed, on the destroying thread), and must not block: it
// holds up every other request of its thread. A callback may call Send().
//
// The process should ignore SIGPIPE (the deliverer's main does).
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

#include "deliverer/http/http_message.h"
#include "deliverer/outcome_policy.h"

namespace hookrelay::deliverer {

class HttpSender {
 public:
  struct Options {
    // Allows loopback, private, link-local and metadata addresses (tests, on-premises receivers).
    bool allow_private_networks = false;
    // A PEM file of extra CA certificates to trust besides the system's default store (tests with
    // a self-signed receiver). Empty = the default store only. Create() fails when it cannot be
    // read or holds no certificate.
    std::string ca_file;
    // Worker threads, each with its own io_context and connection pool; at least 1.
    int threads = 1;
    // Connection slots per receiver host per thread: requests to one host running at once.
    // Further requests to that host wait in the thread's FIFO queue for it (see above). At least 1.
    long max_host_connections = 64;
    // Open connections kept per thread once their request is done (all hosts together); beyond
    // it the least recently used are closed. At least 1.
    long max_cached_connections = 256;
  };

  // Called exactly once per request with its result. Must not block.
  using Callback = HttpCallback;

  // Starts the worker threads. InvalidArgument for bad options or an unreadable ca_file; Internal
  // when OpenSSL cannot make a TLS context.
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

  // Requests sent whose callback has not started yet (waiting for a slot or running).
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

 private:
  class Worker;
  struct Shared;

  explicit HttpSender(std::unique_ptr<Shared> shared);

  // Constant after construction.
  const std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Worker>> workers_;

  std::atomic<uint64_t> next_worker_{0};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_HTTP_SENDER_H_
