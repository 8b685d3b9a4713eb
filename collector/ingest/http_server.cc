#include "collector/ingest/http_server.h"

#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <variant>

#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/ingest/http_request.h"
#include "common/http_listener.h"
#include "common/json_writer.h"
#include "common/strings.h"

namespace hookrelay::collector {
namespace {

namespace http = boost::beast::http;

using common::HttpRequest;
using common::HttpResponder;
using common::HttpResponse;

HttpResponse MakeResponse(http::status status, std::string body, bool keep_alive,
                          unsigned version, bool retry_after = false) {
  HttpResponse res(status, version);
  res.set(http::field::server, "hookrelay");
  res.set(http::field::access_control_allow_origin, "*");
  if (status == http::status::no_content) {
    res.set(http::field::access_control_allow_methods, "POST, OPTIONS");
    // traceparent / tracestate: browsers with tracing add them, and a preflight that does not
    // allow them would block the request.
    res.set(http::field::access_control_allow_headers,
            "Content-Type, Authorization, Content-Encoding, traceparent, tracestate");
  } else {
    res.set(http::field::content_type, "application/json");
  }
  if (status == http::status::unauthorized) {
    res.set(http::field::www_authenticate, "Basic realm=\"hookrelay\"");
  }
  // Overload clears in a second; a store that cannot write retries its disk every few.
  if (retry_after) {
    res.set(http::field::retry_after, status == http::status::service_unavailable ? "5" : "1");
  }
  if (status == http::status::method_not_allowed) res.set(http::field::allow, "POST, OPTIONS");
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  return res;
}

// The answer to an ingest call.
HttpResponse IngestAnswer(absl::StatusOr<IngestOutcome> r, bool keep_alive, unsigned version,
                          bool single) {
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kResourceExhausted) {
      return MakeResponse(http::status::too_many_requests,
                          ErrorBody(common::ToStd(r.status().message())), keep_alive, version,
                          /*retry_after=*/true);
    }
    // UNAVAILABLE (the store cannot write, or shutting down) is temporary too.
    return MakeResponse(static_cast<http::status>(HttpStatusFor(r.status())),
                        ErrorBody(common::ToStd(r.status().message())), keep_alive, version,
                        /*retry_after=*/r.status().code() == absl::StatusCode::kUnavailable);
  }
  if (single && !r->rejected.empty()) {
    const Rejection& rej = r->rejected.front();
    return MakeResponse(http::status::bad_request, ErrorBody(rej.reason, rej.field), keep_alive,
                        version);
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
  return MakeResponse(http::status::ok, std::move(body), keep_alive, version);
}

}  // namespace

struct HttpServer::Impl {
  Impl(Options o, Ingestor& i, IngestMetrics* m) : options(std::move(o)), ingestor(i), metrics(m) {}

  void Handle(HttpRequest req, HttpResponder responder);
  // Answers a request read whole, counting its duration.
  void Send(HttpResponder responder, absl::Time started, HttpResponse response) {
    if (metrics) metrics->ObserveRequest("http", absl::ToDoubleSeconds(absl::Now() - started));
    std::move(responder).Respond(std::move(response));
  }
  std::optional<HttpResponse> ReadError(boost::beast::error_code ec);

  const Options options;
  Ingestor& ingestor;
  IngestMetrics* const metrics;
  // Last: its connections call the members above until it is shut down.
  std::unique_ptr<common::HttpListener> listener;
};

std::optional<HttpResponse> HttpServer::Impl::ReadError(boost::beast::error_code ec) {
  if (ec == http::error::body_limit) {
    if (metrics) metrics->CountRejected("too_large");
    return MakeResponse(http::status::payload_too_large,
                        ErrorBody(absl::StrCat("request body is over ", kMaxRequestBytes,
                                               " bytes, at most ", kMaxRequestBytes, " allowed")),
                        /*keep_alive=*/false, 11);
  }
  if (metrics) metrics->CountRejected("bad_http");
  return MakeResponse(http::status::bad_request,
                      ErrorBody(absl::StrCat("malformed HTTP request: ", ec.message())), false, 11);
}

