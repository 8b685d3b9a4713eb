// Profiles as every engine stores them (SPEC §6.2): an event's ProfileDelta folded into the
// user's Profile of a source, and the bucket widths and retention that bound a profile's size.
// Pure functions; the engines apply them when they fold deltas (RocksDB's merge operator,
// JetStream's roll-ups), ingest and the audience evaluation use the same widths.
//
// Event counts are kept in time buckets whose width follows the window that reads them: minute
// buckets for windows up to 1 h, hour buckets up to 2 d, day buckets beyond (up to the 90 d
// limit). A profile keeps at most window/width + 1 buckets of each width (61, 49, 91), so a
// profile's size is bounded by the events the audiences name, never by the user's activity.
#ifndef HOOKRELAY_COLLECTOR_STORE_PROFILE_DELTA_H_
#define HOOKRELAY_COLLECTOR_STORE_PROFILE_DELTA_H_

#include <cstdint>

#include "absl/time/time.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {

// The bucket width (seconds) for a window.
int64_t BucketSecondsFor(absl::Duration window);
// How long buckets of a width are kept.
int64_t RetentionSeconds(int64_t bucket_seconds);

// Applies one event to a profile: merges traits, counts the event in each width, drops buckets
// past their retention (relative to the event's time).
void ApplyProfileDelta(const hookrelay::v1::ProfileDelta& delta, hookrelay::v1::Profile& profile);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_PROFILE_DELTA_H_
