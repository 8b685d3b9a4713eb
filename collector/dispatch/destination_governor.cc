#include "collector/dispatch/destination_governor.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/config_validate.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace hookrelay::collector {

using hookrelay::v1::DeliveryOptions;
using hookrelay::v1::Outcome;

hookrelay::v1::CircuitBreaker EffectiveBreaker(const DeliveryOptions& options) {
  hookrelay::v1::CircuitBreaker b = options.circuit_breaker();
  if (b.failures() == 0) return b;
  if (b.pause_ms() == 0) b.set_pause_ms(common::kDefaultBreakerPauseMs);
  if (b.max_pause_ms() == 0) b.set_max_pause_ms(common::kDefaultBreakerMaxPauseMs);
  return b;
}

DestinationGovernor::DestinationGovernor(Options options, const common::Clock& clock,
                                         prometheus::Registry* registry)
    : options_(options), clock_(clock) {
  if (registry != nullptr) {
    limit_family_ = &prometheus::BuildGauge()
                         .Name("hookrelay_destination_concurrency_limit")
                         .Help("The adaptive concurrency limit of a destination on this "
                               "collector: jobs it may have in flight at once.")
                         .Register(*registry);
    circuit_family_ = &prometheus::BuildGauge()
                           .Name("hookrelay_destination_circuit_state")
                           .Help("A destination's circuit breaker: 0 closed, 1 open, 2 half-open.")
                           .Register(*registry);
  }
}

const char* DestinationGovernor::CircuitName(Circuit circuit) {
  switch (circuit) {
    case Circuit::kClosed:
      return "closed";
    case Circuit::kOpen:
      return "open";
    case Circuit::kHalfOpen:
      return "half_open";
  }
  return "closed";
}

DestinationGovernor::Dest& DestinationGovernor::GetLocked(const std::string& destination) {
  auto [it, inserted] = dests_.try_emplace(destination);
  Dest& d = it->second;
  if (inserted) {
    d.limit = options_.initial_limit;
    if (limit_family_ != nullptr) {
      d.limit_gauge = &limit_family_->Add({{"destination", destination}});
      d.limit_gauge->Set(d.limit);
    }
    if (circuit_family_ != nullptr) {
      d.circuit_gauge = &circuit_family_->Add({{"destination", destination}});
      d.circuit_gauge->Set(0);
    }
  }
  return d;
}

void DestinationGovernor::PruneLocked(Dest& d, absl::Time now) {
  if (now < d.earliest_deadline) return;
  d.earliest_deadline = absl::InfiniteFuture();
  for (auto it = d.in_flight.begin(); it != d.in_flight.end();) {
    if (it->second <= now) {
      d.in_flight.erase(it++);
    } else {
      d.earliest_deadline = std::min(d.earliest_deadline, it->second);
      ++it;
    }
  }
}

absl::Time DestinationGovernor::DeferLocked(Dest& d, absl::Time earliest,
                                            absl::Duration interval, absl::Time now) {
  // One refused job per interval after the previous one: a backlog comes back at the pace the
  // destination takes jobs, never more than kMaxDeferral ahead (then it is refused again).
  absl::Time at = std::max(d.defer_cursor + interval, earliest);
  at = std::min(at, now + kMaxDeferral);
  d.defer_cursor = at;
  return at;
}

void DestinationGovernor::SetCircuitLocked(Dest& d, Circuit c) {
  d.circuit = c;
  if (d.circuit_gauge != nullptr) d.circuit_gauge->Set(static_cast<double>(c));
}

void DestinationGovernor::OpenLocked(Dest& d, const DeliveryOptions& options, absl::Time now) {
  const hookrelay::v1::CircuitBreaker b = EffectiveBreaker(options);
  d.pause = d.pause == absl::ZeroDuration()
                ? absl::Milliseconds(b.pause_ms())
                : std::min(d.pause * 2, absl::Milliseconds(b.max_pause_ms()));
  d.open_until = now + d.pause;
  d.probe_job = 0;
  SetCircuitLocked(d, Circuit::kOpen);
}

