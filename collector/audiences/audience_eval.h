// Audience rule evaluation (SPEC §6.2), pure functions over the stored profiles (their buckets:
// collector/store/profile_delta.h). A count over a window includes every bucket that overlaps it:
// the window's edge is as precise as its bucket (a minute for 15m, an hour for 1d, a day for
// 30d).
#ifndef HOOKRELAY_COLLECTOR_AUDIENCES_AUDIENCE_EVAL_H_
#define HOOKRELAY_COLLECTOR_AUDIENCES_AUDIENCE_EVAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "hookrelay/v1/config.pb.h"
#include "collector/store/profile_delta.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {

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
