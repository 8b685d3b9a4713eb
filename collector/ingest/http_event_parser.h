// Parses the JSON bodies of the Segment-compatible HTTP tracking API (/v1/track, /v1/identify,
// /v1/page, /v1/screen, /v1/group, /v1/alias, /v1/batch) into RawEvents. Request-level problems
// (not JSON, wrong shape, over a limit) fail the whole request; per-event problems are attached
// to the event (RawEvent::parse_error) so a batch keeps its good events.
#ifndef HOOKRELAY_COLLECTOR_INGEST_HTTP_EVENT_PARSER_H_
#define HOOKRELAY_COLLECTOR_INGEST_HTTP_EVENT_PARSER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "collector/model/event.h"

namespace hookrelay::collector {

// Maximum nesting of objects and arrays in a request body.
inline constexpr size_t kMaxJsonDepth = 64;

struct ParsedBody {
  // `writeKey` from the body, when present.
  std::string write_key;
  std::vector<RawEvent> events;
};

// Reusable parser state (buffers sized to the largest request seen). Not thread-safe: one per
// thread.
class HttpEventParser {
 public:
  HttpEventParser();
  ~HttpEventParser();

  // Parses a body for `endpoint`: "batch" or one of the six type names (which then sets the
  // event's type). `body` must have at least 64 bytes of spare capacity beyond its size, or it is
  // copied. Errors: INVALID_ARGUMENT (not JSON, invalid UTF-8, too deep, wrong shape),
  // RESOURCE_EXHAUSTED (more than kMaxBatchEvents events, or an event over kMaxEventBytes).
  absl::StatusOr<ParsedBody> Parse(std::string_view endpoint, const std::string& body);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_INGEST_HTTP_EVENT_PARSER_H_
