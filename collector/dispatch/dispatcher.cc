#include "collector/dispatch/dispatcher.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/pickup.h"
#include "common/proto_time.h"
#include "common/strings.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace hookrelay::collector {

using hookrelay::v1::Outcome;
using hookrelay::v1::SubscribeRequest;
using hookrelay::v1::SubscribeResponse;

// One Subscribe call. gRPC holds a raw pointer until OnDone; the dispatcher's registry holds a
// shared_ptr, so a dispatch round that picked the stream keeps it alive past OnDone. Invariant:
// Finish is called only while no write is reserved or in flight, and nothing is written after
// it, so the dispatcher never writes to a finished call.
class Dispatcher::Stream final
    : public grpc::ServerBidiReactor<SubscribeRequest, SubscribeResponse> {
 public:
  Stream(Dispatcher& dispatcher, grpc::CallbackServerContext* context)
      : dispatcher_(dispatcher), lifeline_(dispatcher.lifeline_), peer_(context->peer()) {
    absl::MutexLock lock(&lifeline_->mu);
    ++lifeline_->open;
  }

  // The registry's reference; set once before registration, read under the dispatcher's mu_,
  // dropped in OnDone after unregistration.
  void SetSelf(std::shared_ptr<Stream> self) { self_ = std::move(self); }
  std::shared_ptr<Stream> self_ptr() const { return self_; }
  void StartReading() { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The deliverer half-closed or the call broke: end our side once writes are done.
      RequestFinish(grpc::Status::OK);
      return;
    }
    if (absl::Status st = HandleRequest(); !st.ok()) {
      RequestFinish(grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message())));
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
      RequestFinish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
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
    std::shared_ptr<Lifeline> lifeline = lifeline_;
    {
      std::shared_ptr<Stream> self = std::move(self_);
      // `self` may be the last reference: no member is used after this block.
    }
    absl::MutexLock lock(&lifeline->mu);
    --lifeline->open;
  }

  // Dispatcher thread: reserves the write slot when the stream can take jobs now or has not
  // been told `routing`'s destinations yet (which are then put in the response). Returns false
  // when nothing is reserved; otherwise *want is how many jobs it may be sent (maybe 0).
  bool Reserve(size_t max_batch, const std::shared_ptr<const Routing>& routing, size_t* want) {
    absl::MutexLock lock(&mu_);
    const bool announce = announced_ != routing;
    if (!hello_ || finish_requested_ || writing_ || (credits_ <= 0 && !announce)) return false;
    writing_ = true;
    response_.clear_deliveries();
    response_.clear_destinations();
    if (announce) {
      announced_ = routing;
      auto& ids = *response_.mutable_destinations()->mutable_ids();
      for (const auto& d : routing->config().destinations()) ids.Add()->assign(d.id());
    }
    *want = credits_ <= 0 ? 0
                          : static_cast<size_t>(
                                std::min<int64_t>(credits_, static_cast<int64_t>(max_batch)));
    return true;
  }
  // The reserved response, to fill between Reserve and Send.
  SubscribeResponse& response() { return response_; }
  // Sends the reserved response (or releases the slot when it is empty).
  void Send() {
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

  // Credits granted: jobs held plus credits available (0 while draining).
  int64_t capacity() const {
    absl::MutexLock lock(&mu_);
    return draining_ ? 0 : held_ + std::max<int64_t>(0, credits_);
  }

  // Collectors the deliverer said it subscribes to (at least 1).
  int collectors() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(collectors_);
  }

  // Jobs sent and not yet settled.
  int64_t held() const {
    absl::MutexLock lock(&mu_);
    return held_;
  }

  void RequestFinish(grpc::Status status) {
    {
      absl::MutexLock lock(&mu_);
      if (!finish_requested_) {
        finish_requested_ = true;
        finish_status_ = std::move(status);
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
        const auto& outcomes = request_.outcomes().outcomes();
        for (const Outcome& outcome : outcomes) dispatcher_.ApplyOutcome(outcome, deliverer_id);
        absl::MutexLock lock(&mu_);
        const int64_t n = std::min<int64_t>(outcomes.size(), held_);
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
    const int64_t cap = static_cast<int64_t>(dispatcher_.options_.max_credits);
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
  const std::shared_ptr<Lifeline> lifeline_;
  const std::string peer_;
  std::shared_ptr<Stream> self_;  // dropped in OnDone
  SubscribeRequest request_;      // read path only (reads are sequential)

  mutable absl::Mutex mu_;
  bool hello_ ABSL_GUARDED_BY(mu_) = false;
  std::string deliverer_id_ ABSL_GUARDED_BY(mu_);
  int64_t credits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t collectors_ ABSL_GUARDED_BY(mu_) = 1;
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

Dispatcher::Dispatcher(Options options, JobStore& store, const RoutingHolder& routing,
                       const common::Clock& clock, prometheus::Registry* registry)
    : options_(options),
      store_(store),
      routing_(routing),
      clock_(clock),
      governor_(options.governor, clock, registry) {
  if (registry != nullptr) {
    auto& deferred =
        prometheus::BuildCounter()
            .Name("hookrelay_dispatch_deferred_total")
            .Help("Jobs put back in the store without an attempt, by reason: concurrency (the "
                  "destination's adaptive limit or fair share), rate_limit, circuit_open.")
            .Register(*registry);
    metrics_.deferred_concurrency = &deferred.Add({{"reason", "concurrency"}});
    metrics_.deferred_rate = &deferred.Add({{"reason", "rate_limit"}});
    metrics_.deferred_circuit = &deferred.Add({{"reason", "circuit_open"}});
    metrics_.disabled_gone = &prometheus::BuildCounter()
                                  .Name("hookrelay_destination_disabled_total")
                                  .Help("Destinations disabled by the collector, by reason (gone: "
                                        "every URL answered 410 Gone).")
                                  .Register(*registry)
                                  .Add({{"reason", "gone"}});
    auto& outcomes = prometheus::BuildCounter()
                         .Name("hookrelay_dispatch_outcomes_total")
                         .Help("Outcomes received from deliverers, by outcome (stale: the lease "
                               "had expired, ignored).")
                         .Register(*registry);
    metrics_.delivered = &outcomes.Add({{"outcome", "delivered"}});
    metrics_.retried = &outcomes.Add({{"outcome", "retry"}});
    metrics_.dead = &outcomes.Add({{"outcome", "dead"}});
    metrics_.stale = &outcomes.Add({{"outcome", "stale"}});
    metrics_.sent = &prometheus::BuildCounter()
                         .Name("hookrelay_dispatch_jobs_sent_total")
                         .Help("Jobs leased and sent to deliverers.")
                         .Register(*registry)
                         .Add({});
    metrics_.dispatch_latency =
        &prometheus::BuildHistogram()
             .Name("hookrelay_dispatch_latency_seconds")
             .Help("Collector receipt of an event to its job being handed to a deliverer's stream "
                   "(first attempts never held back): the store's commit and the dispatcher. The "
                   "rest of the deliverer's hookrelay_delivery_pickup_seconds is the stream.")
             .Register(*registry)
             .Add({}, common::PickupBuckets());
    metrics_.undeliverable =
        &prometheus::BuildCounter()
             .Name("hookrelay_dispatch_undeliverable_total")
             .Help("Jobs dead-lettered at dispatch: their destination was removed or disabled.")
             .Register(*registry)
             .Add({});
    metrics_.streams = &prometheus::BuildGauge()
                            .Name("hookrelay_dispatch_streams")
                            .Help("Deliverer streams connected.")
                            .Register(*registry)
                            .Add({});
  }
}

Dispatcher::~Dispatcher() { Shutdown(); }

void Dispatcher::Start() { thread_ = std::thread([this] { Run(); }); }

void Dispatcher::Notify() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

grpc::ServerBidiReactor<SubscribeRequest, SubscribeResponse>* Dispatcher::NewStream(
    grpc::CallbackServerContext* context, grpc::Status refuse) {
  auto owned = std::make_shared<Stream>(*this, context);
  Stream* stream = owned.get();
  stream->SetSelf(std::move(owned));  // the reactor owns itself until OnDone
  bool stopping;
  {
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
    if (!stopping && refuse.ok()) streams_.insert(stream);
  }
  if (stopping) {
    stream->RequestFinish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "collector shutting down"));
    return stream;
  }
  if (!refuse.ok()) {
    stream->RequestFinish(std::move(refuse));
    return stream;
  }
  if (metrics_.streams) metrics_.streams->Increment();
  stream->StartReading();
  return stream;
}

void Dispatcher::Unregister(Stream* stream) {
  bool erased;
  {
    absl::MutexLock lock(&mu_);
    erased = streams_.erase(stream) > 0;
    wake_ = true;
  }
  if (erased && metrics_.streams) metrics_.streams->Decrement();
}

bool Dispatcher::WakeOrStopping() const { return wake_ || stopping_; }

int64_t Dispatcher::passes() const {
  absl::MutexLock lock(&mu_);
  return passes_;
}

int Dispatcher::stream_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(streams_.size());
}

