// Validation of the collector's configuration (SPEC §1): one function over the protobuf Config,
// shared by the YAML loader (common/config.h), the admin API and every process that only needs
// the limits and the effective delivery options (the deliverer links no YAML code).
//
// Error messages name the field path (`destinations[0].urls[1].headers["X Bad"]`) and the limit
// that was broken, and list every problem found, joined with "; ". They never contain a write key,
// a shared secret or a header value; URLs are shown with any user info and query redacted.
//
// Thread-compatible, no global state, never throws.
#ifndef HOOKRELAY_COMMON_CONFIG_VALIDATE_H_
#define HOOKRELAY_COMMON_CONFIG_VALIDATE_H_

#include <cstddef>
#include <cstdint>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::common {

// Limits of SPEC §1 and of the delivery options; exposed for the admin API and for tests.
inline constexpr int kMaxUrlsPerDestination = 5;
inline constexpr int kMaxHeadersPerUrl = 5;
inline constexpr int kMaxIdLength = 64;
inline constexpr int kMaxUrlLength = 2048;
// Write keys: 1..kMaxWriteKeyLength characters of A-Z a-z 0-9 . _ ~ + / = -.
inline constexpr size_t kMaxWriteKeyLength = 128;

// Defaults applied by EffectiveOptions to options left at 0 (absent).
inline constexpr uint32_t kDefaultTimeoutMs = 5000;
inline constexpr uint32_t kDefaultRetryWindowSeconds = 4 * 3600;
inline constexpr uint32_t kDefaultInitialBackoffMs = 1000;
inline constexpr uint32_t kDefaultMaxBackoffMs = 600000;

// Accepted ranges (inclusive) of the effective delivery options.
inline constexpr uint32_t kMinTimeoutMs = 100;
inline constexpr uint32_t kMaxTimeoutMs = 60000;
inline constexpr uint32_t kMinRetryWindowSeconds = 1;
inline constexpr uint32_t kMaxRetryWindowSeconds = 7 * 24 * 3600;
inline constexpr uint32_t kMinInitialBackoffMs = 10;
inline constexpr uint32_t kMaxInitialBackoffMs = 3600 * 1000;
inline constexpr uint32_t kMinMaxBackoffMs = 100;
inline constexpr uint32_t kMaxMaxBackoffMs = 24 * 3600 * 1000;
// rate_limit_per_second: 0 (absent) = no limit.
inline constexpr uint32_t kMaxRateLimitPerSecond = 100000;

// Batched webhooks (DeliveryOptions.batch).
inline constexpr uint32_t kDefaultBatchMaxEvents = 100;
inline constexpr uint32_t kMinBatchMaxEvents = 1;
inline constexpr uint32_t kMaxBatchMaxEvents = 1000;
inline constexpr uint32_t kDefaultBatchMaxBytes = 500000;
inline constexpr uint32_t kMinBatchMaxBytes = 1000;
inline constexpr uint32_t kMaxBatchMaxBytes = 500000;
inline constexpr uint32_t kDefaultBatchMaxWaitMs = 1000;
// DeliveryOptions.ordering: the one order a destination may keep.
inline constexpr char kOrderingPerUser[] = "per_user";
inline constexpr uint32_t kMinBatchMaxWaitMs = 10;
inline constexpr uint32_t kMaxBatchMaxWaitMs = 10000;

// A secret rotation's overlap (RotateSecret): how long the previous secret keeps signing.
inline constexpr absl::Duration kDefaultRotationOverlap = absl::Hours(24);
inline constexpr absl::Duration kMaxRotationOverlap = absl::Hours(30 * 24);
// circuit_breaker: absent (failures 0) = no breaker.
inline constexpr uint32_t kMinBreakerFailures = 1;
inline constexpr uint32_t kMaxBreakerFailures = 1000;
inline constexpr uint32_t kDefaultBreakerPauseMs = 5000;
inline constexpr uint32_t kMinBreakerPauseMs = 100;
inline constexpr uint32_t kMaxBreakerPauseMs = 3600 * 1000;
inline constexpr uint32_t kDefaultBreakerMaxPauseMs = 300 * 1000;
inline constexpr uint32_t kMinBreakerMaxPauseMs = 100;
inline constexpr uint32_t kMaxBreakerMaxPauseMs = 24 * 3600 * 1000;

