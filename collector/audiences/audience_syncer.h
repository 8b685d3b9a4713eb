// Audience syncs (SPEC §6.2): every audience's sync_interval (default 60 s) and on demand, the
// users whose profile changed or whose window edge passed are evaluated, and each membership
// change becomes an identify call — trait snake_case(name) true on entry, false on exit, with
// context.personas — to every enabled webhook destination of the audience's sources. The first
// computation evaluates every profile of those sources and sends one identify per member.
// Memberships, rechecks and the identify jobs are committed in one atomic write, so a crash
// between evaluating and enqueueing neither duplicates nor skips a change.
//
// Time comes from the injected clock (window edges, intervals, timestamps); a ManualClock moves
// 30-day windows in tests. Syncs run one at a time (the periodic loop and SyncNow share a lock);
// on an engine shared by several collectors the store lets one at a time sync an audience and
// answers ABORTED to the others (logged at debug level by the loop, returned by SyncNow).
#ifndef HOOKRELAY_COLLECTOR_AUDIENCES_AUDIENCE_SYNCER_H_
#define HOOKRELAY_COLLECTOR_AUDIENCES_AUDIENCE_SYNCER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/store/user_data.h"
#include "common/clock.h"
#include "hookrelay/v1/config.pb.h"
#include "hookrelay/v1/job.pb.h"

namespace prometheus {
class Counter;
template <typename T>
class Family;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace hookrelay::collector {

class AudienceSyncer {
 public:
  struct Options {
    // Not owned; nullptr = real time.
    const common::Clock* clock = nullptr;
    // Optional: hookrelay_audience_members{audience},
    // hookrelay_audience_changes_total{audience,direction}, hookrelay_audience_sync_seconds.
    prometheus::Registry* registry = nullptr;
    // Users read and evaluated per store round trip.
    size_t chunk = 1000;
  };

  AudienceSyncer(Options options, UserDataStore& store);
  ~AudienceSyncer();  // Stops the loop.

  // The configuration in effect (valid). Audiences gone from it are dropped from the store
  // (nothing is sent); new ones get their first computation on the loop's next turn.
  void SetConfig(std::shared_ptr<const hookrelay::v1::Config> config);

  // Starts the periodic loop (checks what is due every second of the clock).
  void Start();
  void Shutdown();

  // Syncs `audience_id` now; NOT_FOUND when the configuration has no such audience.
  absl::StatusOr<hookrelay::v1::AudienceState> SyncNow(const std::string& audience_id);

 private:
  absl::StatusOr<hookrelay::v1::AudienceState> Sync(const hookrelay::v1::Audience& audience,
                                                    const hookrelay::v1::Config& config)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  void Loop();
  void SyncDue();

  const Options options_;
  const common::Clock& clock_;
  UserDataStore& store_;

  prometheus::Family<prometheus::Gauge>* members_ = nullptr;
  prometheus::Family<prometheus::Counter>* changes_ = nullptr;
  prometheus::Histogram* duration_ = nullptr;

  absl::Mutex sync_mu_;  // One sync at a time.

  absl::Mutex mu_;
  std::shared_ptr<const hookrelay::v1::Config> config_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// snake_case(name) as the identify's trait, and the identify body for a membership change.
std::string AudienceIdentifyJson(const hookrelay::v1::Audience& audience, const std::string& user,
                                 bool member, const std::string& message_id, absl::Time now);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_AUDIENCES_AUDIENCE_SYNCER_H_
