#include "collector/store/ready_signal.h"

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace hookrelay::collector {
namespace {

// The engine's side: a next wake the test moves, the calls of next_wake and the raises counted.
class ReadySignalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal_.Set([this] {
      absl::MutexLock lock(&mu_);
      ++raised_;
    });
  }

  void SetNext(absl::Time t) {
    absl::MutexLock lock(&mu_);
    next_ = t;
  }
  // Waits (up to 10 s of real time) until `pred` holds on the counters.
  bool WaitUntil(bool (*pred)(int raised, int looked)) {
    absl::MutexLock lock(&mu_);
    auto holds = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pred(raised_, looked_); };
    return mu_.AwaitWithTimeout(absl::Condition(&holds), absl::Seconds(10));
  }
  // Waits (up to 10 s of real time) until the timer waits for `deadline`.
  bool WaitUntilWaitingFor(absl::Time deadline) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (signal_.WaitingUntil() != deadline) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }
  int raised() {
    absl::MutexLock lock(&mu_);
    return raised_;
  }

  common::ManualClock clock_;
  absl::Mutex mu_;
  absl::Time next_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int raised_ ABSL_GUARDED_BY(mu_) = 0;
  int looked_ ABSL_GUARDED_BY(mu_) = 0;  // calls of next_wake
  ReadySignal signal_{clock_, [this] {
                        absl::MutexLock lock(&mu_);
                        ++looked_;
                        return next_;
                      }};
};

TEST_F(ReadySignalTest, RaisedWhenTheClockReachesTheNextWake) {
  SetNext(clock_.Now() + absl::Minutes(1));
  signal_.Reschedule();
  ASSERT_TRUE(WaitUntil([](int, int looked) { return looked >= 2; }));
  clock_.Advance(absl::Minutes(1));
  EXPECT_TRUE(WaitUntil([](int raised, int) { return raised == 1; }));
}

// A wake moved earlier than the one the timer waits for wakes it: raised at the earlier time,
// not 10 minutes later.
TEST_F(ReadySignalTest, EarlierNextWakeWakesTheTimer) {
  SetNext(clock_.Now() + absl::Minutes(10));
  signal_.Reschedule();
  ASSERT_TRUE(WaitUntilWaitingFor(clock_.Now() + absl::Minutes(10)));
  const absl::Time earlier = clock_.Now() + absl::Minutes(1);
  SetNext(earlier);
  signal_.Reschedule(earlier);
  clock_.Advance(absl::Minutes(1));
  EXPECT_TRUE(WaitUntil([](int raised, int) { return raised == 1; }));
}

// A wake moved later does not wake the timer: it raises at the deadline it waited for (the
// engine's dispatcher finds nothing then), reads next_wake there, and raises at the new time.
TEST_F(ReadySignalTest, LaterNextWakeIsRaisedAfterTheOldDeadline) {
  SetNext(clock_.Now() + absl::Minutes(1));
  signal_.Reschedule();
  ASSERT_TRUE(WaitUntilWaitingFor(clock_.Now() + absl::Minutes(1)));
  const absl::Time later = clock_.Now() + absl::Minutes(10);
  SetNext(later);
  signal_.Reschedule(later);
  EXPECT_EQ(signal_.WaitingUntil(), later - absl::Minutes(9));  // not woken: the old deadline
  clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(WaitUntil([](int raised, int looked) { return raised == 1 && looked >= 3; }));
  clock_.Advance(absl::Minutes(9));
  EXPECT_TRUE(WaitUntil([](int raised, int) { return raised == 2; }));
}

// Once raised for a time, the timer waits for a reschedule before raising for it again; any
// finite next wake given then wakes it.
TEST_F(ReadySignalTest, AfterARaiseAHintedRescheduleWakesTheTimer) {
  SetNext(clock_.Now() + absl::Minutes(1));
  signal_.Reschedule();
  ASSERT_TRUE(WaitUntil([](int, int looked) { return looked >= 2; }));
  clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(WaitUntil([](int raised, int) { return raised == 1; }));
  // Nobody took what was due: still due now. A reschedule saying so raises again.
  signal_.Reschedule(clock_.Now());
  EXPECT_TRUE(WaitUntil([](int raised, int) { return raised == 2; }));
}

}  // namespace
}  // namespace hookrelay::collector
