// One request to the HTTP tracking API, as Boost.Beast read it: the /v1/* routing, decoding and
// parsing that come before the Ingestor. Pure (no sockets, no server state), so the HTTP server,
// its tests and the fuzzers share one implementation.
#ifndef HOOKRELAY_COLLECTOR_INGEST_HTTP_REQUEST_H_
#define HOOKRELAY_COLLECTOR_INGEST_HTTP_REQUEST_H_

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "collector/model/event.h"
#include "common/trace_context.h"

namespace hookrelay::collector {

// The request is answered without ingest: `status` (an HTTP status code) and a JSON `body`;
// `reason`, when set, is the hookrelay_ingest_rejected_total reason it counts as.
struct EarlyAnswer {
  int status = 0;
  std::string body;
  std::string reason;
};

// The request asks to ingest `events` with `write_key` (Basic auth, else the body's writeKey;
// empty when neither). `single`: a single-event endpoint (not /v1/batch). `trace`: the
// request's `traceparent` / `tracestate` headers when the traceparent is valid (an invalid one is
// ignored, never an error).
struct IngestCall {
  std::string write_key;
  std::vector<RawEvent> events;
  bool single = false;
  common::TraceContext trace;
};

using RouteResult = std::variant<EarlyAnswer, IngestCall>;

// Routes a request for a path under /v1/ (or anywhere else: 404): endpoint, method, CORS preflight,
// Content-Encoding (gzip inflated up to kMaxRequestBytes), JSON parsing, write key. Any
// Content-Type is accepted when the body is JSON. Consumes the request's body. Thread-safe (one
// parser per thread).
RouteResult RouteRequest(boost::beast::http::request<boost::beast::http::string_body>& req);

// {"success":false,"error":message[,"field":field]}.
std::string ErrorBody(std::string_view message, std::string_view field = {});
// The HTTP status for an ingest error: 401, 400, 404, 413, 503, else 500.
int HttpStatusFor(const absl::Status& s);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_INGEST_HTTP_REQUEST_H_