// The only destination type (catalog name "Webhooks"); compared case-insensitively.
inline constexpr char kWebhooksType[] = "webhooks";

// Audiences (SPEC §6.2).
inline constexpr int kMaxAudiences = 100;
inline constexpr int kMaxAudienceConditions = 20;
inline constexpr size_t kMaxAudienceNameLength = 128;
inline constexpr size_t kMaxTraitNameLength = 256;
inline constexpr size_t kMaxTraitValueLength = 1024;
// Event windows are counted in time buckets; 90 days bounds each profile's buckets.
inline constexpr absl::Duration kMaxAudienceWindow = absl::Hours(24 * 90);
inline constexpr uint32_t kDefaultAudienceSyncSeconds = 60;
inline constexpr uint32_t kMinAudienceSyncSeconds = 10;
inline constexpr uint32_t kMaxAudienceSyncSeconds = 24 * 3600;

// Destination filters (SPEC §5.4, hookrelay.v1.DestinationFilter).
inline constexpr int kMaxFilterEvents = 100;
inline constexpr size_t kMaxFilterEventLength = 256;
inline constexpr int kMaxFilterConditions = 20;
inline constexpr size_t kMaxFilterPathLength = 256;
// Segments of a path, its root included ("context.app.version" has 3).
inline constexpr int kMaxFilterPathSegments = 10;
inline constexpr int kMaxFilterInValues = 100;
inline constexpr size_t kMaxFilterValueLength = 1024;

// The comparison of one filter condition. gt/gte/lt/lte compare numbers only; eq/neq/in compare
// like with like (the number 2 is not the string "2"); contains finds a substring in a string or
// an equal element in a list; neq holds when the path is absent.
enum class FilterOp { kEq, kNeq, kIn, kExists, kGt, kGte, kLt, kLte, kContains };
inline constexpr char kFilterOpNames[] = "eq neq in exists gt gte lt lte contains";
// nullopt when `name` is none of kFilterOpNames (case sensitive).
std::optional<FilterOp> ParseFilterOp(absl::string_view name);

// Where a condition path starts: a free-form map, walked by the rest of the path, or one of the
// event's top-level strings, which takes no further segment.
enum class FilterRoot {
  kProperties, kTraits, kContext,
  kEvent, kName, kCategory, kUserId, kAnonymousId, kGroupId, kPreviousId
};
// nullopt when `name` is no root (case sensitive: "properties", "userId", ...).
std::optional<FilterRoot> ParseFilterRoot(absl::string_view name);
inline bool IsFilterMapRoot(FilterRoot root) {
  return root == FilterRoot::kProperties || root == FilterRoot::kTraits ||
         root == FilterRoot::kContext;
}

// The trait an audience is sent as: lower-case, runs of anything but letters and digits become
// one "_", trimmed ("Power Users!" -> "power_users"). Letters and digits of any script are kept;
// capitals of ASCII, Latin-1, Greek and Cyrillic are lower-cased; punctuation, symbols and emoji
// of any script separate words. "" when nothing is left.
std::string AudienceTraitName(absl::string_view name);
// "15m", "1h", "30d" (1 minute to 90 days).
absl::StatusOr<absl::Duration> ParseAudienceWindow(absl::string_view text);

// Refuses every limit violation of SPEC §1 and every out-of-range delivery option (see the
// constants above), naming field paths and limits; InvalidArgument listing all of them, or OK.
absl::Status ValidateConfig(const hookrelay::v1::Config& config);
// `destination.options()` with every field left at 0 replaced by its default
// (kDefault*; standard_webhooks and rate_limit_per_second are copied as is; a circuit_breaker
// with failures set gets its pause defaults, one without failures stays empty).
hookrelay::v1::DeliveryOptions EffectiveOptions(const hookrelay::v1::Destination& destination);
}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_CONFIG_VALIDATE_H_
