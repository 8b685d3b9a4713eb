#include "collector/ingest/http_server.h"

#include <atomic>
#include <charconv>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/ingest/http_request.h"
#include "common/json_writer.h"
#include "common/log.h"
#include "common/strings.h"

namespace hookrelay::collector {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

using Response = http::response<http::string_body>;

absl::string_view ToAbsl(beast::string_view s) { return absl::string_view(s.data(), s.size()); }

// What every connection needs from the server.
struct ServerState {
  const HttpServer::Options options;
  Ingestor& ingestor;
  IngestMetrics* const metrics;
  std::atomic<bool> accepting{true};
  // Requests read but not yet fully answered; Shutdown waits for them.
  std::atomic<int> in_flight{0};
};

}  // namespace

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServerState& server)
      : stream_(std::move(socket)), server_(server) {
    if (server_.metrics) server_.metrics->HttpConnectionOpened();
  }
  ~Session() {
    if (server_.metrics) server_.metrics->HttpConnectionClosed();
  }

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->Read(); });
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(kMaxRequestBytes);
    parser_->header_limit(16 * 1024);
    stream_.expires_after(absl::ToChronoSeconds(server_.options.idle_timeout));
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
    const auto& req = parser_->get();
    if (req.version() >= 11 && absl::EqualsIgnoreCase(ToAbsl(req[http::field::expect]), "100-continue")) {
      continue_ = std::make_unique<http::response<http::empty_body>>(http::status::continue_, req.version());
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
    // Room for simdjson's padding up front, so the body is never copied to add it later.
    if (const auto length = parser_->content_length(); length && *length <= kMaxRequestBytes) {
      parser_->get().body().reserve(static_cast<size_t>(*length) + 64);
    }
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::operation_aborted ||
        ec == beast::error::timeout || ec == net::error::connection_reset || ec == net::error::eof) {
      Close();
      return;
    }
    counted_ = true;
    server_.in_flight.fetch_add(1);
    if (ec == http::error::body_limit) {
      if (server_.metrics) server_.metrics->CountRejected("too_large");
      Send(http::status::payload_too_large,
           ErrorBody(absl::StrCat("request body is over ", kMaxRequestBytes, " bytes, at most ",
                                  kMaxRequestBytes, " allowed")),
           /*keep_alive=*/false, 11);
      return;
    }
    if (ec) {
      if (server_.metrics) server_.metrics->CountRejected("bad_http");
      Send(http::status::bad_request, ErrorBody(absl::StrCat("malformed HTTP request: ", ec.message())),
           false, 11);
      return;
    }
    stream_.expires_never();
    started_ = absl::Now();
    Handle(parser_->release());
  }

  void Handle(http::request<http::string_body> req) {
    const bool keep_alive = req.keep_alive();
    const unsigned version = req.version();
    head_ = req.method() == http::verb::head;
    const std::string_view target(req.target().data(), req.target().size());
    std::string_view path = target.substr(0, target.find('?'));

    // RFC 9112 §3.2: an HTTP/1.1 request without Host is answered 400.
    if (version >= 11 && req.find(http::field::host) == req.end()) {
      Send(http::status::bad_request, ErrorBody("HTTP/1.1 request without a Host header", "Host"),
           false, version);
      return;
    }
    if (path == "/healthz" || path == "/readyz") {
      if (!server_.accepting.load()) {
        Send(http::status::service_unavailable, R"({"status":"shutting down"})", keep_alive,
             version);
        return;
      }
      if (server_.options.health) {
        if (absl::Status health = server_.options.health(); !health.ok()) {
          std::string body;
          common::JsonObjectWriter w(&body);
          w.String("status", "not serving");
          w.String("reason", common::ToStd(health.message()));
          w.Close();
          Send(http::status::service_unavailable, std::move(body), keep_alive, version,
               /*retry_after=*/true);
          return;
        }
      }
      Send(http::status::ok, R"({"status":"serving"})", keep_alive, version);
      return;
    }
    RouteResult routed = RouteRequest(req);
    if (auto* answer = std::get_if<EarlyAnswer>(&routed)) {
      if (server_.metrics && !answer->reason.empty()) server_.metrics->CountRejected(answer->reason);
      Send(static_cast<http::status>(answer->status), std::move(answer->body), keep_alive,
           version);
      return;
    }
    IngestCall& call = std::get<IngestCall>(routed);
    const bool single = call.single;
    server_.ingestor.Ingest(
        call.write_key, std::move(call.events),
        [self = shared_from_this(), keep_alive, version, single](absl::StatusOr<IngestOutcome> r) {
          net::post(self->stream_.get_executor(),
                    [self, r = std::move(r), keep_alive, version, single]() mutable {
                      self->Answer(std::move(r), keep_alive, version, single);
                    });
        });
  }

  void Answer(absl::StatusOr<IngestOutcome> r, bool keep_alive, unsigned version, bool single) {
    if (!r.ok()) {
      if (r.status().code() == absl::StatusCode::kResourceExhausted) {
        Send(http::status::too_many_requests, ErrorBody(common::ToStd(r.status().message())), keep_alive, version,
             /*retry_after=*/true);
        return;
      }
      // UNAVAILABLE (the store cannot write, or shutting down) is temporary too.
      Send(static_cast<http::status>(HttpStatusFor(r.status())), ErrorBody(common::ToStd(r.status().message())), keep_alive,
           version, /*retry_after=*/r.status().code() == absl::StatusCode::kUnavailable);
      return;
    }
    if (single && !r->rejected.empty()) {
      const Rejection& rej = r->rejected.front();
      Send(http::status::bad_request, ErrorBody(rej.reason, rej.field), keep_alive, version);
      return;
    }
    std::string body;
    common::JsonObjectWriter w(&body);
    w.Bool("success", true);
    if (!r->rejected.empty()) {
      w.Key("rejected");
      body.push_back('[');
      for (size_t i = 0; i < r->rejected.size(); ++i) {
        if (i > 0) body.push_back(',');
        common::JsonObjectWriter item(&body);
        item.Int("index", static_cast<int64_t>(r->rejected[i].index));
        item.String("field", r->rejected[i].field);
        item.String("reason", r->rejected[i].reason);
        item.Close();
      }
      body.push_back(']');
    }
    w.Close();
    Send(http::status::ok, std::move(body), keep_alive, version);
  }

  void Send(http::status status, std::string body, bool keep_alive, unsigned version,
            bool retry_after = false) {
    res_ = Response(status, version);
    res_.set(http::field::server, "hookrelay");
    res_.set(http::field::access_control_allow_origin, "*");
    if (status == http::status::no_content) {
      res_.set(http::field::access_control_allow_methods, "POST, OPTIONS");
      res_.set(http::field::access_control_allow_headers, "Content-Type, Authorization, Content-Encoding");
    } else {
      res_.set(http::field::content_type, "application/json");
    }
    if (status == http::status::unauthorized) {
      res_.set(http::field::www_authenticate, "Basic realm=\"hookrelay\"");
    }
    // Overload clears in a second; a store that cannot write retries its disk every few.
    if (retry_after) {
      res_.set(http::field::retry_after,
               status == http::status::service_unavailable ? "5" : "1");
    }
    if (status == http::status::method_not_allowed) res_.set(http::field::allow, "POST, OPTIONS");
    res_.keep_alive(keep_alive);
    res_.body() = std::move(body);
    res_.prepare_payload();
    if (head_) res_.body().clear();  // HEAD: the headers of the GET answer, no body
    if (server_.metrics && started_ != absl::InfinitePast()) {
      server_.metrics->ObserveRequest("http", absl::ToDoubleSeconds(absl::Now() - started_));
    }
    started_ = absl::InfinitePast();
    stream_.expires_after(std::chrono::seconds(30));
    http::async_write(stream_, res_,
                      [self = shared_from_this(), keep_alive](beast::error_code ec, size_t) {
                        if (self->counted_) {
                          self->counted_ = false;
                          self->server_.in_flight.fetch_sub(1);
                        }
                        if (ec || !keep_alive || !self->server_.accepting.load()) {
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
  ServerState& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::unique_ptr<http::response<http::empty_body>> continue_;
  Response res_;
  bool head_ = false;
  bool counted_ = false;  // this request is counted in ServerState::in_flight
  absl::Time started_ = absl::InfinitePast();
};

}  // namespace

struct HttpServer::Impl {
  Impl(Options o, Ingestor& i, IngestMetrics* m)
      : state{std::move(o), i, m}, ioc(state.options.io_threads), acceptor(ioc) {}

  void Accept();

  ServerState state;
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  int port = 0;
};

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !state.accepting.load()) return;
      common::LogWarning("http accept failed", {{"error", ec.message()}});
    } else {
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<Session>(std::move(socket), state)->Start();
    }
    if (state.accepting.load()) Accept();
  });
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
  if (r.ec != std::errc() || r.ptr != p.data() + p.size() || value < 0 || value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\": port must be a number from 0 to 65535"));
  }
  *host = h.empty() ? "0.0.0.0" : h;
  *port = value;
  return absl::OkStatus();
}

HttpServer::HttpServer(Options options, Ingestor& ingestor, IngestMetrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), ingestor, metrics)) {}

HttpServer::~HttpServer() { Shutdown(); }

absl::Status HttpServer::Start() {
  std::string host;
  int port;
  if (absl::Status s = SplitHostPort(impl_->state.options.address, &host, &port); !s.ok()) return s;
  beast::error_code ec;
  const auto ip = net::ip::make_address(host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("http address \"", impl_->state.options.address, "\": ", ec.message()));
  }
  const tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on http address ", impl_->state.options.address, ": ", ec.message()));
  }
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->Accept();
  for (int i = 0; i < impl_->state.options.io_threads; ++i) {
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  }
  return absl::OkStatus();
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::StopAccepting() {
  if (!impl_->state.accepting.exchange(false)) return;
  net::post(impl_->ioc, [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
  });
}

void HttpServer::Shutdown() {
  StopAccepting();
  // Let answers already posted to connections be written (bounded: a client that stops reading
  // must not hold shutdown forever).
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (impl_->state.in_flight.load() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));  // Real time: answers being written to sockets.
  }
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace hookrelay::collector
