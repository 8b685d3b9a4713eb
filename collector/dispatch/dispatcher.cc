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
using hookrelay::v1::SubscribeResponse;

Dispatcher::Dispatcher(Options options, JobQueue& store, const RoutingHolder& routing,
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
    metrics_.extended =
        &prometheus::BuildCounter()
             .Name("hookrelay_dispatch_leases_extended_total")
             .Help("Leases of jobs still in flight at a connected deliverer extended as they neared "
                   "their end (JetStream: InProgress), so a long attempt keeps its job.")
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

void Dispatcher::Start() {
  hold_signal_.Set([this] { Notify(); });
  thread_ = std::thread([this] { Run(); });
}

void Dispatcher::HoldUntil(absl::Time at) {
  {
    absl::MutexLock lock(&hold_mu_);
    if (at >= hold_until_) return;
    hold_until_ = at;
  }
  // Each pass holds anew (mostly at the time the last pass held for): the timer thread is woken
  // only when that is before the time it already waits for.
  hold_signal_.Reschedule(at);
}

absl::Time Dispatcher::HoldWake() {
  absl::MutexLock lock(&hold_mu_);
  return hold_until_;
}

void Dispatcher::Notify() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

bool Dispatcher::Register(std::shared_ptr<DeliveryStream> stream) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    DeliveryStream* key = stream.get();
    streams_.emplace(key, std::move(stream));
    wake_ = true;
  }
  if (metrics_.streams) metrics_.streams->Increment();
  return true;
}

void Dispatcher::Unregister(DeliveryStream* stream) {
  bool erased;
  {
    absl::MutexLock lock(&mu_);
    erased = streams_.erase(stream) > 0;
    wake_ = true;
  }
  if (erased && metrics_.streams) metrics_.streams->Decrement();
  // Its jobs' leases are not extended any more: they run out and the jobs go to others.
  absl::MutexLock lock(&stats_mu_);
  for (auto& [job_id, entry] : in_flight_) {
    if (entry.stream != stream) continue;
    lease_ends_.erase({entry.deadline, job_id});
    entry.stream = nullptr;
  }
}

void Dispatcher::ExtendRunningLeases() {
  const absl::Duration lease = store_.lease_duration();
  const absl::Duration ahead = lease / 4;
  const absl::Time now = clock_.Now();
  std::vector<std::pair<uint64_t, uint64_t>> due;
  std::vector<std::string> destinations;
  {
    absl::MutexLock lock(&stats_mu_);
    for (auto it = lease_ends_.begin(); it != lease_ends_.end() && it->first <= now + ahead; ++it) {
      const InFlight& entry = in_flight_.at(it->second);
      due.emplace_back(it->second, entry.lease);
      destinations.push_back(entry.destination_id);
    }
  }
  if (!due.empty()) {
    std::vector<absl::StatusOr<absl::Time>> extended = store_.ExtendLeases(due);
    absl::MutexLock lock(&stats_mu_);
    for (size_t i = 0; i < due.size() && i < extended.size(); ++i) {
      auto it = in_flight_.find(due[i].first);
      if (it == in_flight_.end() || it->second.stream == nullptr) continue;  // settled meanwhile
      lease_ends_.erase({it->second.deadline, due[i].first});
      if (!extended[i].ok()) {
        it->second.stream = nullptr;  // The lease ended: nothing more to extend.
        continue;
      }
      it->second.deadline = *extended[i];
      lease_ends_.emplace(it->second.deadline, due[i].first);
      governor_.ExtendInFlight(destinations[i], due[i].first, it->second.deadline);
      if (metrics_.extended) metrics_.extended->Increment();
    }
  }
  absl::Time next = absl::InfiniteFuture();
  {
    absl::MutexLock lock(&stats_mu_);
    if (!lease_ends_.empty()) next = lease_ends_.begin()->first - ahead;
  }
  if (next != absl::InfiniteFuture()) HoldUntil(std::max(next, now));
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
  while (true) {
    std::vector<std::shared_ptr<DeliveryStream>> streams;
    {
      // No poll: every reason to look again is a Notify (the store's ready signal, which also
      // covers retries falling due and leases running out on the store's clock; a new
      // configuration; stream credits, outcomes and connections).
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Dispatcher::WakeOrStopping));
      // Paced: what else wakes the loop until the interval is over joins this pass.
      if (const absl::Time due = last_pass_ + options_.min_pass_interval; absl::Now() < due) {
        mu_.AwaitWithDeadline(absl::Condition(&stopping_), due);
      }
      last_pass_ = absl::Now();
      wake_ = false;
      {
        // This pass looks at every held destination again, and holds them anew.
        absl::MutexLock hold_lock(&hold_mu_);
        hold_until_ = absl::InfiniteFuture();
      }
      ++passes_;
      if (stopping_) return;
      streams.reserve(streams_.size());
      for (const auto& [key, s] : streams_) streams.push_back(s);
    }
    {
      // A new configuration: the store makes sure every destination's queue exists.
      const std::shared_ptr<const Routing> routing = routing_.Get();
      if (routing != nullptr && routing != expected_for_) {
        expected_for_ = routing;
        std::vector<std::string> ids;
        for (const hookrelay::v1::Destination& d : routing->config().destinations()) {
          ids.push_back(d.id());
        }
        store_.ExpectDestinations(ids);
      }
    }
    if (streams.empty()) continue;
    // Attempts still running as their lease nears its end keep their job.
    ExtendRunningLeases();
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
        DeliveryStream& s = *streams[(next + i) % streams.size()];
        if (FillStream(s) == options_.max_batch) more = true;
      }
      next = (next + 1) % streams.size();
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
  }
}

