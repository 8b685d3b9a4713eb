// One Subscribe call of the deliverer to a collector (Deliverer::Call): reads deliveries, writes
// outcomes. Shared by the deliverer's files (deliverer.cc opens and reads it; outcomes.cc posts
// outcomes to it). Internal to the deliverer.
#ifndef HOOKRELAY_DELIVERER_DELIVERER_CALL_H_
#define HOOKRELAY_DELIVERER_DELIVERER_CALL_H_

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "deliverer/deliverer.h"
#include "deliverer/deliverer_state.h"
#include "deliverer/round_end.h"
#include "hookrelay/v1/collector.grpc.pb.h"

namespace hookrelay::deliverer {

// Outcomes wait up to Options::outcome_linger (5 ms) for company before they are written,
// unless outcomes for kOutcomesPerWrite jobs (an eighth of the stream's credits when that is
// fewer: lingering outcomes hold credits) are pending, one is urgent (an ordered job's), or
// the stream drains or closes. At moderate rates each response came alone and its outcome took
// a gRPC write of its own, and on the collector a read, a store settlement and a flow-control
// update: ~2,500 writes a second at 10,000 deliveries/s. A linger allows one write per linger
// and stream at such rates: ~1,000 a second at 1 ms, ~200 at 5 ms (docs/BENCHMARKS.md,
// "Outcomes linger 5 ms"). An outcome's wait delays no delivery, only the job's settlement and
// its credit.
inline constexpr int kOutcomesPerWrite = 64;

// One Subscribe call. Owned by shared_ptr (its Link and the jobs it delivered), so late outcomes
// find it even after the stream ended; they are then dropped. A hold keeps the call open until
// both directions are finished, so no write can start after OnDone.
class Deliverer::Call final
    : public grpc::ClientBidiReactor<hookrelay::v1::SubscribeRequest,
                                     hookrelay::v1::SubscribeResponse>,
      public std::enable_shared_from_this<Call> {
 public:
  // `destroyed` is notified when the call object is gone (all its members destroyed).
  Call(Deliverer& deliverer, std::string collector,
       std::shared_ptr<absl::Notification> destroyed)
      : on_destroy_{std::move(destroyed)}, deliverer_(deliverer),
        collector_(std::move(collector)) {}

  void Start(hookrelay::v1::Collector::Stub& stub, const std::string& deliverer_id,
             uint32_t credits, const std::string& admin_token, int collectors) {
    self_ = shared_from_this();
    if (!admin_token.empty()) context_.AddMetadata("authorization", "Bearer " + admin_token);
    stub.async()->Subscribe(&context_, this);
    AddHold();
    {
      absl::MutexLock lock(&mu_);
      writing_ = true;
      outcomes_per_write_ = std::clamp<int64_t>(credits / 8, 1, kOutcomesPerWrite);
      // From here Pump may start operations: a drain or close requested before (Shutdown
      // racing the stream's start) is sent after the Hello.
      started_ = true;
    }
    write_.mutable_hello()->set_deliverer_id(deliverer_id);
    write_.mutable_hello()->set_credits(credits);
    write_.mutable_hello()->set_collectors(static_cast<uint32_t>(std::max(1, collectors)));
    write_.mutable_hello()->set_destinations_by_reference(true);
    StartWrite(&write_);
    reading_ = std::make_shared<Read>();
    StartRead(reading_->response);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Break();
      return;
    }
    received_any_.store(true, std::memory_order_relaxed);
    std::shared_ptr<Read> read = std::move(reading_);
    const hookrelay::v1::SubscribeResponse& response = *read->response;
    if (response.grouped_outcomes()) grouped_outcomes_.store(true, std::memory_order_relaxed);
    if (response.has_destinations() && deliverer_.metrics_ != nullptr) {
      deliverer_.metrics_->DeclareDestinations(
          {response.destinations().ids().begin(), response.destinations().ids().end()});
    }
    const int n = response.deliveries_size();
    {
      absl::MutexLock lock(&mu_);
      held_ += n;
    }
    if (response.destination_configs_size() > 0) {
      // The collector's whole set, sent when its configuration changed: replaces ours.
      destinations_.clear();
      for (const hookrelay::v1::Destination& d : response.destination_configs()) {
        // A copy off the read's arena: a destination outlives the read.
        auto shared = std::make_shared<const StreamDestination>(d);
        destinations_[shared->destination.id()] = std::move(shared);
      }
    }
    for (const hookrelay::v1::Delivery& d : response.deliveries()) {
      std::shared_ptr<const StreamDestination> destination;
      if (!d.has_destination()) {
        auto it = destinations_.find(d.job().destination_id());
        if (it != destinations_.end()) destination = it->second;
      }
      deliverer_.Handle(std::shared_ptr<const hookrelay::v1::Delivery>(read, &d),
                        std::move(destination), shared_from_this());
    }
    reading_ = std::make_shared<Read>();
    StartRead(reading_->response);
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) broken_ = true;
    }
    Pump();
  }

  void OnWritesDoneDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
    }
    Pump();
  }

  void OnDone(const grpc::Status& status) override {
    {
      absl::MutexLock lock(&mu_);
      status_ = status;
      broken_ = true;
    }
    std::shared_ptr<Call> self = std::move(self_);
    done_.Notify();
    // `self` may be the last reference: nothing touches members after this point.
  }

  // A job's outcome, from any thread. Dropped when the stream is gone. `urgent`: written without
  // the linger.
  void AddOutcome(hookrelay::v1::Outcome outcome, bool urgent) {
    {
      absl::MutexLock lock(&mu_);
      --held_;
      if (broken_) return;
      urgent_ = urgent_ || urgent;
      ++pending_jobs_;
      *pending_.add_outcomes() = std::move(outcome);
      if (!DeferPumpLocked()) return;
    }
    Pump();
  }
  // The outcomes in [first, last), all of this stream's jobs (an outcome may settle several:
  // Outcome.also_job_ids).
  template <typename It>
  void AddOutcomes(It first, It last, bool urgent) {
    int64_t jobs = 0;
    for (It it = first; it != last; ++it) jobs += 1 + it->second.also_job_ids_size();
    {
      absl::MutexLock lock(&mu_);
      held_ -= jobs;
      if (broken_) return;
      urgent_ = urgent_ || urgent;
      pending_jobs_ += jobs;
      for (It it = first; it != last; ++it) *pending_.add_outcomes() = std::move(it->second);
      if (!DeferPumpLocked()) return;
    }
    Pump();
  }

  // Shutdown, step 1: ask the collector to stop sending.
  void RequestDrain() {
    {
      absl::MutexLock lock(&mu_);
      drain_requested_ = true;
    }
    Pump();
  }
  // Step 2: half-close once every held job is reported (or at once with `now`).
  void RequestClose(bool now) {
    {
      absl::MutexLock lock(&mu_);
      close_requested_ = true;
      close_now_ = now;
    }
    Pump();
  }
  int64_t held() const {
    absl::MutexLock lock(&mu_);
    return held_;
  }
  bool WaitDone(absl::Duration timeout) { return done_.WaitForNotificationWithTimeout(timeout); }
  void Cancel() { context_.TryCancel(); }
  bool received_any() const { return received_any_.load(std::memory_order_relaxed); }
  grpc::Status status() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  const std::string& collector() const { return collector_; }
  // The collector settles grouped outcomes (SubscribeResponse.grouped_outcomes).
  bool grouped_outcomes() const { return grouped_outcomes_.load(std::memory_order_relaxed); }

 private:
  // The read side ended.
  void Break() {
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
    }
    Pump();
  }

  // Whether the caller pumps now: not inside a sender worker's round, where one pump per stream
  // goes at the round's end for every outcome added during it.
  bool DeferPumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!InRound()) return true;
    if (!pump_deferred_) {
      pump_deferred_ = true;
      DeferToRoundEnd([self = shared_from_this()] {
        {
          absl::MutexLock lock(&self->mu_);
          self->pump_deferred_ = false;
        }
        self->Pump();
      });
    }
    return false;
  }

  // Starts the next write if none is in flight; removes the hold once nothing more will be
  // written.
  void Pump() {
    enum class Op { kNone, kWrite, kWritesDone, kRemoveHold, kLinger } op = Op::kNone;
    {
      absl::MutexLock lock(&mu_);
      if (!started_ || writing_ || hold_removed_) return;
      if (broken_) {
        hold_removed_ = true;
        op = Op::kRemoveHold;
      } else if (writes_done_sent_) {
        // Half-closed: the collector ends the stream, which fails the read (broken_).
      } else if (pending_.outcomes_size() > 0 && pending_jobs_ < outcomes_per_write_ &&
                 !linger_over_ && !urgent_ && !drain_requested_ && !close_requested_) {
        if (!linger_armed_) {
          linger_armed_ = true;
          op = Op::kLinger;
        }
      } else if (pending_.outcomes_size() > 0) {
        linger_over_ = false;
        urgent_ = false;
        write_.Clear();
        write_.mutable_outcomes()->Swap(&pending_);
        pending_jobs_ = 0;
        writing_ = true;
        op = Op::kWrite;
      } else if (drain_requested_ && !drain_sent_) {
        write_.Clear();
        write_.mutable_credit()->set_drain(true);
        drain_sent_ = true;
        writing_ = true;
        op = Op::kWrite;
      } else if (close_requested_ && (held_ <= 0 || close_now_)) {
        writes_done_sent_ = true;
        writing_ = true;
        op = Op::kWritesDone;
      }
    }
    switch (op) {
      case Op::kNone:
        break;
      case Op::kWrite:
        StartWrite(&write_);
        break;
      case Op::kWritesDone:
        StartWritesDone();
        break;
      case Op::kRemoveHold:
        RemoveHold();
        break;
      case Op::kLinger:
        ArmLinger();
        break;
    }
  }

  // The linger's end: pending outcomes are written then (or sooner). A new alarm each time: one
  // must not be set again from its own callback. The callback holds no reference: a call
  // destroyed meanwhile cancels its alarm.
  void ArmLinger() {
    auto alarm = std::make_unique<grpc::Alarm>();
    grpc::Alarm* raw = alarm.get();
    {
      absl::MutexLock lock(&mu_);
      linger_alarm_ = std::move(alarm);  // the previous one has fired
    }
    raw->Set(absl::ToChronoTime(absl::Now() + deliverer_.options_.outcome_linger),
             [weak = weak_from_this()](bool) {
               std::shared_ptr<Call> self = weak.lock();
               if (self == nullptr) return;
               {
                 absl::MutexLock lock(&self->mu_);
                 self->linger_armed_ = false;
                 self->linger_over_ = true;
               }
               self->Pump();
             });
  }

  // Declared first, so destroyed last: notifies after every other member (the ClientContext
  // included) is gone.
  struct OnDestroy {
    std::shared_ptr<absl::Notification> notification;
    ~OnDestroy() {
      if (notification) notification->Notify();
    }
  } on_destroy_;
  Deliverer& deliverer_;
  const std::string collector_;
  grpc::ClientContext context_;
  std::shared_ptr<Read> reading_;  // the read in progress (read path only)
  // The destinations the collector sent on this stream, by id (read path only).
  absl::flat_hash_map<std::string, std::shared_ptr<const StreamDestination>>
      destinations_;
  hookrelay::v1::SubscribeRequest write_;  // owned by the write in flight
  std::shared_ptr<Call> self_;
  std::atomic<bool> received_any_{false};
  std::atomic<bool> grouped_outcomes_{false};
  absl::Notification done_;

  mutable absl::Mutex mu_;
  hookrelay::v1::OutcomeBatch pending_ ABSL_GUARDED_BY(mu_);
  int64_t pending_jobs_ ABSL_GUARDED_BY(mu_) = 0;  // the jobs pending_ settles
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  // A pump is deferred to the end of the current round of the thread that set it.
  bool pump_deferred_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // Start() ran: operations may be started
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool drain_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool drain_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool close_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool close_now_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_removed_ ABSL_GUARDED_BY(mu_) = false;
  bool linger_armed_ ABSL_GUARDED_BY(mu_) = false;  // an alarm is set
  bool linger_over_ ABSL_GUARDED_BY(mu_) = false;   // it went off: write what is pending
  bool urgent_ ABSL_GUARDED_BY(mu_) = false;        // a pending outcome must not wait
  int64_t outcomes_per_write_ ABSL_GUARDED_BY(mu_) = kOutcomesPerWrite;  // set by Start
  std::unique_ptr<grpc::Alarm> linger_alarm_ ABSL_GUARDED_BY(mu_);
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_DELIVERER_CALL_H_
