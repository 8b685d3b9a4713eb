// google.protobuf.Timestamp ↔ absl::Time, in one place. Timestamp's valid range is
// 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z with nanos in [0, 1e9).
#ifndef HOOKRELAY_COMMON_PROTO_TIME_H_
#define HOOKRELAY_COMMON_PROTO_TIME_H_

#include <optional>

#include "absl/time/time.h"
#include "google/protobuf/timestamp.pb.h"

namespace hookrelay::common {

// The time `ts` stands for; nullopt when it is outside Timestamp's valid range (refused rather
// than clamped: it came from a caller).
std::optional<absl::Time> FromProtoTime(const google::protobuf::Timestamp& ts);

// `t` as a Timestamp (floor to whole seconds, nanos in [0, 1e9)); times outside the valid range
// are clamped to its ends (InfinitePast / InfiniteFuture included).
void ToProtoTime(absl::Time t, google::protobuf::Timestamp* out);

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_PROTO_TIME_H_