size_t Dispatcher::FillStream(DeliveryStream& stream) {
  const std::shared_ptr<const Routing> routing = routing_.Get();
  size_t want = 0;
  if (!stream.Reserve(options_.max_batch, routing, &want)) return 0;
  if (want == 0) {
    stream.Send();  // the destination ids alone
    return 0;
  }
  SubscribeResponse& response = stream.response();
  // The stream holds `routing`'s destinations (Reserve sent them when it announced `routing`):
  // deliveries name theirs instead of carrying a copy.
  const bool by_reference = stream.destinations_by_reference();
  // Parallel to response.deliveries(): each job's lease deadline.
  std::vector<absl::Time> deadlines;
  // Jobs leased and not sent: undeliverable ones buried, held-back ones deferred; settled in one
  // batch after the leases.
  std::vector<Settlement> put_back;
  // Jobs held back by their destination's limits leave room in the batch: lease again for it
  // (a few rounds at most), so that a slow destination's jobs do not shrink every response.
  bool full = false;  // the last lease returned all it was asked for
  // The lease budget: each destination's headroom, so that jobs its limits would refuse stay
  // queued in the store (not leased, not written back). A destination that is gone or disabled
  // has no limit: its jobs are leased to be dead-lettered below.
  const int64_t capacity = capacity_.load(std::memory_order_relaxed);
  const int share = rate_share_.load(std::memory_order_relaxed);
  absl::Time held_wake = absl::InfiniteFuture();
  // What each destination was granted and has not used yet: its jobs are admitted within it.
  absl::flat_hash_map<std::string, size_t> granted;
  auto budget = [&](std::string_view destination_id) -> size_t {
    const hookrelay::v1::Destination* destination = routing->FindDestination(destination_id);
    if (destination == nullptr || !destination->enabled()) return ~size_t{0};
    std::string id(destination_id);
    const DestinationGovernor::Headroom room =
        governor_.HeadroomFor(id, destination->options(), capacity, share);
    if (room.jobs == 0) held_wake = std::min(held_wake, room.wake_at);
    granted[std::move(id)] = room.jobs;
    return room.jobs;
  };
  for (int round = 0; round < 4; ++round) {
    const size_t ask = want - static_cast<size_t>(response.deliveries_size());
    if (ask == 0) break;
    absl::StatusOr<std::vector<LeasedJob>> leased = store_.Lease(ask, budget);
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
        put_back.push_back(Settlement::Bury(lj.job.id(), lj.lease, reason, std::move(attempt)));
        if (metrics_.undeliverable) metrics_.undeliverable->Increment();
        continue;
      }
      if (!lj.job.test()) {
        auto grant = granted.find(lj.job.destination_id());
        const bool within = grant != granted.end() && grant->second > 0;
        if (within) --grant->second;
        const DestinationGovernor::Admission admission =
            governor_.Admit(lj.job.destination_id(), destination->options(), lj.job.id(),
                            lj.deadline, capacity, share, within);
        if (admission.verdict != DestinationGovernor::Verdict::kAdmit) {
          // Back to the store, due when the destination can take it; no attempt is counted.
          put_back.push_back(Settlement::Retry(lj.job.id(), lj.lease, admission.retry_at,
                                               hookrelay::v1::Attempt()));
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
      deadlines.push_back(lj.deadline);
      *delivery->mutable_job() = std::move(lj.job);
      delivery->set_lease(lj.lease);
      if (!by_reference) *delivery->mutable_destination() = *destination;
    }
    if (deferred == 0 || !full) break;
  }
  // A destination held back by time (its circuit's pause, its rate) is looked at again then.
  if (held_wake != absl::InfiniteFuture()) HoldUntil(held_wake);
  if (!put_back.empty()) {
    store_.Settle(std::move(put_back), [](std::vector<absl::Status> statuses) {
      for (const absl::Status& st : statuses) {
        if (st.ok()) continue;
        static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 3);
        common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                               "putting back a job not sent failed", {{"error", st.ToString()}});
      }
    });
  }
  if (response.deliveries_size() > 0) {
    // One lock per batch: each job's destination (stats) and test flag, until its outcome.
    absl::MutexLock lock(&stats_mu_);
    for (int i = 0; i < response.deliveries_size(); ++i) {
      const hookrelay::v1::Delivery& d = response.deliveries(i);
      const hookrelay::v1::Job& job = d.job();
      InFlight& entry = in_flight_[job.id()];
      if (entry.stream != nullptr) lease_ends_.erase({entry.deadline, job.id()});
      entry = InFlight{job.destination_id(), job.test(),
                       job.test() ? job.message_id() : std::string(), d.lease(),
                       deadlines[static_cast<size_t>(i)], &stream};
      lease_ends_.emplace(entry.deadline, job.id());
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

void Dispatcher::GovernOutcome(const std::string& destination_id, uint64_t job_id,
                               const Outcome& outcome) {
  const std::shared_ptr<const Routing> routing = routing_.Get();
  const hookrelay::v1::Destination* destination = routing->FindDestination(destination_id);
  const hookrelay::v1::DeliveryOptions options =
      destination != nullptr ? destination->options() : hookrelay::v1::DeliveryOptions();
  if (governor_.OnOutcome(destination_id, options, job_id, outcome)) {
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

size_t Dispatcher::ApplyOutcomes(const google::protobuf::RepeatedPtrField<Outcome>& outcomes,
                                 std::string_view deliverer_id) {
  // Every job the outcomes settle: an outcome's own, then those it settles alike.
  struct Settled {
    const Outcome* outcome;
    uint64_t job_id;
    uint64_t lease;
  };
  std::vector<Settled> settled;
  settled.reserve(static_cast<size_t>(outcomes.size()));
  for (const Outcome& outcome : outcomes) {
    settled.push_back({&outcome, outcome.job_id(), outcome.lease()});
    if (outcome.also_job_ids_size() != outcome.also_leases_size()) {
      // A broken deliverer: the jobs without a lease come back when their leases end.
      static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 3);
      common::LogRateLimited(*limiter, common::LogLevel::kError, "applying an outcome failed",
                             {{"deliverer", deliverer_id},
                              {"job_id", outcome.job_id()},
                              {"error", absl::StrCat(outcome.also_job_ids_size(),
                                                     " also_job_ids but ",
                                                     outcome.also_leases_size(),
                                                     " also_leases")}});
    }
    const int also = std::min(outcome.also_job_ids_size(), outcome.also_leases_size());
    for (int i = 0; i < also; ++i) {
      settled.push_back({&outcome, outcome.also_job_ids(i), outcome.also_leases(i)});
    }
  }
  // One lock for the batch: take each job's entry and, for a customer job, count the outcome.
  std::vector<InFlight> jobs(settled.size());
  {
    absl::MutexLock lock(&stats_mu_);
    for (size_t i = 0; i < settled.size(); ++i) {
      auto it = in_flight_.find(settled[i].job_id);
      if (it == in_flight_.end()) continue;
      jobs[i] = std::move(it->second);
      if (jobs[i].stream != nullptr) lease_ends_.erase({jobs[i].deadline, settled[i].job_id});
      in_flight_.erase(it);
      if (!jobs[i].test) CountOutcomeLocked(jobs[i].destination_id, *settled[i].outcome);
    }
  }
  std::vector<Settlement> batch;
  batch.reserve(jobs.size());
  // Per settlement: the outcome's counter and job id, for the callback.
  struct Sent {
    prometheus::Counter* counter;
    uint64_t job_id;
  };
  std::vector<Sent> sent;
  sent.reserve(jobs.size());
  for (size_t i = 0; i < settled.size(); ++i) {
    const Outcome& outcome = *settled[i].outcome;
    const uint64_t job_id = settled[i].job_id;
    const uint64_t lease = settled[i].lease;
    InFlight& job = jobs[i];
    if (job.test) {
      // Test jobs end with their first outcome.
      absl::Status st = store_.Complete(job_id, lease);
      if (!st.ok() && !absl::IsNotFound(st) && !absl::IsFailedPrecondition(st)) {
        common::LogWarning("removing a test job failed",
                           {{"job_id", job_id}, {"error", st.ToString()}});
      }
      if (options_.on_test_outcome) options_.on_test_outcome(job.message_id, outcome);
      continue;
    }
    if (!job.destination_id.empty()) GovernOutcome(job.destination_id, job_id, outcome);
    switch (outcome.kind()) {
      case Outcome::DELIVERED:
        batch.push_back(Settlement::Complete(job_id, lease));
        sent.push_back({metrics_.delivered, job_id});
        break;
      case Outcome::RETRY:
        // A time outside Timestamp's range (a broken deliverer) means: due now.
        batch.push_back(Settlement::Retry(
            job_id, lease,
            common::FromProtoTime(outcome.not_before()).value_or(absl::InfinitePast()),
            outcome.attempt()));
        sent.push_back({metrics_.retried, job_id});
        break;
      case Outcome::DEAD:
        batch.push_back(Settlement::Bury(job_id, lease, outcome.reason(), outcome.attempt()));
        sent.push_back({metrics_.dead, job_id});
        break;
      default:
        common::LogError("applying an outcome failed",
                         {{"deliverer", deliverer_id},
                          {"job_id", job_id},
                          {"error", absl::StrCat("outcome kind ", outcome.kind())}});
        break;
    }
  }
  if (batch.empty()) return settled.size();
  // The callback may run on a store thread after this returns: it uses only the metrics (owned
  // by the registry, which outlives the store) and what it captured.
  store_.Settle(std::move(batch), [stale = metrics_.stale, sent = std::move(sent),
                                   deliverer = std::string(deliverer_id)](
                                      std::vector<absl::Status> statuses) {
    for (size_t i = 0; i < statuses.size() && i < sent.size(); ++i) {
      const absl::Status& st = statuses[i];
      if (st.ok()) {
        if (sent[i].counter) sent[i].counter->Increment();
        continue;
      }
      if (absl::IsFailedPrecondition(st) || absl::IsNotFound(st)) {
        // The lease expired (the deliverer was too slow, or the collector restarted): the job
        // was or will be handed out again; this late outcome is dropped.
        if (stale) stale->Increment();
        static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 3);
        common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                               "outcome for an expired lease ignored",
                               {{"deliverer", deliverer},
                                {"job_id", sent[i].job_id},
                                {"error", st.message()}});
        continue;
      }
      if (absl::IsUnavailable(st)) {
        // The store could not take it now (JetStream: cut off from the cluster): the job comes
        // back when its lease ends, unless it was deleted meanwhile.
        static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 3);
        common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                               "outcome not stored: the job is handed out again",
                               {{"deliverer", deliverer},
                                {"job_id", sent[i].job_id},
                                {"error", st.message()}});
        continue;
      }
      common::LogError("applying an outcome failed", {{"deliverer", deliverer},
                                                      {"job_id", sent[i].job_id},
                                                      {"error", st.ToString()}});
    }
  });
  return settled.size();
}

void Dispatcher::Shutdown() {
  std::vector<std::shared_ptr<DeliveryStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    for (const auto& [key, s] : streams_) streams.push_back(s);
  }
  hold_signal_.Stop();
  if (thread_.joinable()) thread_.join();
  // Let outcomes of jobs already sent arrive (reads continue; nothing new is sent).
  const absl::Time deadline = absl::Now() + options_.drain_timeout;
  for (const auto& s : streams) {
    // Real time: the outcomes travel over the network from deliverers.
    while (s->held() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  }
  for (const auto& s : streams) {
    s->RequestFinish(absl::UnavailableError("collector shutting down"));
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
