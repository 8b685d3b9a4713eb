// Raw bytes as one HTTP request: Boost.Beast's request parser with the server's limits, then the
// /v1/* routing, decoding and parsing (collector/ingest/http_request.h), then validation of every event.
#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>

#include <cstddef>
#include <cstdint>
#include <variant>

#include "absl/time/time.h"
#include "collector/model/event.h"
#include "collector/ingest/http_request.h"

namespace http = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  parser.body_limit(hookrelay::collector::kMaxRequestBytes);
  parser.header_limit(16 * 1024);
  boost::beast::error_code ec;
  size_t used = 0;
  while (used < size && !parser.is_done()) {
    const size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == http::error::need_more) break;
    if (ec) return 0;
    if (n == 0) break;
    used += n;
  }
  if (!parser.is_done()) {
    // Beast's precondition: end of stream is reported only after some bytes (the server's read
    // loop sees a clean end_of_stream otherwise).
    if (!parser.got_some()) return 0;
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return 0;
  }
  http::request<http::string_body> request = parser.release();
  hookrelay::collector::RouteResult routed = hookrelay::collector::RouteRequest(request);
  if (auto* call = std::get_if<hookrelay::collector::IngestCall>(&routed)) {
    for (hookrelay::collector::RawEvent& event : call->events) {
      (void)hookrelay::collector::Normalize(std::move(event), absl::FromUnixSeconds(1700000000));
    }
  }
  return 0;
}
