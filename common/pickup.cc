#include "common/pickup.h"

#include <algorithm>

namespace hookrelay::common {

std::optional<absl::Duration> PickupLatency(const hookrelay::v1::Job& job, absl::Time now) {
  if (job.attempts() != 0 || job.deferrals() != 0 || job.test() ||
      job.received_at_unix_us() <= 0) {
    return std::nullopt;
  }
  return std::max(absl::ZeroDuration(), now - absl::FromUnixMicros(job.received_at_unix_us()));
}

std::vector<double> PickupBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01,
          0.025,  0.05,    0.1,    0.25,    0.5,   1,      2.5,   5,     10,    30,     60};
}

}  // namespace hookrelay::common
