// ISO 8601 timestamps as the API speaks them: parsed leniently from callers (RFC 3339 with any
// fraction and offset), always written as UTC with milliseconds: 2012-12-02T00:30:08.276Z.
#ifndef HOOKRELAY_COMMON_TIME_FORMAT_H_
#define HOOKRELAY_COMMON_TIME_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"

namespace hookrelay::common {

// Appends `t` truncated to milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (years 0000-9999; times
// outside are clamped to that range).
void AppendIso8601Millis(std::string* out, absl::Time t);
std::string FormatIso8601Millis(absl::Time t);

// Parses `YYYY-MM-DD[T ]HH:MM[:SS[.fraction]](Z|±HH:MM|±HHMM)` (case-insensitive T/Z), or a
// bare date `YYYY-MM-DD` (midnight UTC). Returns nullopt for anything else or an impossible date.
std::optional<absl::Time> ParseIso8601(std::string_view s);

// Milliseconds since the Unix epoch, truncated.
inline int64_t ToUnixMillisTrunc(absl::Time t) { return absl::ToUnixMillis(t); }

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_TIME_FORMAT_H_
