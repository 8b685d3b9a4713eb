#include "collector/dispatch/subscribe_stream.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/log.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Outcome;
using hookrelay::v1::SubscribeRequest;
using hookrelay::v1::SubscribeResponse;

// One Subscribe call. gRPC holds a raw pointer until OnDone; the dispatcher's registry holds a
// shared_ptr, so a dispatch round that picked the stream keeps it alive past OnDone. Invariant:
// Finish is called only while no write is reserved or in flight, and nothing is written after
// it, so the dispatcher never writes to a finished call.
class SubscribeStream final : public DeliveryStream,
                              public grpc::ServerBidiReactor<SubscribeRequest, SubscribeResponse> {
 public:
  SubscribeStream(Dispatcher& dispatcher, grpc::CallbackServerContext* context)
      : dispatcher_(dispatcher), lifeline_(dispatcher.lifeline()), peer_(context->peer()) {
    absl::MutexLock lock(&lifeline_->mu);
    ++lifeline_->open;
  }

  // The registry's reference; set once before registration, read under the dispatcher's mu_,
  // dropped in OnDone after unregistration.
  void SetSelf(std::shared_ptr<SubscribeStream> self) { self_ = std::move(self); }
  std::shared_ptr<SubscribeStream> self_ptr() const { return self_; }
  void StartReading() { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The deliverer half-closed or the call broke: end our side once writes are done.
      RequestFinish(absl::OkStatus());
      return;
    }
    if (absl::Status st = HandleRequest(); !st.ok()) {
      RequestFinish(std::move(st));
      return;
    }
    dispatcher_.Notify();
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
    }
    // Before MaybeFinish: once Finish is called, OnDone may run and the dispatcher may go away.
    dispatcher_.Notify();
    if (!ok) {
      RequestFinish(absl::UnavailableError("write failed"));
      return;
    }
    MaybeFinish();
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&mu_);
      common::LogInfo("deliverer disconnected",
                      {{"deliverer", deliverer_id_}, {"peer", peer_}, {"unsettled", held_}});
    }
    dispatcher_.Unregister(this);  // the last use of the dispatcher
    std::shared_ptr<Dispatcher::Lifeline> lifeline = lifeline_;
    {
      std::shared_ptr<SubscribeStream> self = std::move(self_);
      // `self` may be the last reference: no member is used after this block.
    }
    absl::MutexLock lock(&lifeline->mu);
    --lifeline->open;
  }

  bool Reserve(size_t max_batch, const std::shared_ptr<const Routing>& routing,
               size_t* want) override {
    absl::MutexLock lock(&mu_);
    const bool announce = announced_ != routing;
    if (!hello_ || finish_requested_ || writing_ || (credits_ <= 0 && !announce)) return false;
    writing_ = true;
    response_.clear_deliveries();
    response_.clear_destinations();
    response_.clear_destination_configs();
    // With the destinations: this collector settles grouped outcomes (Outcome.also_job_ids).
    response_.set_grouped_outcomes(announce);
    if (announce) {
      announced_ = routing;
      auto& ids = *response_.mutable_destinations()->mutable_ids();
      for (const auto& d : routing->config().destinations()) ids.Add()->assign(d.id());
      // Once per routing (a config change), not once per job.
      if (by_reference_) *response_.mutable_destination_configs() = routing->config().destinations();
    }
    *want = credits_ <= 0 ? 0
                          : static_cast<size_t>(
                                std::min<int64_t>(credits_, static_cast<int64_t>(max_batch)));
    return true;
  }
  SubscribeResponse& response() override { return response_; }
  void Send() override {
    const int64_t n = response_.deliveries_size();
    const bool empty = n == 0 && !response_.has_destinations();
    {
      absl::MutexLock lock(&mu_);
      if (empty) {
        writing_ = false;
      } else {
        credits_ -= n;
        held_ += n;
      }
    }
    if (empty) {
      MaybeFinish();
      return;
    }
    StartWrite(&response_);
  }

  int64_t capacity() const override {
    absl::MutexLock lock(&mu_);
    return draining_ ? 0 : held_ + std::max<int64_t>(0, credits_);
  }

  int collectors() const override {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(collectors_);
  }

  int64_t held() const override {
    absl::MutexLock lock(&mu_);
    return held_;
  }

  bool destinations_by_reference() const override {
    absl::MutexLock lock(&mu_);
    return by_reference_;
  }

  void RequestFinish(absl::Status status) override {
    {
      absl::MutexLock lock(&mu_);
      if (!finish_requested_) {
        finish_requested_ = true;
        finish_status_ = common::ToGrpcStatus(status);
      }
    }
    MaybeFinish();
  }

 private:
  absl::Status HandleRequest() {
    switch (request_.kind_case()) {
      case SubscribeRequest::kHello: {
        absl::MutexLock lock(&mu_);
        if (hello_) return absl::InvalidArgumentError("hello sent twice on one stream");
        hello_ = true;
        deliverer_id_ = request_.hello().deliverer_id();
        collectors_ = std::max<uint32_t>(1, request_.hello().collectors());
        by_reference_ = request_.hello().destinations_by_reference();
        AddCreditsLocked(request_.hello().credits());
        common::LogInfo("deliverer connected", {{"deliverer", deliverer_id_},
                                                {"peer", peer_},
                                                {"credits", credits_}});
        return absl::OkStatus();
      }
      case SubscribeRequest::kCredit: {
        absl::MutexLock lock(&mu_);
        if (!hello_) return absl::FailedPreconditionError("the first message must be a hello");
        if (request_.credit().drain()) {
          draining_ = true;
          credits_ = 0;
          common::LogInfo("deliverer draining", {{"deliverer", deliverer_id_}, {"held", held_}});
          return absl::OkStatus();
        }
        AddCreditsLocked(request_.credit().credits());
        return absl::OkStatus();
      }
      case SubscribeRequest::kOutcomes: {
        std::string deliverer_id;
        {
          absl::MutexLock lock(&mu_);
          if (!hello_) return absl::FailedPreconditionError("the first message must be a hello");
          deliverer_id = deliverer_id_;
        }
        const size_t settled = dispatcher_.ApplyOutcomes(request_.outcomes().outcomes(),
                                                         deliverer_id);
        absl::MutexLock lock(&mu_);
        const int64_t n = std::min<int64_t>(static_cast<int64_t>(settled), held_);
        held_ -= n;
        if (!draining_) credits_ += n;
        return absl::OkStatus();
      }
      case SubscribeRequest::KIND_NOT_SET:
        break;
    }
    return absl::InvalidArgumentError("empty SubscribeRequest: set hello, credit or outcomes");
  }

  void AddCreditsLocked(uint32_t credits) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (draining_) return;
    const int64_t cap = static_cast<int64_t>(dispatcher_.max_credits());
    credits_ = std::min<int64_t>(credits_ + credits, std::max<int64_t>(0, cap - held_));
  }

  void MaybeFinish() {
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (!finish_requested_ || writing_ || finish_called_) return;
      finish_called_ = true;
      status = finish_status_;
    }
    Finish(status);
  }

  Dispatcher& dispatcher_;
  const std::shared_ptr<Dispatcher::Lifeline> lifeline_;
  const std::string peer_;
  std::shared_ptr<SubscribeStream> self_;  // dropped in OnDone
  SubscribeRequest request_;      // read path only (reads are sequential)

  mutable absl::Mutex mu_;
  bool hello_ ABSL_GUARDED_BY(mu_) = false;
  std::string deliverer_id_ ABSL_GUARDED_BY(mu_);
  int64_t credits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t collectors_ ABSL_GUARDED_BY(mu_) = 1;
  bool by_reference_ ABSL_GUARDED_BY(mu_) = false;  // Hello.destinations_by_reference
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // A write is reserved by the dispatcher or in flight; response_ belongs to it.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
  // The routing whose destination ids this stream was last sent.
  std::shared_ptr<const Routing> announced_ ABSL_GUARDED_BY(mu_);
  SubscribeResponse response_;
};

}  // namespace

grpc::ServerBidiReactor<SubscribeRequest, SubscribeResponse>* NewSubscribeStream(
    Dispatcher& dispatcher, grpc::CallbackServerContext* context, absl::Status refuse) {
  auto owned = std::make_shared<SubscribeStream>(dispatcher, context);
  SubscribeStream* stream = owned.get();
  stream->SetSelf(owned);  // the reactor owns itself until OnDone
  if (!refuse.ok()) {
    stream->RequestFinish(std::move(refuse));
    return stream;
  }
  if (!dispatcher.Register(std::move(owned))) {
    stream->RequestFinish(absl::UnavailableError("collector shutting down"));
    return stream;
  }
  stream->StartReading();
  return stream;
}

}  // namespace hookrelay::collector
