#include "deliverer/http/h1_connection.h"

#include <sys/socket.h>

#include <cerrno>

#include <boost/asio/connect.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"

#include "deliverer/address_policy.h"
#include "deliverer/http/request_head.h"
#include "deliverer/http/tls.h"

namespace hookrelay::deliverer::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using boost::system::error_code;

// A TLS body up to this size is copied behind the head: one TLS record and one send instead of two
// (TlsSocket writes one buffer per record).
constexpr size_t kCoalesceLimit = 16 * 1024;
// Read buffer: what one read may take in at most (larger bodies pass through it in pieces).
constexpr size_t kReadBufferLimit = 128 * 1024;

bool IsReset(const error_code& ec) {
  return ec == net::error::connection_reset || ec == net::error::broken_pipe;
}

bool IsEof(const error_code& ec) {
  return ec == net::error::eof || ec == beast::http::error::end_of_stream ||
         ec == net::ssl::error::stream_truncated;
}

const std::string& EmptyString() {
  static const std::string* const kEmpty = new std::string();
  return *kEmpty;
}

}  // namespace

H1Connection::H1Connection(net::io_context& io, net::ssl::context& tls_context,
                           H1ConnectionOwner& owner, const UrlParts& url,
                           bool allow_private_networks)
    : tls_context_(tls_context),
      owner_(owner),
      tls_wanted_(url.tls),
      allow_private_networks_(allow_private_networks),
      host_(url.host),
      port_(url.port),
      resolver_(io),
      socket_(io),
      timer_(io),
      buffer_(kReadBufferLimit) {}

H1Connection::~H1Connection() = default;

// Every asynchronous operation's handler goes through here: it counts the operation, skips the
// handler once the connection is retired, and deletes a retired connection after the last one.
template <class F>
auto H1Connection::Guarded(F f) {
  ++ops_;
  // SFINAE-friendly, so that asio can tell which completion signature it accepts.
  return [this, f = std::move(f)](auto... args) mutable
         -> std::enable_if_t<std::is_invocable_v<F&, decltype(args)...>> {
    --ops_;
    if (!retired_) {
      ++running_;
      f(args...);
      --running_;
    }
    if (retired_ && ops_ == 0 && running_ == 0) delete this;
  };
}

template <class F>
void H1Connection::WithStream(F&& f) {
  if (tls_) {
    f(*tls_);
  } else {
    f(socket_);
  }
}

void H1Connection::Begin(SlotRequest request) {
  request_ = std::move(request);
  outcome_ = ExchangeOutcome();
  busy_ = true;
  reusable_ = false;
  ArmTimer();
  if (connected_) {
    Exchange();
  } else {
    Resolve();
  }
}

SlotRequest H1Connection::TakeRequest() { return std::move(request_); }

bool H1Connection::StillOpen() const { return connected_ && reading_ && socket_.is_open(); }

