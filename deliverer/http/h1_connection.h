// One HTTP/1.1 keep-alive connection of the deliverer's sender to one receiver host, plain TCP or
// TLS (OpenSSL driven by tls_socket.h), on Boost.Beast's parser. Part of deliverer/http_sender.cc's
// worker: it owns the pool and the slots, a connection runs one exchange at a time.
//
// An exchange: on a new connection, the host is resolved (asio's resolver: the worker's io_context
// is never blocked), each address is checked against the address policy before it is connected to
// (a refused address is skipped; when every address was refused, kForbiddenAddress and nothing is
// sent), TCP_NODELAY is set, then for https the TLS handshake (SNI, certificate and host-name
// verification, ALPN offering h2 and http/1.1; tls_socket.h). Then the request head
// (request_head.h) and the body go out in one gather write (one buffer for TLS when the body is
// small), while the response is read with a Beast parser that keeps the status, the HTTP version
// and Retry-After and discards the body (Content-Length, chunked, or up to the close); 1xx interim
// responses are skipped. No pipelining: the next exchange starts only after this one's response
// has been read whole.
//
// Ends, reported to the owner (H1ConnectionOwner::ExchangeDone) exactly once per Begin:
//   kResponse  a complete response; reusable() says whether the connection may serve another one
//              (the response allowed keep-alive, the whole request was written, nothing extra
//              arrived).
//   kFailed    an error (TransportError and a detail for logs), or the deadline passed (kTimeout).
//   kRetry     the connection had served an earlier exchange and the receiver reset it before any
//              byte of a response: a reset means the receiver's socket was closed with our request
//              unread (or arriving after the close), so none of it can have been processed and it
//              may be sent again on a fresh connection. A clean close (EOF) before any response
//              byte is kFailed instead: the receiver may have read and processed the request.
//              Likewise a 408 on a reused connection (a receiver timing out an idle connection
//              may send one; if it crossed our request on the wire it is not that request's answer).
//   kHttp2     the TLS handshake selected h2: nothing was sent; the owner routes the host elsewhere.
//
// Not thread-safe: every call and every handler runs on the owner's io_context thread. Lifetime:
// the owner creates connections with new, and ends them with Retire(), after which the connection
// deletes itself once none of its asynchronous operations is pending; the owner must not touch it
// after Retire. At shutdown, after the io_context has stopped, the owner deletes the connections
// that are left directly.
#ifndef HOOKRELAY_DELIVERER_HTTP_H1_CONNECTION_H_
#define HOOKRELAY_DELIVERER_HTTP_H1_CONNECTION_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/intrusive/list_hook.hpp>

#include "absl/time/time.h"

#include "deliverer/http/http_message.h"
#include "deliverer/http/response_parser.h"
#include "deliverer/http/tls_socket.h"
#include "deliverer/http/url.h"
#include "deliverer/outcome_policy.h"

namespace hookrelay::deliverer::http {

// A request that holds a connection slot.
struct SlotRequest {
  HttpRequest request;
  HttpCallback done;
  absl::Time queued;   // Send()
  absl::Time started;  // got its slot
  std::chrono::steady_clock::time_point deadline;
  bool retried = false;  // already sent again once after a reset (kRetry)
};

enum class ExchangeEnd { kResponse, kFailed, kRetry, kHttp2 };

struct ExchangeOutcome {
  ExchangeEnd end = ExchangeEnd::kFailed;
  int status = 0;
  int http_version = 0;
  std::string retry_after;
  TransportError error = TransportError::kOther;
  std::string detail;
};

class H1Connection;

class H1ConnectionOwner {
 public:
  // The exchange ended. The connection is idle (not busy()); its request is still in it (take it
  // with TakeRequest). Runs inside the connection's handler: the owner may Retire it.
  virtual void ExchangeDone(H1Connection& connection, ExchangeOutcome& outcome) = 0;
  // A pooled (idle) connection was closed by the receiver. Runs inside the connection's handler:
  // the owner takes it out of its pool and retires it.
  virtual void IdleConnectionLost(H1Connection& connection) = 0;

 protected:
  ~H1ConnectionOwner() = default;
};

class H1Connection {
 public:
  using AutoUnlinkHook =
      boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>>;

