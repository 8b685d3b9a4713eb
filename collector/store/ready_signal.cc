#include "collector/store/ready_signal.h"

#include <utility>

namespace hookrelay::collector {

ReadySignal::ReadySignal(const common::Clock& clock, std::function<absl::Time()> next_wake)
    : clock_(clock), next_wake_(std::move(next_wake)) {}

ReadySignal::~ReadySignal() { Stop(); }

void ReadySignal::Stop() {
  {
    absl::MutexLock lock(&callback_mu_);
    ready_ = nullptr;
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (timer_.joinable()) timer_.join();
}

void ReadySignal::Set(std::function<void()> ready) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  {
    absl::MutexLock callback_lock(&callback_mu_);
    ready_ = std::move(ready);
  }
  if (!started_ && !stopping_) {
    started_ = true;
    timer_ = std::thread([this] { TimerLoop(); });
  }
}

void ReadySignal::Raise() {
  absl::MutexLock lock(&callback_mu_);
  if (ready_) ready_();
}

void ReadySignal::Reschedule() {
  absl::MutexLock lock(&mu_);
  kicked_ = true;
}

void ReadySignal::Reschedule(absl::Time next_wake) {
  absl::MutexLock lock(&mu_);
  // Otherwise the timer wakes by then anyway (it raises the signal, maybe for nothing, and
  // reads next_wake again).
  if (!waiting_ || next_wake < waiting_until_) kicked_ = true;
}

absl::Time ReadySignal::WaitingUntil() {
  absl::MutexLock lock(&mu_);
  return waiting_ ? waiting_until_ : absl::InfinitePast();
}

void ReadySignal::RaiseSoon() {
  absl::MutexLock lock(&mu_);
  kicked_ = true;
  raise_soon_ = true;
}

void ReadySignal::TimerLoop() {
  // The last time the signal was raised for: a wake at or before it waits for a Reschedule.
  absl::Time raised_for = absl::InfinitePast();
  for (;;) {
    const absl::Time next = next_wake_();
    const absl::Time deadline = next > raised_for ? next : absl::InfiniteFuture();
    bool raise = false;
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return kicked_ || stopping_; };
      waiting_ = true;
      waiting_until_ = deadline;
      if (deadline == absl::InfiniteFuture()) {
        mu_.Await(absl::Condition(&woken));
      } else {
        clock_.AwaitWithDeadline(mu_, absl::Condition(&woken), deadline);
      }
      waiting_ = false;
      if (stopping_) return;
      if (kicked_) {
        kicked_ = false;
        raised_for = absl::InfinitePast();
        raise = raise_soon_;
        raise_soon_ = false;
        // A wake already due is raised on the next round, once next_wake is read again.
      } else {
        raised_for = deadline;  // The deadline came.
        raise = true;
      }
    }
    if (raise) Raise();
  }
}

}  // namespace hookrelay::collector
