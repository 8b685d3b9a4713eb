#include "collector/ingest/http_request.h"

#include <zlib.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collector/ingest/http_event_parser.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "common/trace_context.h"

namespace hookrelay::collector {
namespace {

namespace http = boost::beast::http;

constexpr std::string_view kPrefix = "/v1/";

absl::string_view ToAbsl(boost::beast::string_view s) { return absl::string_view(s.data(), s.size()); }

EarlyAnswer Answer(int status, std::string body, std::string reason = {}) {
  return EarlyAnswer{status, std::move(body), std::move(reason)};
}

// The request's W3C trace context. Two traceparent headers are ambiguous: none is kept. Several
// tracestate headers are one list (RFC 9110 §5.3).
common::TraceContext TraceContextOf(const http::request<http::string_body>& req) {
  const auto parents = req.equal_range(common::kTraceparentHeader);
  if (parents.first == parents.second || std::next(parents.first) != parents.second) return {};
  std::string tracestate;
  for (auto [it, end] = req.equal_range(common::kTracestateHeader); it != end; ++it) {
    if (!tracestate.empty()) tracestate.push_back(',');
    tracestate.append(it->value().data(), it->value().size());
  }
  const auto parent = parents.first->value();
  return common::TraceContextFromHeaders(std::string_view(parent.data(), parent.size()),
                                         tracestate);
}

EarlyAnswer Rejected(const absl::Status& s) {
  return Answer(HttpStatusFor(s), ErrorBody(common::ToStd(s.message())),
                s.code() == absl::StatusCode::kResourceExhausted ? "too_large" : "invalid_json");
}

// The write key from "Authorization: Basic base64(key:)"; empty when absent or malformed.
std::string BasicAuthUser(std::string_view header) {
  if (header.size() < 6 || !absl::EqualsIgnoreCase(common::ToAbsl(header.substr(0, 6)), "basic ")) return {};
  std::string decoded;
  if (!absl::Base64Unescape(absl::StripAsciiWhitespace(common::ToAbsl(header.substr(6))), &decoded)) {
    return {};
  }
  const size_t colon = decoded.find(':');
  if (colon != std::string::npos) decoded.resize(colon);
  return decoded;
}

// Inflates a gzip (or zlib) body into `out`, refusing more than `limit` bytes.
absl::Status Gunzip(std::string_view in, size_t limit, std::string* out) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) return absl::InternalError("zlib init failed");
  out->clear();
  out->resize(std::min(limit + 1, std::max<size_t>(in.size() * 4, 4096)));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  size_t produced = 0;
  int rc = Z_OK;
  while (true) {
    if (produced == out->size()) {
      if (out->size() > limit) break;
      out->resize(std::min(limit + 1, out->size() * 2));
    }
    zs.next_out = reinterpret_cast<Bytef*>(out->data() + produced);
    zs.avail_out = static_cast<uInt>(out->size() - produced);
    rc = inflate(&zs, Z_NO_FLUSH);
    produced = out->size() - zs.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && rc != Z_BUF_ERROR) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // truncated input
  }
  inflateEnd(&zs);
  if (produced > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request body is over ", limit, " bytes once decompressed, at most ", limit,
                     " allowed"));
  }
  if (rc != Z_STREAM_END) return absl::InvalidArgumentError("body: not valid gzip data");
  out->resize(produced);
  return absl::OkStatus();
}

}  // namespace

std::string ErrorBody(std::string_view message, std::string_view field) {
  std::string body;
  common::JsonObjectWriter w(&body);
  w.Bool("success", false);
  w.String("error", message);
  if (!field.empty()) w.String("field", field);
  w.Close();
  return body;
}

int HttpStatusFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 413;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}



RouteResult RouteRequest(http::request<http::string_body>& req) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (!path.starts_with(kPrefix)) {
    return Answer(404, ErrorBody(absl::StrCat("no such endpoint: ", common::ToAbsl(path))));
  }
  const std::string_view endpoint = path.substr(kPrefix.size());
  if (endpoint != "batch" && ParseIngestType(endpoint) == hookrelay::v1::EVENT_TYPE_UNSPECIFIED) {
    return Answer(404, ErrorBody(absl::StrCat(
                           "no such endpoint: ", common::ToAbsl(path),
                           "; expected /v1/track, identify, page, screen, group, alias or batch")));
  }
  if (req.method() == http::verb::options) return Answer(204, "");  // CORS preflight
  if (req.method() != http::verb::post) return Answer(405, ErrorBody("use POST"));

  // Any Content-Type (or none) is accepted when the body parses as JSON, as Segment's own API
  // does: browser SDKs send text/plain to avoid a CORS preflight, and some server SDKs send
  // their HTTP library's default (e.g. application/x-www-form-urlencoded). Only what cannot be
  // decoded at all (an unknown Content-Encoding) is 415; a body that is not JSON is 400.
  std::string body = std::move(req.body());
  const absl::string_view encoding = ToAbsl(req[http::field::content_encoding]);
  if (absl::EqualsIgnoreCase(encoding, "gzip")) {
    std::string inflated;
    if (absl::Status s = Gunzip(body, kMaxRequestBytes, &inflated); !s.ok()) return Rejected(s);
    body = std::move(inflated);
  } else if (!encoding.empty() && !absl::EqualsIgnoreCase(encoding, "identity")) {
    return Answer(415,
                  ErrorBody(absl::StrCat("Content-Encoding must be gzip, identity or absent, got \"",
                                         encoding.substr(0, 100), "\""),
                            "Content-Encoding"),
                  "unsupported_media_type");
  }
  body.reserve(body.size() + 64);  // simdjson's padding, so the parser need not copy

  thread_local HttpEventParser parser;
  absl::StatusOr<ParsedBody> parsed = parser.Parse(endpoint, body);
  if (!parsed.ok()) return Rejected(parsed.status());
  IngestCall call;
  const absl::string_view auth = ToAbsl(req[http::field::authorization]);
  call.write_key = BasicAuthUser(std::string_view(auth.data(), auth.size()));
  if (call.write_key.empty()) call.write_key = std::move(parsed->write_key);
  call.events = std::move(parsed->events);
  call.single = endpoint != "batch";
  call.trace = TraceContextOf(req);
  return call;
}

}  // namespace hookrelay::collector