void HttpServer::Impl::Handle(HttpRequest req, HttpResponder responder) {
  const absl::Time started = absl::Now();
  const bool keep_alive = req.keep_alive();
  const unsigned version = req.version();
  const std::string_view target(req.target().data(), req.target().size());
  std::string_view path = target.substr(0, target.find('?'));

  // RFC 9112 §3.2: an HTTP/1.1 request without Host is answered 400.
  if (version >= 11 && req.find(http::field::host) == req.end()) {
    Send(std::move(responder), started,
         MakeResponse(http::status::bad_request,
                      ErrorBody("HTTP/1.1 request without a Host header", "Host"), false, version));
    return;
  }
  if (path == "/healthz" || path == "/readyz") {
    if (!listener->accepting()) {
      Send(std::move(responder), started,
           MakeResponse(http::status::service_unavailable, R"({"status":"shutting down"})",
                        keep_alive, version));
      return;
    }
    if (options.health) {
      if (absl::Status health = options.health(); !health.ok()) {
        std::string body;
        common::JsonObjectWriter w(&body);
        w.String("status", "not serving");
        w.String("reason", common::ToStd(health.message()));
        w.Close();
        Send(std::move(responder), started,
             MakeResponse(http::status::service_unavailable, std::move(body), keep_alive, version,
                          /*retry_after=*/true));
        return;
      }
    }
    Send(std::move(responder), started,
         MakeResponse(http::status::ok, R"({"status":"serving"})", keep_alive, version));
    return;
  }
  RouteResult routed = RouteRequest(req);
  if (auto* answer = std::get_if<EarlyAnswer>(&routed)) {
    if (metrics && !answer->reason.empty()) metrics->CountRejected(answer->reason);
    Send(std::move(responder), started,
         MakeResponse(static_cast<http::status>(answer->status), std::move(answer->body),
                      keep_alive, version));
    return;
  }
  IngestCall& call = std::get<IngestCall>(routed);
  const bool single = call.single;
  // The answer is written on the connection's strand, whatever thread completes the call.
  ingestor.Ingest(call.write_key, std::move(call.events), call.trace,
                  [this, responder = std::move(responder), started, keep_alive, version,
                   single](absl::StatusOr<IngestOutcome> r) mutable {
                    Send(std::move(responder), started,
                         IngestAnswer(std::move(r), keep_alive, version, single));
                  });
}

HttpServer::HttpServer(Options options, Ingestor& ingestor, IngestMetrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), ingestor, metrics)) {
  common::HttpListener::Options listener;
  listener.address = impl_->options.address;
  listener.address_name = "http address";
  listener.threads = impl_->options.io_threads;
  listener.idle_timeout = impl_->options.idle_timeout;
  listener.body_limit = kMaxRequestBytes;
  listener.header_limit = 16 * 1024;
  listener.tcp_nodelay = true;
  listener.drain_timeout = absl::Seconds(5);
  common::HttpListener::Handlers handlers;
  Impl* impl = impl_.get();
  handlers.request = [impl](HttpRequest request, const auto&, HttpResponder responder) {
    impl->Handle(std::move(request), std::move(responder));
  };
  handlers.read_error = [impl](boost::beast::error_code ec) { return impl->ReadError(ec); };
  if (impl->metrics) {
    handlers.connections = [impl](int delta) {
      if (delta > 0) {
        impl->metrics->HttpConnectionOpened();
      } else {
        impl->metrics->HttpConnectionClosed();
      }
    };
  }
  impl_->listener = std::make_unique<common::HttpListener>(std::move(listener), std::move(handlers));
}

HttpServer::~HttpServer() { Shutdown(); }

absl::Status HttpServer::Start() { return impl_->listener->Start(); }

int HttpServer::port() const { return impl_->listener->port(); }

void HttpServer::StopAccepting() { impl_->listener->StopAccepting(); }

void HttpServer::Shutdown() { impl_->listener->Shutdown(); }

}  // namespace hookrelay::collector