void Dispatcher::Run() {
  size_t next = 0;  // round-robin start
  absl::Time pass_start = clock_.Now();
  while (true) {
    std::vector<std::shared_ptr<Stream>> streams;
    {
      // The next scheduled job's due time or lease expiry, or the next poll, in the clock's
      // time: with a manual clock, moving it is what wakes the loop. The poll counts from when
      // the previous pass began, so a clock moved during a pass wakes the next one at once.
      const absl::Time next_poll = std::min(pass_start + options_.poll_interval, store_.NextWake());
      absl::MutexLock lock(&mu_);
      clock_.AwaitWithDeadline(mu_, absl::Condition(this, &Dispatcher::WakeOrStopping), next_poll);
      pass_start = clock_.Now();
      wake_ = false;
      ++passes_;
      if (stopping_) return;
      streams.reserve(streams_.size());
      for (Stream* s : streams_) streams.push_back(s->self_ptr());
    }
    if (streams.empty()) continue;
    // Keep filling while some stream takes a full batch (a backlog), one batch per stream per
    // pass so that streams share the backlog.
    bool more = true;
    while (more) {
      more = false;
      // The deliverers' capacity, for the destinations' fair share: again each round, since a
      // pass through a backlog lasts while credits come and go.
      int64_t capacity = 0;
      int collectors = options_.rate_limit_share;
      for (const auto& s : streams) {
        capacity += s->capacity();
        collectors = std::max(collectors, s->collectors());
      }
      capacity_.store(capacity, std::memory_order_relaxed);
      rate_share_.store(collectors, std::memory_order_relaxed);
      for (size_t i = 0; i < streams.size(); ++i) {
        Stream& s = *streams[(next + i) % streams.size()];
        if (FillStream(s) == options_.max_batch) more = true;
      }
      next = (next + 1) % streams.size();
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
  }
}

size_t Dispatcher::FillStream(Stream& stream) {
  const std::shared_ptr<const Routing> routing = routing_.Get();
  size_t want = 0;
  if (!stream.Reserve(options_.max_batch, routing, &want)) return 0;
  if (want == 0) {
    stream.Send();  // the destination ids alone
    return 0;
  }
  SubscribeResponse& response = stream.response();
  // Jobs held back by their destination's limits leave room in the batch: lease again for it
  // (a few rounds at most), so that a slow destination's jobs do not shrink every response.
  bool full = false;  // the last lease returned all it was asked for
  for (int round = 0; round < 4; ++round) {
    const size_t ask = want - static_cast<size_t>(response.deliveries_size());
    if (ask == 0) break;
    absl::StatusOr<std::vector<LeasedJob>> leased = store_.Lease(ask, options_.lease_duration);
    if (!leased.ok()) {
      static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 3);
      common::LogRateLimited(*limiter, common::LogLevel::kError, "leasing jobs failed",
                             {{"error", leased.status().ToString()}});
      full = false;
      break;
    }
    full = leased->size() == ask;
    size_t deferred = 0;
    for (LeasedJob& lj : *leased) {
      const hookrelay::v1::Destination* destination =
          routing->FindDestination(lj.job.destination_id());
      if (lj.job.test() && destination == nullptr) {
        // A test of a destination deleted meanwhile: its outcome is "dead", the job goes.
        Outcome gone;
        gone.set_job_id(lj.job.id());
        gone.set_kind(Outcome::DEAD);
        gone.set_reason(
            absl::StrCat("destination ", lj.job.destination_id(), " no longer configured"));
        (void)store_.Complete(lj.job.id(), lj.lease);
        if (options_.on_test_outcome) options_.on_test_outcome(lj.job.message_id(), gone);
        continue;
      }
      if (destination == nullptr || (!destination->enabled() && !lj.job.test())) {
        hookrelay::v1::Attempt attempt;
        attempt.set_at_unix_ms(absl::ToUnixMillis(clock_.Now()));
        const std::string reason =
            destination == nullptr
                ? absl::StrCat("destination ", lj.job.destination_id(), " no longer configured")
                : absl::StrCat("destination ", lj.job.destination_id(), " disabled");
        if (absl::Status st = store_.Bury(lj.job.id(), lj.lease, reason, attempt); !st.ok()) {
          common::LogWarning("dead-lettering an undeliverable job failed",
                             {{"job_id", lj.job.id()}, {"error", st.ToString()}});
        }
        if (metrics_.undeliverable) metrics_.undeliverable->Increment();
        continue;
      }
      if (!lj.job.test()) {
        const DestinationGovernor::Admission admission = governor_.Admit(
            lj.job.destination_id(), destination->options(), lj.job.id(), lj.deadline,
            capacity_.load(std::memory_order_relaxed), rate_share_.load(std::memory_order_relaxed));
        if (admission.verdict != DestinationGovernor::Verdict::kAdmit) {
          // Back to the store, due when the destination can take it; no attempt is counted.
          if (absl::Status st = store_.Retry(lj.job.id(), lj.lease, admission.retry_at,
                                             hookrelay::v1::Attempt());
              !st.ok()) {
            static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 3);
            common::LogRateLimited(*limiter, common::LogLevel::kWarning, "deferring a job failed",
                                   {{"job_id", lj.job.id()}, {"error", st.ToString()}});
          }
          using Verdict = DestinationGovernor::Verdict;
          prometheus::Counter* c = admission.verdict == Verdict::kConcurrency
                                       ? metrics_.deferred_concurrency
                                   : admission.verdict == Verdict::kRateLimit
                                       ? metrics_.deferred_rate
                                       : metrics_.deferred_circuit;
          if (c) c->Increment();
          ++deferred;
          continue;
        }
      }
      hookrelay::v1::Delivery* delivery = response.add_deliveries();
      *delivery->mutable_job() = std::move(lj.job);
      delivery->set_lease(lj.lease);
      *delivery->mutable_destination() = *destination;
    }
    if (deferred == 0 || !full) break;
  }
  if (response.deliveries_size() > 0) {
    // One lock per batch: each job's destination (stats) and test flag, until its outcome.
    absl::MutexLock lock(&stats_mu_);
    for (const hookrelay::v1::Delivery& d : response.deliveries()) {
      const hookrelay::v1::Job& job = d.job();
      in_flight_[job.id()] = InFlight{job.destination_id(), job.test(),
                                      job.test() ? job.message_id() : std::string()};
    }
  }
  const size_t sent = static_cast<size_t>(response.deliveries_size());
  if (metrics_.sent && sent > 0) metrics_.sent->Increment(static_cast<double>(sent));
  if (metrics_.dispatch_latency != nullptr && sent > 0) {
    const absl::Time now = clock_.Now();
    for (const hookrelay::v1::Delivery& d : response.deliveries()) {
      if (std::optional<absl::Duration> l = common::PickupLatency(d.job(), now)) {
        metrics_.dispatch_latency->Observe(absl::ToDoubleSeconds(*l));
      }
    }
  }
  stream.Send();
  // Report a full batch when the lease was full, even if some jobs were buried, so the caller
  // keeps draining a backlog.
  return full && want == options_.max_batch ? options_.max_batch : sent;
}

