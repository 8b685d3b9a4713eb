// A request body as the HTTP API parses it: the first byte picks the endpoint (batch or one of
// the six types), the rest is the body; then every event is validated and normalised, and the
// normalised JSON must be valid JSON that names the event's type.
#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include "absl/time/time.h"
#include "collector/model/event.h"
#include "collector/ingest/http_event_parser.h"

namespace {

constexpr std::string_view kEndpoints[] = {"batch",  "track", "identify", "page",
                                           "screen", "group", "alias"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view endpoint = kEndpoints[data[0] % std::size(kEndpoints)];
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  body.reserve(body.size() + 64);
  static hookrelay::collector::HttpEventParser* const parser =
      new hookrelay::collector::HttpEventParser();
  absl::StatusOr<hookrelay::collector::ParsedBody> parsed = parser->Parse(endpoint, body);
  if (!parsed.ok()) return 0;
  static simdjson::dom::parser* const check = new simdjson::dom::parser();
  for (hookrelay::collector::RawEvent& raw : parsed->events) {
    auto result = hookrelay::collector::Normalize(std::move(raw), absl::FromUnixSeconds(1700000000));
    if (auto* event = std::get_if<hookrelay::collector::NormalizedEvent>(&result)) {
      simdjson::dom::element element;
      // The collector writes this JSON; it must always parse and carry its type.
      if (check->parse(event->json).get(element) != simdjson::SUCCESS) std::abort();
      std::string_view type;
      if (element["type"].get(type) != simdjson::SUCCESS) std::abort();
      if (type != hookrelay::collector::EventTypeName(event->type)) std::abort();
      if (hookrelay::collector::CheckMessageId(event->message_id).has_value()) std::abort();
    }
  }
  return 0;
}
