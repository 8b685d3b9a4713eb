// The webhook request body (SPEC §5.1): rendered from a job's `event_json`, the collector's
// normalised event (compact JSON with Segment field names; see collector/model/event.h).
//
// Body per type, compact JSON, fields in this order ("?" = only when present and non-empty):
//   all but delete: version (1), type, userId?, anonymousId?, messageId, <per type>, timestamp,
//                   context ({} when the event has none)
//     track:    event, properties?
//     page:     name?, category?, properties?
//     screen:   name?, properties?
//     identify: traits?
//     group:    groupId, traits?
//     alias:    previousId, "Previous ID" (= previousId), "User ID" (= userId)
//   delete:     type, userId, timestamp (no version)
// Every other key of event_json (integrations, originalTimestamp, sentAt, receivedAt, unknown
// keys) is left out. Free-form maps (properties, traits, context) are copied as parsed: key order,
// numbers and unicode are kept, and the collector's compact output comes out byte-for-byte (see
// deliverer/json_element.h). `timestamp` is written as ISO 8601 UTC with milliseconds.
//
// As in the collector, a string field that is null or "" counts as absent, and so does a null
// map. Errors are InvalidArgument naming the problem: input that is not a JSON object, an unknown
// type, a field of the wrong JSON type, an unreadable timestamp, or a field the type requires
// (messageId, timestamp, userId or anonymousId; event for track, groupId for group, userId and
// previousId for alias, userId for delete).
#ifndef HOOKRELAY_DELIVERER_RENDERER_H_
#define HOOKRELAY_DELIVERER_RENDERER_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace simdjson::dom {
class parser;
}  // namespace simdjson::dom

namespace hookrelay::deliverer {

// Renders bodies with one reusable parser, so the hot path allocates nothing once its buffers
// have grown to the largest event seen. Not thread-safe: one per worker thread.
class WebhookRenderer {
 public:
  WebhookRenderer();
  ~WebhookRenderer();
  WebhookRenderer(const WebhookRenderer&) = delete;
  WebhookRenderer& operator=(const WebhookRenderer&) = delete;

  // Replaces `*body` with the body rendered from `event_json`. On error `*body` is left empty.
  absl::Status Render(std::string_view event_json, std::string* body);

 private:
  std::unique_ptr<simdjson::dom::parser> parser_;
};

// One-shot form of WebhookRenderer::Render (builds a parser per call). Thread-safe.
absl::StatusOr<std::string> RenderWebhookBody(std::string_view event_json);

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_RENDERER_H_