namespace {

// "HTTP 503 from host" / "timeout from host" for the first failed URL of an attempt.
std::string AttemptError(const hookrelay::v1::Attempt& attempt) {
  for (const auto& u : attempt.urls()) {
    if (u.error().empty() && u.status() >= 200 && u.status() <= 299) continue;
    std::string_view host = u.url();
    if (size_t scheme = host.find("://"); scheme != std::string_view::npos) {
      host.remove_prefix(scheme + 3);
    }
    host = host.substr(0, host.find_first_of("/?#"));
    if (size_t at = host.rfind('@'); at != std::string_view::npos) host.remove_prefix(at + 1);
    return absl::StrCat(u.error().empty() ? absl::StrCat("HTTP ", u.status()) : u.error(),
                        " from ", common::ToAbsl(host));
  }
  return "";
}

}  // namespace

Dispatcher::DestinationStats Dispatcher::Stats(const std::string& destination_id) const {
  DestinationStats stats;
  {
    absl::MutexLock lock(&stats_mu_);
    auto it = stats_.find(destination_id);
    if (it != stats_.end()) stats = it->second;
  }
  const DestinationGovernor::State state = governor_.Get(destination_id);
  stats.concurrency_limit = state.limit;
  stats.in_flight = state.in_flight;
  stats.circuit = DestinationGovernor::CircuitName(state.circuit);
  return stats;
}

