// One HTTP/1.1 server on Boost.Beast for every HTTP port of a hookrelay process: the ingest API
// (collector/ingest/http_server), the admin API and console (collector/admin/admin_http) and
// /metrics with the probes (common/metrics_server). It owns the listener, the I/O threads and the
// connections; what a request means is the handler's business.
//
// Each connection reads one request at a time (headers first, so `Expect: 100-continue` is
// answered before the body is sent), hands it to the handler, writes the one answer the handler
// gives back (from any thread, at any later time), then reads the next request while the answer
// and the request allow keep-alive and the listener still accepts. A connection idle for
// `idle_timeout` is closed. Each connection runs on its own strand, so handlers of one connection
// never run concurrently.
//
// Thread-safe: Start, StopAccepting and Shutdown from one thread; the handlers are called on the
// I/O threads and must not block them for long (see each user's header for what it does).
#ifndef HOOKRELAY_COMMON_HTTP_LISTENER_H_
#define HOOKRELAY_COMMON_HTTP_LISTENER_H_

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace hookrelay::common {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

namespace internal {
class HttpSession;
}  // namespace internal

// Hands a request's answer back to its connection. Call exactly once, from any thread; a
// responder dropped without an answer closes the connection. Movable, not copyable.
class HttpResponder {
 public:
  explicit HttpResponder(std::shared_ptr<internal::HttpSession> session);
  HttpResponder(HttpResponder&&) noexcept;
  HttpResponder& operator=(HttpResponder&&) noexcept;
  ~HttpResponder();

  // Writes `response` (prepare_payload() is called here; a HEAD request's body is dropped).
  // The connection stays open afterwards when `response.keep_alive()`.
  void Respond(HttpResponse response) &&;

 private:
  std::shared_ptr<internal::HttpSession> session_;
};

class HttpListener {
 public:
  struct Options {
    // host:port; port 0 binds a free port (see port()). IPv6 as [::1]:8080; ":8080" = 0.0.0.0.
    std::string address;
    // Names the address in errors ("metrics address").
    std::string address_name = "HTTP address";
    int threads = 1;
    // Silence allowed while a request is read, and while an answer is written.
    absl::Duration idle_timeout = absl::Seconds(30);
    uint64_t body_limit = 64 * 1024;
    uint32_t header_limit = 8 * 1024;
    bool tcp_nodelay = false;
    // Shutdown waits up to this long for answers of requests already read to be written.
    absl::Duration drain_timeout = absl::ZeroDuration();
  };

  struct Handlers {
    // Every request read whole, with the connection's remote endpoint. Required.
    std::function<void(HttpRequest request, const boost::asio::ip::tcp::endpoint& peer,
                       HttpResponder responder)>
        request;
    // A request that could not be read whole for a reason other than the peer going away or
    // the idle timeout (the body is over the limit: http::error::body_limit; malformed HTTP):
    // the answer (the connection is closed after it), or nullopt to close at once. Null =
    // close at once.
    std::function<std::optional<HttpResponse>(boost::beast::error_code error)> read_error;
    // +1 when a connection opens, -1 when it closes. Optional.
    std::function<void(int delta)> connections;
  };

  HttpListener(Options options, Handlers handlers);
  ~HttpListener();

  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Binds and serves. Errors: the address cannot be parsed (INVALID_ARGUMENT) or bound
  // (UNAVAILABLE); the message names the address.
  absl::Status Start();
  // The bound port (after Start).
  int port() const;
  // Whether the listener still accepts (false after StopAccepting or Shutdown).
  bool accepting() const;
  // Closes the listener; each open connection is closed after its current answer.
  void StopAccepting();
  // StopAccepting, waits up to drain_timeout for answers being written, then closes every
  // connection and joins the I/O threads. Idempotent.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_HTTP_LISTENER_H_
