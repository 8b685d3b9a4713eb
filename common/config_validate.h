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

#include "absl/status/status.h"
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

// The only destination type (catalog name "Webhooks"); compared case-insensitively.
inline constexpr char kWebhooksType[] = "webhooks";

// Refuses every limit violation of SPEC §1 and every out-of-range delivery option (see the
// constants above), naming field paths and limits; InvalidArgument listing all of them, or OK.
absl::Status ValidateConfig(const hookrelay::v1::Config& config);
// `destination.options()` with every field left at 0 replaced by its default
// (kDefault*; standard_webhooks is copied as is).
hookrelay::v1::DeliveryOptions EffectiveOptions(const hookrelay::v1::Destination& destination);
}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_CONFIG_VALIDATE_H_