namespace {

// Every URL of a failed attempt answered 410 Gone.
bool AllGone(const Outcome& outcome) {
  if (outcome.kind() == Outcome::DELIVERED || outcome.attempt().urls_size() == 0) return false;
  for (const auto& u : outcome.attempt().urls()) {
    if (!u.error().empty() || u.status() != 410) return false;
  }
  return true;
}

}  // namespace

void Dispatcher::GovernOutcome(const std::string& destination_id, const Outcome& outcome) {
  const std::shared_ptr<const Routing> routing = routing_.Get();
  const hookrelay::v1::Destination* destination = routing->FindDestination(destination_id);
  const hookrelay::v1::DeliveryOptions options =
      destination != nullptr ? destination->options() : hookrelay::v1::DeliveryOptions();
  if (governor_.OnOutcome(destination_id, options, outcome)) {
    const DestinationGovernor::State state = governor_.Get(destination_id);
    common::LogWarning("circuit breaker open: attempts paused",
                       {{"destination", destination_id},
                        {"consecutive_failures", state.consecutive_failures},
                        {"last_error", AttemptError(outcome.attempt())}});
  }
  if (!AllGone(outcome) || destination == nullptr || !destination->enabled()) return;
  {
    absl::MutexLock lock(&stats_mu_);
    if (!disabling_.insert(destination_id).second) return;
  }
  const std::string reason =
      absl::StrCat("receiver answered 410 Gone (", AttemptError(outcome.attempt()), ")");
  absl::Status st = options_.on_destination_gone
                        ? options_.on_destination_gone(destination_id, reason)
                        : absl::UnimplementedError("no way to disable destinations here");
  if (!st.ok()) {
    // Logged once: the destination stays in disabling_ until the collector restarts (e.g. one
    // of a --config file, which only the file can change).
    common::LogError("destination answered 410 Gone but could not be disabled",
                     {{"destination", destination_id},
                      {"detail", reason},
                      {"error", st.ToString()}});
    return;
  }
  if (metrics_.disabled_gone) metrics_.disabled_gone->Increment();
  common::LogWarning("destination disabled",
                     {{"destination", destination_id}, {"reason", "gone"}, {"detail", reason}});
  // Now disabled in the routing: a later 410 after someone enables it again disables it again.
  absl::MutexLock lock(&stats_mu_);
  disabling_.erase(destination_id);
}

