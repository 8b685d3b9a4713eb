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

  // Waits until `cond` holds or this clock reaches `deadline`, and returns whether `cond` holds:
  // absl::Mutex::AwaitWithDeadline in this clock's time, so that timers wait on the clock (a
  // ManualClock's Advance wakes them) instead of on real time. REQUIRES: `mu` held.
  virtual bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond,
                                 absl::Time deadline) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // The process-wide real clock. Never destroyed.
  static Clock& Real();
};

// A clock that only moves when told to. Thread-safe.
class ManualClock : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::FromUnixSeconds(1700000000)) : now_(start) {}

  absl::Time Now() const override;
  // Returns as soon as `cond` holds or Advance/Set has moved the clock to `deadline`, whatever
  // real time passes meanwhile. (It looks at the clock every millisecond of real time: absl's
  // Mutex re-evaluates conditions only when the mutex is released, not when the clock moves.)
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond,
                         absl::Time deadline) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Advance(absl::Duration d);
  void Set(absl::Time t);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_CLOCK_H_
