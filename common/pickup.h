// Pickup latency: from the collector's receipt of an event (Job.received_at_unix_us) to a point
// on its job's way to a deliverer. The collector measures it to the job's hand-off to a stream
// (hookrelay_dispatch_latency_seconds), the deliverer to its receipt of the job
// (hookrelay_delivery_pickup_seconds); both with the same rule and the same buckets.
#ifndef HOOKRELAY_COMMON_PICKUP_H_
#define HOOKRELAY_COMMON_PICKUP_H_

#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::common {

// The time since receipt at `now`, for a job's first attempt never held back (a retry's or a
// deferral's wait is its schedule, not pickup) that is not a test; nullopt otherwise. Never
// negative (the two machines' clocks may disagree).
std::optional<absl::Duration> PickupLatency(const hookrelay::v1::Job& job, absl::Time now);

// Histogram buckets (seconds): a group commit and a dispatch, sub-millisecond to seconds under a
// backlog.
std::vector<double> PickupBuckets();

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_PICKUP_H_