void Dispatcher::CountOutcomeLocked(const std::string& destination_id, const Outcome& outcome) {
  DestinationStats& stats = stats_[destination_id];
  switch (outcome.kind()) {
    case Outcome::DELIVERED:
      ++stats.delivered;
      return;
    case Outcome::RETRY:
      ++stats.retried;
      break;
    case Outcome::DEAD:
      ++stats.dead;
      break;
    default:
      return;
  }
  std::string error = AttemptError(outcome.attempt());
  if (error.empty()) error = outcome.reason();
  if (error.empty()) return;
  stats.last_error = std::move(error);
  stats.last_error_at = outcome.attempt().at_unix_ms() > 0
                            ? absl::FromUnixMillis(outcome.attempt().at_unix_ms())
                            : clock_.Now();
}

void Dispatcher::ApplyOutcome(const Outcome& outcome, std::string_view deliverer_id) {
  // One lock per outcome: take the job's entry and, for a customer job, count the outcome.
  InFlight job;
  {
    absl::MutexLock lock(&stats_mu_);
    auto it = in_flight_.find(outcome.job_id());
    if (it != in_flight_.end()) {
      job = std::move(it->second);
      in_flight_.erase(it);
    }
    if (!job.test && !job.destination_id.empty()) CountOutcomeLocked(job.destination_id, outcome);
  }
  if (!job.test && !job.destination_id.empty()) GovernOutcome(job.destination_id, outcome);
  if (job.test) {
    // Test jobs end with their first outcome.
    absl::Status st = store_.Complete(outcome.job_id(), outcome.lease());
    if (!st.ok() && !absl::IsNotFound(st) && !absl::IsFailedPrecondition(st)) {
      common::LogWarning("removing a test job failed",
                         {{"job_id", outcome.job_id()}, {"error", st.ToString()}});
    }
    if (options_.on_test_outcome) options_.on_test_outcome(job.message_id, outcome);
    return;
  }
  absl::Status st;
  prometheus::Counter* counter = nullptr;
  switch (outcome.kind()) {
    case Outcome::DELIVERED:
      st = store_.Complete(outcome.job_id(), outcome.lease());
      counter = metrics_.delivered;
      break;
    case Outcome::RETRY: {
      // A time outside Timestamp's range (a broken deliverer) means: due now.
      const absl::Time not_before =
          common::FromProtoTime(outcome.not_before()).value_or(absl::InfinitePast());
      st = store_.Retry(outcome.job_id(), outcome.lease(), not_before, outcome.attempt());
      counter = metrics_.retried;
      break;
    }
    case Outcome::DEAD:
      st = store_.Bury(outcome.job_id(), outcome.lease(), outcome.reason(), outcome.attempt());
      counter = metrics_.dead;
      break;
    default:
      st = absl::InvalidArgumentError(absl::StrCat("outcome kind ", outcome.kind()));
      break;
  }
  if (st.ok()) {
    if (counter) counter->Increment();
    return;
  }
  if (absl::IsFailedPrecondition(st) || absl::IsNotFound(st)) {
    // The lease expired (the deliverer was too slow, or the collector restarted): the job was or
    // will be handed out again; this late outcome is dropped.
    if (metrics_.stale) metrics_.stale->Increment();
    static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 3);
    common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                           "outcome for an expired lease ignored",
                           {{"deliverer", deliverer_id},
                            {"job_id", outcome.job_id()},
                            {"error", st.message()}});
    return;
  }
  common::LogError("applying an outcome failed", {{"deliverer", deliverer_id},
                                                  {"job_id", outcome.job_id()},
                                                  {"error", st.ToString()}});
}

void Dispatcher::Shutdown() {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    for (Stream* s : streams_) streams.push_back(s->self_ptr());
  }
  if (thread_.joinable()) thread_.join();
  // Let outcomes of jobs already sent arrive (reads continue; nothing new is sent).
  const absl::Time deadline = absl::Now() + options_.drain_timeout;
  for (const auto& s : streams) {
    // Real time: the outcomes travel over the network from deliverers.
    while (s->held() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  }
  for (const auto& s : streams) {
    s->RequestFinish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "collector shutting down"));
  }
  streams.clear();
  absl::MutexLock lock(&lifeline_->mu);
  auto all_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifeline_->mu) {
    return lifeline_->open == 0;
  };
  if (!lifeline_->mu.AwaitWithTimeout(absl::Condition(&all_done), absl::Seconds(10))) {
    common::LogWarning("deliverer streams still open after shutdown",
                       {{"streams", lifeline_->open}});
  }
}

}  // namespace hookrelay::collector