DestinationGovernor::Admission DestinationGovernor::Admit(const std::string& destination,
                                                          const DeliveryOptions& options,
                                                          uint64_t job_id, absl::Time deadline,
                                                          int64_t capacity, int rate_divisor,
                                                          bool within_headroom) {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  Dest& d = GetLocked(destination);
  d.last_active = now;
  PruneLocked(d, now);
  if (d.defer_cursor < now) d.defer_cursor = now;

  // 1. The breaker.
  if (EffectiveBreaker(options).failures() == 0 && d.circuit != Circuit::kClosed) {
    SetCircuitLocked(d, Circuit::kClosed);  // the breaker was removed from the options
    d.pause = absl::ZeroDuration();
    d.consecutive_failures = 0;
  }
  bool probe = false;
  if (d.circuit == Circuit::kOpen) {
    if (now < d.open_until) {
      return {Verdict::kCircuitOpen,
              DeferLocked(d, d.open_until, absl::Milliseconds(10), now)};
    }
    SetCircuitLocked(d, Circuit::kHalfOpen);
  }
  if (d.circuit == Circuit::kHalfOpen) {
    const bool probe_out = d.probe_job != 0 && d.probe_deadline > now;
    if (probe_out) {
      return {Verdict::kCircuitOpen, DeferLocked(d, now + absl::Milliseconds(100),
                                                 absl::Milliseconds(10), now)};
    }
    probe = true;
  }

  // 2. Concurrency: the adaptive limit, and the fair share while others have work.
  const int64_t limit = ConcurrencyLimitLocked(d, now, capacity);
  const bool already = d.in_flight.contains(job_id);
  if (!already && !within_headroom && static_cast<int64_t>(d.in_flight.size()) >= limit) {
    // At its limit, a slot frees at the destination's measured completion rate (before one is
    // measured: about every latency / limit).
    const absl::Duration pace = d.completion_rate > 0
                                    ? absl::Seconds(1.0 / d.completion_rate)
                                    : d.latency_ewma / static_cast<double>(limit);
    const absl::Duration interval =
        std::clamp(pace, absl::Microseconds(10), absl::Seconds(1));
    return {Verdict::kConcurrency, DeferLocked(d, now + interval, interval, now)};
  }

  // 3. The rate limit.
  if (options.rate_limit_per_second() > 0) {
    const double rate = static_cast<double>(options.rate_limit_per_second()) /
                        static_cast<double>(std::max(1, rate_divisor));
    const double burst = std::max(1.0, rate);
    if (d.tokens < 0) {
      d.tokens = burst;
    } else {
      d.tokens = std::min(burst, d.tokens + absl::ToDoubleSeconds(now - d.refilled_at) * rate);
    }
    d.refilled_at = now;
    if (d.tokens < 1.0 - 1e-9) {
      const absl::Duration interval = absl::Seconds(1.0 / rate);
      const absl::Time next_token = now + absl::Seconds((1.0 - d.tokens) / rate);
      return {Verdict::kRateLimit, DeferLocked(d, next_token, interval, now)};
    }
    d.tokens -= 1.0;
  } else {
    d.tokens = -1;
  }

  d.in_flight[job_id] = deadline;
  d.earliest_deadline = std::min(d.earliest_deadline, deadline);
  if (probe) {
    d.probe_job = job_id;
    d.probe_deadline = deadline;
  }
  return {Verdict::kAdmit, absl::InfinitePast()};
}

int64_t DestinationGovernor::ConcurrencyLimitLocked(const Dest& d, absl::Time now,
                                                    int64_t capacity) const {
  int active = 0;
  for (const auto& [id, other] : dests_) {
    if (!other.in_flight.empty() || now - other.last_active < options_.active_window) ++active;
  }
  int64_t limit = std::max<int64_t>(1, static_cast<int64_t>(d.limit));
  if (capacity > 0) {
    // Alone and slow, 3/4 of the credits: the rest keeps credits free for the jobs of other
    // destinations that arrive meanwhile. A fast one alone is bounded by the credits only.
    const int64_t share = active > 1 ? capacity / active
                          : d.latency_ewma >= options_.headroom_latency ? capacity * 3 / 4
                                                                        : capacity;
    limit = std::min(limit, std::max<int64_t>(static_cast<int64_t>(options_.min_limit), share));
  }
  return limit;
}