  // `url`: the host's (any URL of it); `tls_context` is used when it is https (and must outlive the
  // connection).
  H1Connection(boost::asio::io_context& io, boost::asio::ssl::context& tls_context,
               H1ConnectionOwner& owner, const UrlParts& url, bool allow_private_networks);
  ~H1Connection();

  H1Connection(const H1Connection&) = delete;
  H1Connection& operator=(const H1Connection&) = delete;

  // Starts the exchange of `request` (connecting first if needed). REQUIRES: !busy(), not retired,
  // request.request.url parses and its headers pass CheckHeaders.
  void Begin(SlotRequest request);

  // The request of the exchange that ended (or, at shutdown, of one in progress).
  SlotRequest TakeRequest();

  bool busy() const { return busy_; }
  // Connected, and the last exchange left it fit for another one.
  bool reusable() const { return reusable_; }
  // Served at least one exchange.
  bool reused() const { return exchanges_ > 0; }
  // An idle connection still fit for a request. While pooled a connection keeps a read waiting
  // for its next response; when that read ends first (the receiver closed the connection or sent
  // bytes nobody asked for) the owner is told (IdleConnectionLost). A close that the read has not
  // seen yet is the reset case of kRetry.
  bool StillOpen() const;

  // Closes the connection; it deletes itself once nothing of it is pending. Idempotent.
  void Retire();

  // The owner's bookkeeping: the host's idle list, the worker's LRU of idle connections, and the
  // list of every connection (freed at shutdown).
  AutoUnlinkHook idle_hook;
  AutoUnlinkHook lru_hook;
  AutoUnlinkHook all_hook;
  void* host = nullptr;
  std::chrono::steady_clock::time_point idle_since;

 private:
  enum class Phase { kResolving, kConnecting, kHandshaking, kExchanging };

  template <class F>
  auto Guarded(F f);
  template <class F>
  void WithStream(F&& f);

  void Resolve();
  void Connect();
  void OnConnected(const boost::system::error_code& ec, const boost::asio::ip::tcp::endpoint& peer);
  void OnHandshake(const boost::system::error_code& ec);
  void Exchange();
  void Read();
  void OnWrite(const boost::system::error_code& ec);
  void OnRead(const boost::system::error_code& ec);
  bool ResetPending();
  void ArmTimer();
  void OnTimer();
  void Fail(TransportError error, std::string detail);
  void End(ExchangeEnd end);
  void Close();

  boost::asio::ssl::context& tls_context_;
  H1ConnectionOwner& owner_;
  const bool tls_wanted_;
  const bool allow_private_networks_;
  const std::string host_;
  const uint16_t port_;

  // On the io_context's executor type (not any_io_executor): see tls_socket.h.
  boost::asio::ip::basic_resolver<boost::asio::ip::tcp, TlsSocket::executor_type> resolver_;
  TlsSocket::Socket socket_;
  std::optional<TlsSocket> tls_;
  boost::asio::basic_waitable_timer<std::chrono::steady_clock,
                                    boost::asio::wait_traits<std::chrono::steady_clock>,
                                    TlsSocket::executor_type>
      timer_;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
  std::string refused_;  // the first address the policy refused, as a detail

  // The exchange.
  SlotRequest request_;
  ExchangeOutcome outcome_;
  std::string head_;  // reused: its capacity stays
  std::array<boost::asio::const_buffer, 2> buffers_;
  boost::beast::flat_buffer buffer_;
  std::optional<ResponseParser> parser_;
  std::string retry_after_;  // the parser's; copied into outcome_ when a response is complete
  Phase phase_ = Phase::kResolving;
  bool busy_ = false;
  bool connected_ = false;
  bool reusable_ = false;
  bool writing_ = false;
  bool reading_ = false;
  boost::system::error_code write_error_;
  uint64_t exchanges_ = 0;

  // Lifetime.
  int ops_ = 0;      // asynchronous operations pending
  int running_ = 0;  // handlers of this connection on the stack
  bool retired_ = false;
  bool timer_armed_ = false;
  std::chrono::steady_clock::time_point timer_expiry_;
};

}  // namespace hookrelay::deliverer::http

#endif  // HOOKRELAY_DELIVERER_HTTP_H1_CONNECTION_H_
