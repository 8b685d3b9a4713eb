#include "common/proto_time.h"

#include <cstdint>

namespace hookrelay::common {
namespace {

constexpr int64_t kMinSeconds = -62135596800;  // 0001-01-01T00:00:00Z
constexpr int64_t kMaxSeconds = 253402300799;  // 9999-12-31T23:59:59Z
constexpr int32_t kMaxNanos = 999999999;

}  // namespace

std::optional<absl::Time> FromProtoTime(const google::protobuf::Timestamp& ts) {
  if (ts.seconds() < kMinSeconds || ts.seconds() > kMaxSeconds || ts.nanos() < 0 ||
      ts.nanos() > kMaxNanos) {
    return std::nullopt;
  }
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

void ToProtoTime(absl::Time t, google::protobuf::Timestamp* out) {
  if (t < absl::FromUnixSeconds(kMinSeconds)) {
    out->set_seconds(kMinSeconds);
    out->set_nanos(0);
    return;
  }
  if (t >= absl::FromUnixSeconds(kMaxSeconds + 1)) {
    out->set_seconds(kMaxSeconds);
    out->set_nanos(kMaxNanos);
    return;
  }
  const int64_t seconds = absl::ToUnixSeconds(t);  // Rounds down.
  out->set_seconds(seconds);
  out->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(t - absl::FromUnixSeconds(seconds))));
}

}  // namespace hookrelay::common