DestinationGovernor::Headroom DestinationGovernor::HeadroomFor(
    const std::string& destination, const DeliveryOptions& options, int64_t capacity,
    int rate_divisor) {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  Dest& d = GetLocked(destination);
  d.last_active = now;  // Asked because it has jobs waiting: it competes for the fair share.
  PruneLocked(d, now);
  Headroom room;
  // 1. The breaker: open, nothing until the pause ends; half-open, one probe at a time.
  const bool breaker = EffectiveBreaker(options).failures() > 0;
  if (breaker && d.circuit == Circuit::kOpen && now < d.open_until) {
    room.wake_at = d.open_until;
    return room;
  }
  int64_t jobs = INT64_MAX;
  if (breaker && d.circuit != Circuit::kClosed) {
    if (d.probe_job != 0 && d.probe_deadline > now && d.circuit == Circuit::kHalfOpen) {
      room.wake_at = d.probe_deadline;  // Or the probe's outcome, which wakes the dispatcher.
      return room;
    }
    jobs = 1;
  }
  // 2. Concurrency (an outcome frees a slot and wakes the dispatcher; so does a lease running
  // out, through the store's ready signal).
  const int64_t limit = ConcurrencyLimitLocked(d, now, capacity);
  jobs = std::min(jobs, std::max<int64_t>(0, limit - static_cast<int64_t>(d.in_flight.size())));
  if (jobs == 0) {
    room.wake_at = d.earliest_deadline;
    return room;
  }
  // 3. The rate limit: whole tokens in the bucket (refilled as Admit refills it).
  if (options.rate_limit_per_second() > 0) {
    const double rate = static_cast<double>(options.rate_limit_per_second()) /
                        static_cast<double>(std::max(1, rate_divisor));
    const double burst = std::max(1.0, rate);
    const double tokens =
        d.tokens < 0 ? burst
                     : std::min(burst, d.tokens + absl::ToDoubleSeconds(now - d.refilled_at) * rate);
    const auto whole = static_cast<int64_t>(tokens + 1e-9);
    jobs = std::min(jobs, whole);
    if (jobs == 0) {
      room.wake_at = now + absl::Seconds((1.0 - tokens) / rate);
      return room;
    }
  }
  room.jobs = static_cast<size_t>(jobs);
  return room;
}

void DestinationGovernor::ExtendInFlight(const std::string& destination, uint64_t job_id,
                                         absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto d = dests_.find(destination);
  if (d == dests_.end()) return;
  auto it = d->second.in_flight.find(job_id);
  if (it == d->second.in_flight.end()) return;
  it->second = std::max(it->second, deadline);
  // earliest_deadline only ever errs early: a prune then finds nothing to drop.
}

namespace {

// A retryable failure: no URL delivered and the outcome is a retry, or a dead letter whose
// every URL failed with a 5xx / 429 / transport error (the retry window was exhausted).
bool IsRetryableFailure(const Outcome& outcome) {
  if (outcome.kind() == Outcome::RETRY) return true;
  if (outcome.kind() != Outcome::DEAD || outcome.attempt().urls_size() == 0) return false;
  for (const auto& u : outcome.attempt().urls()) {
    const bool retryable =
        !u.error().empty() || u.status() >= 500 || u.status() == 429 || u.status() == 0;
    if (!retryable) return false;
  }
  return true;
}

// The attempt's latency: its slowest URL (0 when none reported one).
absl::Duration AttemptLatency(const Outcome& outcome) {
  int64_t ms = 0;
  for (const auto& u : outcome.attempt().urls()) ms = std::max<int64_t>(ms, u.latency_ms());
  return absl::Milliseconds(ms);
}

}  // namespace

