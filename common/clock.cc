#include "common/clock.h"

namespace hookrelay::common {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

bool Clock::AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond,
                              absl::Time deadline) const {
  // The real clock is absl's own time base.
  return mu.AwaitWithDeadline(cond, deadline);
}

Clock& Clock::Real() {
  static RealClock* const clock = new RealClock();
  return *clock;
}

absl::Time ManualClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

bool ManualClock::AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond,
                                    absl::Time deadline) const {
  while (!cond.Eval()) {
    if (Now() >= deadline) return false;
    mu.AwaitWithTimeout(cond, absl::Milliseconds(1));
  }
  return true;
}

void ManualClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

void ManualClock::Set(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = t;
}

}  // namespace hookrelay::common
