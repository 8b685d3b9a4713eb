// The ready signal an engine raises (JobQueue::SetReadyCallback): at once when it stores jobs,
// and, from a timer thread on the store's clock, when the next scheduled job falls due or the
// next lease runs out (the engine's next_wake). With a ManualClock, moving the clock is what
// raises it: a retry falling due is dispatched without real time passing and without any poll.
//
//   ReadySignal ready(clock, [this] { return NextWake(); });
//   ready.Set([&] { dispatcher.Notify(); });
//   ready.Raise();       // jobs were stored
//   ready.Reschedule();  // next_wake may have moved (a retry scheduled, jobs leased)
//   ready.Reschedule(t); // next_wake is now t: wakes the timer only when t is before its deadline
//
// After the timer raises the signal for a time T, it waits for a Reschedule before raising it
// again for a time at or before T (the caller leases, which reschedules): a due job nobody
// leases is announced once, not in a loop.
#ifndef HOOKRELAY_COLLECTOR_STORE_READY_SIGNAL_H_
#define HOOKRELAY_COLLECTOR_STORE_READY_SIGNAL_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace hookrelay::collector {

class ReadySignal {
 public:
  // `next_wake`: when jobs may next become leasable without a store write (InfiniteFuture:
  // never); called on the timer thread without any lock of this class held. The clock must
  // outlive the signal.
  ReadySignal(const common::Clock& clock, std::function<absl::Time()> next_wake);
  // Stops and joins the timer thread (Stop).
  ~ReadySignal();

  ReadySignal(const ReadySignal&) = delete;
  ReadySignal& operator=(const ReadySignal&) = delete;

  // Replaces the callback (empty: none); waits for a call in progress. Starts the timer thread
  // on the first call.
  void Set(std::function<void()> ready);
  // Calls the callback now (jobs were stored). Any thread; must not hold a lock the callback
  // takes.
  void Raise();
  // The next wake time may have changed: the timer looks again.
  void Reschedule();
  // The next wake time changed and is now `next_wake` (what next_wake() returns after the
  // caller's change). The timer thread is woken only when that is before the time it waits for;
  // otherwise it raises the signal at its own deadline as before (perhaps for nothing) and reads
  // next_wake again there. A dispatcher leasing thousands of times a second moves lease
  // deadlines later each time: waking the timer for each was two futex calls and a context
  // switch per lease, for nothing.
  void Reschedule(absl::Time next_wake);
  // The deadline the timer thread waits for now (InfiniteFuture: none), or InfinitePast while it
  // is not waiting. For tests.
  absl::Time WaitingUntil();
  // Raise, from the timer thread: for callers holding a lock the callback must not wait behind
  // (a job made ready inside the store's own critical section).
  void RaiseSoon();
  // Clears the callback (later Raise calls do nothing; waits for a call in progress) and joins
  // the timer thread, so next_wake is not called any more. An engine calls it first in its
  // destructor, while its state is whole. Idempotent.
  void Stop();

 private:
  void TimerLoop();

  const common::Clock& clock_;
  const std::function<absl::Time()> next_wake_;

  absl::Mutex callback_mu_;
  std::function<void()> ready_ ABSL_GUARDED_BY(callback_mu_);

  absl::Mutex mu_;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  // Whether the timer waits, and for what deadline (InfiniteFuture: only a wake ends the wait).
  // While it is not waiting, every Reschedule sets kicked_: it may have read next_wake before
  // the change.
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time waiting_until_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool raise_soon_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_READY_SIGNAL_H_
