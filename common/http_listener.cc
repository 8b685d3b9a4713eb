#include "common/http_listener.h"

#include <algorithm>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/tcp_endpoint.h"

namespace hookrelay::common {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

// The most a read of a request body asks the socket for (Beast's own cap per read).
constexpr size_t kMaxReadBytes = 64 << 10;

// What every connection needs from its listener.
struct ListenerState {
  const HttpListener::Options options;
  const HttpListener::Handlers handlers;
  std::atomic<bool> accepting{true};
  // Requests read but not yet answered on the wire; Shutdown waits for them (drain_timeout).
  std::atomic<int> in_flight{0};
};

// The peer went away or stayed silent: nothing to answer.
bool PeerGone(beast::error_code ec) {
  return ec == http::error::end_of_stream || ec == net::error::operation_aborted ||
         ec == beast::error::timeout || ec == net::error::connection_reset ||
         ec == net::error::eof;
}

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(absl::ToChronoNanoseconds(d));
}

}  // namespace

namespace internal {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, ListenerState& state)
      : stream_(std::move(socket)), state_(state) {
    beast::error_code ec;
    peer_ = stream_.socket().remote_endpoint(ec);
    if (state_.handlers.connections) state_.handlers.connections(+1);
  }
  ~HttpSession() {
    if (counted_) state_.in_flight.fetch_sub(1);
    if (state_.handlers.connections) state_.handlers.connections(-1);
  }

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->Read(); });
  }

  // From any thread.
  void Answer(HttpResponse response) {
    net::dispatch(stream_.get_executor(),
                  [self = shared_from_this(), response = std::move(response)]() mutable {
                    self->Write(std::move(response));
                  });
  }

  // From any thread: the handler gave up without an answer.
  void Abandon() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->Close(); });
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(state_.options.body_limit);
    parser_->header_limit(state_.options.header_limit);
    stream_.expires_after(ToChrono(state_.options.idle_timeout));
    // Headers first, so that `Expect: 100-continue` can be answered before the body is sent.
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->OnHeader(ec);
                            });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) {
      OnRead(ec);
      return;
    }
    const auto& request = parser_->get();
    const beast::string_view expect = request[http::field::expect];
    if (request.version() >= 11 &&
        absl::EqualsIgnoreCase(absl::string_view(expect.data(), expect.size()), "100-continue")) {
      continue_ = std::make_unique<http::response<http::empty_body>>(http::status::continue_,
                                                                     request.version());
      http::async_write(stream_, *continue_,
                        [self = shared_from_this()](beast::error_code ec, size_t) {
                          if (ec) {
                            self->Close();
                            return;
                          }
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    // Room for a JSON parser's padding up front, so a handler never copies the body to add it.
    if (const auto length = parser_->content_length();
        length && *length <= state_.options.body_limit) {
      parser_->get().body().reserve(static_cast<size_t>(*length) + 64);
      // Beast reads at most what the read buffer has room for beyond 512 bytes, and the body
      // parser empties that buffer after every read, so it never grows: a 30 KB body took 60
      // reads of 512 bytes, each a system call and a trip through the event loop. Room for the
      // whole body (up to 64 KB a read) makes it one or two; kept for the connection's next
      // requests.
      buffer_.reserve(std::min<size_t>(static_cast<size_t>(*length), kMaxReadBytes));
    }
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (PeerGone(ec)) {
      Close();
      return;
    }
    counted_ = true;
    state_.in_flight.fetch_add(1);
    if (ec) {
      std::optional<HttpResponse> answer;
      if (state_.handlers.read_error) answer = state_.handlers.read_error(ec);
      if (!answer) {
        Close();
        return;
      }
      answer->keep_alive(false);
      Write(std::move(*answer));
      return;
    }
    stream_.expires_never();
    head_ = parser_->get().method() == http::verb::head;
    state_.handlers.request(parser_->release(), peer_, HttpResponder(shared_from_this()));
  }

  void Write(HttpResponse response) {
    response_ = std::move(response);
    response_.prepare_payload();
    if (head_) response_.body().clear();  // HEAD: the headers of the GET answer, no body
    head_ = false;
    stream_.expires_after(ToChrono(state_.options.idle_timeout));
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->counted_) {
        self->counted_ = false;
        self->state_.in_flight.fetch_sub(1);
      }
      if (ec || !self->response_.keep_alive() || !self->state_.accepting.load()) {
        self->Close();
        return;
      }
      self->Read();
    });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  ListenerState& state_;
  tcp::endpoint peer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::unique_ptr<http::response<http::empty_body>> continue_;
  HttpResponse response_;
  bool head_ = false;
  bool counted_ = false;  // this request is counted in ListenerState::in_flight
};

}  // namespace internal

HttpResponder::HttpResponder(std::shared_ptr<internal::HttpSession> session)
    : session_(std::move(session)) {}
HttpResponder::HttpResponder(HttpResponder&&) noexcept = default;
HttpResponder& HttpResponder::operator=(HttpResponder&&) noexcept = default;
HttpResponder::~HttpResponder() {
  if (session_) session_->Abandon();
}

void HttpResponder::Respond(HttpResponse response) && {
  std::shared_ptr<internal::HttpSession> session = std::move(session_);
  session->Answer(std::move(response));
}

struct HttpListener::Impl {
  Impl(Options options, Handlers handlers)
      : state{std::move(options), std::move(handlers)},
        ioc(std::max(1, state.options.threads)),
        acceptor(ioc) {}

  void Accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == net::error::operation_aborted || !state.accepting.load()) return;
        LogWarning("http accept failed",
                   {{"address", state.options.address}, {"error", ec.message()}});
      } else {
        if (state.options.tcp_nodelay) socket.set_option(tcp::no_delay(true), ec);
        std::make_shared<internal::HttpSession>(std::move(socket), state)->Start();
      }
      if (state.accepting.load()) Accept();
    });
  }

  // Declared before the I/O context: sessions still queued in it are freed with it and tell
  // the state.
  ListenerState state;
  net::io_context ioc;
  // Keeps the I/O threads running while nothing is pending on the sockets: after StopAccepting,
  // a connection waiting for its handler's answer has no operation in flight, and without the
  // guard ioc.run() would return and the answer, posted later, would never be written.
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  int port = 0;
  bool started = false;
};

HttpListener::HttpListener(Options options, Handlers handlers)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handlers))) {}

HttpListener::~HttpListener() { Shutdown(); }

absl::Status HttpListener::Start() {
  const Options& options = impl_->state.options;
  tcp::endpoint endpoint;
  if (absl::Status s = ParseTcpEndpoint(options.address, options.address_name, &endpoint); !s.ok()) {
    return s;
  }
  beast::error_code ec;
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.address_name, " ",
                                               options.address, ": ", ec.message()));
  }
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->Accept();
  impl_->started = true;
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  }
  return absl::OkStatus();
}

int HttpListener::port() const { return impl_->port; }

bool HttpListener::accepting() const { return impl_->state.accepting.load(); }

void HttpListener::StopAccepting() {
  if (!impl_->state.accepting.exchange(false) || !impl_->started) return;
  net::post(impl_->ioc, [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
  });
}

void HttpListener::Shutdown() {
  StopAccepting();
  if (!impl_->started) return;
  impl_->started = false;
  // Let answers already handed to connections be written (bounded: a client that stops reading
  // must not hold shutdown forever).
  const absl::Time deadline = absl::Now() + impl_->state.options.drain_timeout;
  while (impl_->state.in_flight.load() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));  // Real time: answers being written to sockets.
  }
  impl_->work.reset();
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

}  // namespace hookrelay::common