bool DestinationGovernor::OnOutcome(const std::string& destination,
                                    const DeliveryOptions& options, uint64_t job_id,
                                    const Outcome& outcome) {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  auto it = dests_.find(destination);
  if (it == dests_.end()) return false;
  Dest& d = it->second;
  const size_t in_use = d.in_flight.size();
  d.in_flight.erase(job_id);
  const bool was_probe = d.probe_job != 0 && d.probe_job == job_id;
  if (was_probe) d.probe_job = 0;

  const bool failure = IsRetryableFailure(outcome);
  const bool delivered = outcome.kind() == Outcome::DELIVERED;
  const absl::Duration latency = AttemptLatency(outcome);

  // The latency baseline.
  if (now - d.window_start >= options_.latency_window) {
    d.min_previous = d.min_current;
    d.min_current = absl::InfiniteDuration();
    d.window_start = now;
  }
  bool slow = false;
  if (delivered && latency > absl::ZeroDuration()) {
    const absl::Duration baseline = std::min(d.min_current, d.min_previous);
    slow = baseline != absl::InfiniteDuration() && latency > baseline * options_.tolerance &&
           latency > baseline + absl::Milliseconds(100);
    d.min_current = std::min(d.min_current, latency);
    d.latency_ewma = d.latency_ewma * 0.8 + latency * 0.2;
  } else if (failure && latency > absl::ZeroDuration()) {
    d.latency_ewma = d.latency_ewma * 0.8 + latency * 0.2;
  }

  // The completion rate.
  if (d.rate_window_start == absl::InfinitePast()) d.rate_window_start = now;
  ++d.window_outcomes;
  if (const absl::Duration elapsed = now - d.rate_window_start; elapsed >= kRateWindow) {
    const double rate = static_cast<double>(d.window_outcomes) / absl::ToDoubleSeconds(elapsed);
    // A window after a pause (nothing in flight) measures the pause, not the destination.
    if (in_use > 0 && elapsed < kRateWindow * 5) {
      d.completion_rate = d.completion_rate > 0 ? 0.5 * d.completion_rate + 0.5 * rate : rate;
    }
    d.window_outcomes = 0;
    d.rate_window_start = now;
  }

  // AIMD: at most one cut per round trip (the attempt began after the previous cut).
  if (failure || slow) {
    if (now - latency >= d.last_decrease) {
      d.limit = std::max(options_.min_limit, d.limit * options_.backoff_ratio);
      d.last_decrease = now;
    }
  } else if (delivered && static_cast<double>(in_use) * 2 >= d.limit) {
    d.limit = std::min(options_.max_limit, d.limit + 1);
  }
  if (d.limit_gauge != nullptr) d.limit_gauge->Set(std::floor(d.limit));

  // The breaker.
  const hookrelay::v1::CircuitBreaker b = EffectiveBreaker(options);
  if (delivered) {
    d.consecutive_failures = 0;
    if (d.circuit != Circuit::kClosed) SetCircuitLocked(d, Circuit::kClosed);
    d.pause = absl::ZeroDuration();
    return false;
  }
  if (!failure || b.failures() == 0) return false;
  ++d.consecutive_failures;
  if (d.circuit == Circuit::kHalfOpen && was_probe) {
    OpenLocked(d, options, now);
    return true;
  }
  if (d.circuit == Circuit::kClosed &&
      d.consecutive_failures >= static_cast<int>(b.failures())) {
    OpenLocked(d, options, now);
    return true;
  }
  return false;
}

DestinationGovernor::State DestinationGovernor::Get(const std::string& destination) const {
  absl::MutexLock lock(&mu_);
  auto it = dests_.find(destination);
  State s;
  if (it == dests_.end()) {
    s.limit = static_cast<int64_t>(options_.initial_limit);
    return s;
  }
  const absl::Time now = clock_.Now();
  s.limit = static_cast<int64_t>(it->second.limit);
  for (const auto& [job, deadline] : it->second.in_flight) {
    if (deadline > now) ++s.in_flight;
  }
  s.circuit = it->second.circuit;
  if (s.circuit == Circuit::kOpen && now >= it->second.open_until) s.circuit = Circuit::kHalfOpen;
  s.consecutive_failures = it->second.consecutive_failures;
  return s;
}

}  // namespace hookrelay::collector
