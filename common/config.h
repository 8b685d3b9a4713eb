// Loading and validating the collector's configuration (SPEC §1, §8): the YAML file given by
// --config is mapped field by field onto hookrelay.v1.Config; the admin API builds the same
// messages and shares ValidateConfig, so both refuse exactly the same things.
//
// Error messages name the field path (`destinations[0].urls[1].headers["X Bad"]`) and the limit
// that was broken, and list every problem found, joined with "; ". They never contain a write key,
// a shared secret or a header value; URLs are shown with any user info and query redacted.
//
// All functions are thread-compatible and free of global state; none throws.
#ifndef HOOKRELAY_COMMON_CONFIG_H_
#define HOOKRELAY_COMMON_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "hookrelay/v1/config.pb.h"

namespace hookrelay::common {

// Limits of SPEC §1 and of the delivery options; exposed for the admin API and for tests.
inline constexpr int kMaxUrlsPerDestination = 5;
inline constexpr int kMaxHeadersPerUrl = 5;
inline constexpr int kMaxIdLength = 64;
inline constexpr int kMaxUrlLength = 2048;

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

// Maps the YAML text of SPEC §8 onto a Config. Structure only: unknown or duplicate keys, wrong
// types, unknown `kind` values and unparsable numbers are errors (InvalidArgument, every problem
// listed with its path and line); limits are left to ValidateConfig. Malformed YAML gives an
// InvalidArgument naming the line and column. An empty document is an empty Config.
absl::StatusOr<hookrelay::v1::Config> ParseConfigYaml(std::string_view yaml_text);

// Refuses every limit violation of SPEC §1 and every out-of-range delivery option (see the
// constants above), naming field paths and limits; InvalidArgument listing all of them, or OK.
absl::Status ValidateConfig(const hookrelay::v1::Config& config);

// Reads `path`, parses and validates it. Either the whole Config or an error: a file that cannot
// be read gives an error naming the path (NotFound, PermissionDenied, ...); parse and validation
// errors are InvalidArgument prefixed with the path.
absl::StatusOr<hookrelay::v1::Config> LoadConfigFile(const std::string& path);

// `destination.options()` with every field left at 0 replaced by its default
// (kDefault*; standard_webhooks is copied as is).
hookrelay::v1::DeliveryOptions EffectiveOptions(const hookrelay::v1::Destination& destination);

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_CONFIG_H_
