// Audience profiles and rule evaluation (SPEC §6.2), pure functions over the stored records.
//
// Event counts are kept in time buckets whose width follows the window that reads them: minute
// buckets for windows up to 1 h, hour buckets up to 2 d, day buckets beyond (up to the 90 d
// limit). A profile keeps at most window/width + 1 buckets of each width (61, 49, 91), so a
// profile's size is bounded by the events the audiences name, never by the user's activity. A
// count over a window includes every bucket that overlaps it: the window's edge is as precise as
// its bucket (a minute for 15m, an hour for 1d, a day for 30d).
#ifndef HOOKRELAY_COLLECTOR_AUDIENCES_AUDIENCE_EVAL_H_
#define HOOKRELAY_COLLECTOR_AUDIENCES_AUDIENCE_EVAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "hookrelay/v1/config.pb.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {

// The bucket width (seconds) for a window.
int64_t BucketSecondsFor(absl::Duration window);
// How long buckets of a width are kept.
int64_t RetentionSeconds(int64_t bucket_seconds);

// Applies one event to a profile: merges traits, counts the event in each width, drops buckets
// past their retention (relative to the event's time).
void ApplyProfileDelta(const hookrelay::v1::ProfileDelta& delta, hookrelay::v1::Profile& profile);

struct Evaluation {
  bool member = false;
  // The next time the result may change without any new event (a counted bucket leaving a
  // window); InfiniteFuture when it cannot.
  absl::Time recheck_at = absl::InfiniteFuture();
};

// Evaluates `audience` (valid: common::ValidateConfig) over the user's profiles of the audience's
// sources: traits merged newest profile last, counts summed.
Evaluation EvaluateAudience(const hookrelay::v1::Audience& audience,
                            const std::vector<hookrelay::v1::Profile>& profiles, absl::Time now);

// What ingest records in profiles for the audiences of a configuration: identify traits, and per
// source the events counted with their bucket widths.
class AudienceInputs {
 public:
  explicit AudienceInputs(const hookrelay::v1::Config& config);

  // True when no audience is configured.
  bool empty() const { return sources_.empty(); }
  // The delta for an event of `source`, or false when the event changes no profile: an
  // identify's traits always (an audience created later reads them), a track event when an
  // audience of that source counts its name. `traits_json` is the identify's traits object.
  bool DeltaFor(const std::string& source, hookrelay::v1::EventType type, const std::string& event,
                const std::string& traits_json, absl::Time at,
                hookrelay::v1::ProfileDelta* delta) const;

 private:
  struct SourceInputs {
    // Event name → bucket widths.
    absl::flat_hash_map<std::string, std::vector<int64_t>> events;
  };
  absl::flat_hash_map<std::string, SourceInputs> sources_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_AUDIENCES_AUDIENCE_EVAL_H_
