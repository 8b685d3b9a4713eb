// The libcurl transport of the deliverer's HTTP sender, kept for receivers that choose HTTP/2 by
// ALPN (deliverer/http_sender.h routes a host here once one of its TLS handshakes selected "h2").
// It sends webhook POSTs with libcurl's multi interface: many requests in flight per thread,
// connections kept alive and reused across requests to the same host, HTTP/2 multiplexing when an
// HTTPS receiver offers it, HTTP/1.1 otherwise.
//
// The request rules are HttpSender's (http_sender.h): the sender's User-Agent and Content-Type
// unless the caller set them, no `Expect: 100-continue`, redirects not followed, only http and
// https, environment proxies ignored, certificates and host names verified (plus
// Options::trust), the address policy applied to the address connected to, CR/LF/NUL in headers
// refused with nothing sent.
//
// Connection slots: each worker thread lets at most Options::max_host_connections requests per
// receiver host into libcurl at once; further ones wait in the worker's FIFO for that host, and a
// request's timeout starts when it enters libcurl. HttpSender enforces its own slots before it
// hands a request over, and sizes these so that nothing waits here.
//
// Threading: Options::threads worker threads, each with its own curl multi handle; Send() is
// thread-safe and never blocks on the network; each callback runs exactly once, on a worker
// thread (or on the destroying thread for requests pending at destruction, with kOther "sender
// shutting down"), and must not block. Internal to the deliverer's sender.
#ifndef HOOKRELAY_DELIVERER_HTTP_CURL_SENDER_H_
#define HOOKRELAY_DELIVERER_HTTP_CURL_SENDER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"

#include "deliverer/http/http_message.h"
#include "deliverer/http/tls.h"

namespace hookrelay::deliverer::http {

class CurlSender {
 public:
  struct Options {
    bool allow_private_networks = false;
    // Extra CA certificates trusted besides the default store; null = none.
    std::shared_ptr<const TlsTrust> trust;
    int threads = 1;
    long max_host_connections = 64;
    long max_cached_connections = 256;
  };

  using Callback = absl::AnyInvocable<void(HttpResult) &&>;

  // InvalidArgument for bad options; Internal when libcurl cannot be initialised.
  static absl::StatusOr<std::unique_ptr<CurlSender>> Create(Options options);

  CurlSender(const CurlSender&) = delete;
  CurlSender& operator=(const CurlSender&) = delete;

  // Stops and joins the worker threads; pending requests complete with kOther, "sender shutting
  // down". REQUIRES: no thread other than the sender's own callbacks calls Send() concurrently.
  ~CurlSender();

  // Queues `request`; `done` receives its result. Thread-safe. REQUIRES: `done` is non-null.
  void Send(HttpRequest request, Callback done);

  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

 private:
  class Worker;

  explicit CurlSender(Options options);

  // Constant after construction.
  const Options options_;
  std::vector<std::unique_ptr<Worker>> workers_;

  std::atomic<uint64_t> next_worker_{0};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace hookrelay::deliverer::http

#endif  // HOOKRELAY_DELIVERER_HTTP_CURL_SENDER_H_