// After an EOF: whether a reset arrived behind the receiver's FIN (Linux reports the FIN first and
// keeps the reset as the socket's pending error). The reset means our request reached a socket the
// receiver had already closed, unread.
bool H1Connection::ResetPending() {
  int error = 0;
  socklen_t length = sizeof(error);
  if (getsockopt(socket_.native_handle(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) return false;
  return error == ECONNRESET || error == EPIPE;
}

void H1Connection::Retire() {
  if (retired_) return;
  retired_ = true;
  busy_ = false;
  idle_hook.unlink();
  lru_hook.unlink();
  Close();
  if (ops_ == 0 && running_ == 0) delete this;
}

void H1Connection::Close() {
  connected_ = false;
  reusable_ = false;
  error_code ignored;
  resolver_.cancel();
  timer_.cancel();
  timer_armed_ = false;
  socket_.close(ignored);
}

void H1Connection::Resolve() {
  phase_ = Phase::kResolving;
  error_code ec;
  const net::ip::address literal = net::ip::make_address(host_, ec);
  if (!ec) {
    endpoints_.assign(1, tcp::endpoint(literal, port_));
    Connect();
    return;
  }
  resolver_.async_resolve(
      host_, std::to_string(port_), tcp::resolver::numeric_service,
      Guarded([this](error_code ec, tcp::resolver::results_type results) {
        if (!busy_) return;
        if (ec) {
          Fail(TransportError::kConnect,
               absl::StrCat("could not resolve host ", host_, ": ", ec.message()));
          return;
        }
        endpoints_.clear();
        for (const auto& entry : results) endpoints_.push_back(entry.endpoint());
        Connect();
      }));
}

void H1Connection::Connect() {
  phase_ = Phase::kConnecting;
  refused_.clear();
  // The address policy runs on each address right before it is connected to.
  auto allowed = [this](const error_code&, const tcp::endpoint& endpoint) {
    if (allow_private_networks_) return true;
    const std::string_view reason = ForbiddenAddressReason(endpoint.data());
    if (reason.empty()) return true;
    if (refused_.empty()) {
      refused_ = absl::StrCat("refused ", FormatAddress(endpoint.data()), ": ", std::string(reason),
                              "; --allow_private_networks permits it");
    }
    return false;
  };
  net::async_connect(socket_, endpoints_, allowed,
                     Guarded([this](error_code ec, tcp::endpoint peer) { OnConnected(ec, peer); }));
}

void H1Connection::OnConnected(const error_code& ec, const tcp::endpoint& peer) {
  if (!busy_) return;
  if (ec) {
    if (!refused_.empty()) {
      Fail(TransportError::kForbiddenAddress, refused_);
    } else {
      Fail(TransportError::kConnect,
           absl::StrCat("connect to ", host_, " port ", port_, " failed: ", ec.message()));
    }
    return;
  }
  error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  if (!tls_wanted_) {
    connected_ = true;
    Exchange();
    return;
  }
  phase_ = Phase::kHandshaking;
  tls_.emplace(socket_, tls_context_.native_handle());
  std::string error;
  if (!tls_->ok()) {
    Fail(TransportError::kOther, absl::StrCat("TLS setup for ", host_, " failed"));
    return;
  }
  if (!PrepareClient(tls_->native_handle(), host_, &error)) {
    Fail(TransportError::kOther, std::move(error));
    return;
  }
  tls_->async_handshake(Guarded([this](error_code ec) { OnHandshake(ec); }));
}

void H1Connection::OnHandshake(const error_code& ec) {
  if (!busy_) return;
  if (ec) {
    std::string detail;
    const TransportError error = DescribeHandshakeFailure(tls_->native_handle(), ec, host_, &detail);
    Fail(error, std::move(detail));
    return;
  }
  if (SelectedHttp2(tls_->native_handle())) {
    Close();
    End(ExchangeEnd::kHttp2);
    return;
  }
  connected_ = true;
  Exchange();
}

void H1Connection::Exchange() {
  phase_ = Phase::kExchanging;
  const std::string& body =
      request_.request.body != nullptr ? *request_.request.body : EmptyString();
  UrlParts url;
  std::string error;
  ParseUrl(request_.request.url, &url, &error);  // checked by the owner
  head_.clear();
  AppendRequestHead(url, request_.request, body.size(), &head_);
  if (tls_ && body.size() <= kCoalesceLimit) {
    head_.append(body);
    buffers_ = {net::buffer(head_), net::const_buffer()};
  } else {
    buffers_ = {net::buffer(head_), net::buffer(body)};
  }
  writing_ = true;
  write_error_ = {};
  WithStream([this](auto& stream) {
    net::async_write(stream, buffers_,
                     Guarded([this](error_code ec, size_t) { OnWrite(ec); }));
  });
  // The response is read while the request is written: a receiver may answer (and close) before
  // it has read a large body. On a reused connection the read is already waiting (see OnRead).
  if (!reading_) Read();
}

void H1Connection::Read() {
  reading_ = true;
  parser_.emplace(retry_after_);
  WithStream([this](auto& stream) {
    beast::http::async_read(stream, buffer_, *parser_,
                            Guarded([this](error_code ec, size_t) { OnRead(ec); }));
  });
}

void H1Connection::OnWrite(const error_code& ec) {
  writing_ = false;
  if (!busy_) return;
  // An error: the read decides (a response may still arrive, or the reset shows there too).
  // Success: the read's end ends the exchange.
  write_error_ = ec;
}

void H1Connection::OnRead(const error_code& ec) {
  reading_ = false;
  if (!busy_) {
    // The read waiting on an idle connection ended: the receiver closed it, reset it or sent
    // something nobody asked for (a 408, say). Either way it cannot carry a request.
    Close();
    owner_.IdleConnectionLost(*this);
    return;
  }
  if (ec) {
    const bool nothing_received = !parser_->got_some() && buffer_.size() == 0;
    if (nothing_received && reused() && !request_.retried &&
        (IsReset(ec) || IsReset(write_error_) || (IsEof(ec) && ResetPending()))) {
      Close();
      End(ExchangeEnd::kRetry);
      return;
    }
    if (nothing_received && (IsEof(ec) || IsReset(ec))) {
      Fail(TransportError::kConnect,
           absl::StrCat("the receiver ", IsEof(ec) ? "closed" : "reset",
                        " the connection without answering (", ec.message(), ")"));
    } else if (IsEof(ec) || IsReset(ec)) {
      Fail(IsReset(ec) ? TransportError::kConnect : TransportError::kOther,
           absl::StrCat("the response was cut short: ", ec.message()));
    } else if (ec.category() ==
               beast::http::make_error_code(beast::http::error::bad_version).category()) {
      Fail(TransportError::kOther, absl::StrCat("malformed response: ", ec.message()));
    } else {
      Fail(TransportError::kConnect, absl::StrCat("reading the response failed: ", ec.message()));
    }
    return;
  }
  const int status = parser_->status();
  if (status >= 100 && status < 200) {
    if (status == 101) {
      Fail(TransportError::kOther, "unexpected 101 Switching Protocols");
      return;
    }
    Read();  // an interim response: the final one follows
    return;
  }
  if (status == 408 && reused() && !request_.retried) {
    // A receiver closing an idle connection may say so with a 408 first; when that answer raced
    // with our request, it is not the request's answer (408: the request was not received whole).
    Close();
    End(ExchangeEnd::kRetry);
    return;
  }
  outcome_.status = status;
  outcome_.http_version = parser_->http_version();
  if (writing_) {
    // Answered before the whole request was written: the response counts, the connection cannot
    // carry another request.
    Close();
    End(ExchangeEnd::kResponse);
    return;
  }
  outcome_.retry_after.assign(retry_after_);
  reusable_ = parser_->keep_alive() && !write_error_ && buffer_.size() == 0;
  if (reusable_) {
    // Wait for the next response at once, before the connection goes back to the pool: it tells
    // the pool as soon as the receiver closes the idle connection, and the next exchange on it
    // needs no read of its own. It costs one recv that finds nothing (EAGAIN): Asio's epoll
    // reactor tries a read at once unless the last one hit the end of the stream, and waiting for
    // readiness instead (async_wait) costs an epoll_ctl, so either way one system call per
    // exchange (docs/BENCHMARKS.md, "System calls per delivery").
    Read();
  } else {
    Close();
  }
  End(ExchangeEnd::kResponse);
}

void H1Connection::ArmTimer() {
  if (timer_armed_ && timer_expiry_ <= request_.deadline) return;
  timer_armed_ = true;
  timer_expiry_ = request_.deadline;
  timer_.expires_at(request_.deadline);  // cancels an earlier, later wait
  timer_.async_wait(Guarded([this](error_code ec) {
    if (ec == net::error::operation_aborted) return;
    timer_armed_ = false;
    OnTimer();
  }));
}

// The timer is armed once and left running across exchanges: each exchange only moves the
// deadline it is compared with (setting and cancelling it per request would cost system calls).
void H1Connection::OnTimer() {
  if (!busy_) return;
  if (std::chrono::steady_clock::now() < request_.deadline) {
    ArmTimer();
    return;
  }
  const char* phase = "waiting for the response";
  switch (phase_) {
    case Phase::kResolving:
      phase = "resolving the host";
      break;
    case Phase::kConnecting:
      phase = "connecting";
      break;
    case Phase::kHandshaking:
      phase = "in the TLS handshake";
      break;
    case Phase::kExchanging:
      if (writing_) phase = "sending the request";
      break;
  }
  const absl::Duration timeout = request_.request.timeout;
  Close();
  Fail(TransportError::kTimeout,
       absl::StrCat("timed out after ", absl::ToInt64Milliseconds(std::max(timeout, absl::Milliseconds(1))),
                    " ms ", phase, " (", host_, ")"));
}

void H1Connection::Fail(TransportError error, std::string detail) {
  Close();
  outcome_.error = error;
  outcome_.detail = std::move(detail);
  End(ExchangeEnd::kFailed);
}

void H1Connection::End(ExchangeEnd end) {
  busy_ = false;
  outcome_.end = end;
  if (end == ExchangeEnd::kResponse) ++exchanges_;
  owner_.ExchangeDone(*this, outcome_);
}

}  // namespace hookrelay::deliverer::http
