// Time source for everything that schedules: retries, leases, dedup windows, timestamps.
// Production code takes a `Clock&`; tests pass a ManualClock and move time explicitly.
#ifndef HOOKRELAY_COMMON_CLOCK_H_
#define HOOKRELAY_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace hookrelay::common {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The process-wide real clock. Never destroyed.
  static Clock& Real();
};

// A clock that only moves when told to. Thread-safe.
class ManualClock : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::FromUnixSeconds(1700000000)) : now_(start) {}

  absl::Time Now() const override;
  void Advance(absl::Duration d);
  void Set(absl::Time t);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_CLOCK_H_
