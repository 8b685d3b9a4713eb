// The event model of the ingest path: what the HTTP and gRPC front ends parse into (RawEvent),
// the validation and normalisation rules of SPEC §2 (Normalize), and the routing switches of the
// integrations map (SPEC §3). One core for both front ends.
#ifndef HOOKRELAY_COLLECTOR_MODEL_EVENT_H_
#define HOOKRELAY_COLLECTOR_MODEL_EVENT_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "absl/time/time.h"
#include "hookrelay/v1/event.pb.h"

namespace hookrelay::collector {

// Limits of SPEC §2.1.
inline constexpr size_t kMaxEventBytes = 32000;
inline constexpr size_t kMaxRequestBytes = 500000;
inline constexpr size_t kMaxBatchEvents = 2500;
inline constexpr size_t kMaxMessageIdChars = 100;
// Identifiers that reach storage keys, indexes and log lines (userId, anonymousId, groupId,
// previousId): at most this many characters, no control characters (U+0000–U+001F, U+007F,
// U+0080–U+009F). messageId, which also becomes the Idempotency-Key header of every webhook
// request, is stricter: printable ASCII (0x20–0x7E) without leading or trailing spaces.
inline constexpr size_t kMaxIdentifierChars = 256;

// Why one event was refused: the field (API name, e.g. "userId") and a human reason.
struct FieldError {
  std::string field;
  std::string reason;
};

// Checks an identifier against the rules above; nullopt when it is fine, else the reason (naming
// `field` and the limit). Exposed for the front ends' tests and the fuzzers.
std::optional<FieldError> CheckIdentifier(std::string_view field, std::string_view value);
std::optional<FieldError> CheckMessageId(std::string_view value);

// Destination switches read from an event's integrations map. Unset = not mentioned.
struct IntegrationsFlags {
  std::optional<bool> all;       // key "All"
  std::optional<bool> webhooks;  // key "Webhooks" (the catalog name; keys are case sensitive)
};

// SPEC §3: absent map → on; "All": false → off unless "Webhooks" is true; "Webhooks" decides
// when present.
inline bool WebhooksEnabled(const IntegrationsFlags& flags) {
  if (flags.webhooks.has_value()) return *flags.webhooks;
  return flags.all.value_or(true);
}

// An event as a front end received it, before validation. Strings are as given; free-form maps
// are compact JSON object text (empty when absent).
struct RawEvent {
  hookrelay::v1::EventType type = hookrelay::v1::EVENT_TYPE_UNSPECIFIED;
  // The type as given when it is not one of the six ingest types (for the error message).
  std::string unknown_type;
  std::string message_id;
  std::string user_id;
  std::string anonymous_id;
  std::string event;
  std::string name;
  std::string category;
  std::string group_id;
  std::string previous_id;
  std::optional<absl::Time> timestamp;
  std::optional<absl::Time> sent_at;
  std::string properties;
  std::string traits;
  std::string context;
  std::string integrations;
  IntegrationsFlags flags;
  // Size of the event's compact JSON as received; checked against kMaxEventBytes.
  size_t json_bytes = 0;
  // A problem found while parsing (a field of the wrong JSON type, an unreadable timestamp);
  // reported by Normalize before any other rule.
  std::optional<FieldError> parse_error;
};

// An accepted event, ready to be routed and stored.
struct NormalizedEvent {
  hookrelay::v1::EventType type = hookrelay::v1::EVENT_TYPE_UNSPECIFIED;
  std::string message_id;
  std::string user_id;
  // Kept for per-user order (a user without userId is ordered by it).
  std::string anonymous_id;
  IntegrationsFlags flags;
  absl::Time received_at;
  // The normalised event as compact JSON with Segment's field names: type, messageId, userId,
  // anonymousId, event, name, category, groupId, previousId, properties, traits, context (always
  // present), integrations, timestamp, originalTimestamp, sentAt, receivedAt.
  std::string json;
};

// The API name of an event type ("track", ...); "" for EVENT_TYPE_UNSPECIFIED.
std::string_view EventTypeName(hookrelay::v1::EventType type);
// The ingest type named `name` (case sensitive, one of the six ingest types), or
// EVENT_TYPE_UNSPECIFIED.
hookrelay::v1::EventType ParseIngestType(std::string_view name);

// Applies SPEC §2.1 validation and normalisation: generates a messageId when absent, stamps
// receivedAt, keeps the caller's timestamp as originalTimestamp, corrects clock skew with sentAt
// (timestamp = receivedAt − (sentAt − originalTimestamp)). Returns the first violated rule.
std::variant<NormalizedEvent, FieldError> Normalize(RawEvent raw, absl::Time received_at);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_MODEL_EVENT_H_
