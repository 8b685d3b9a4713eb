// Per-destination admission control for the dispatcher: an adaptive concurrency limit, a token
// bucket (DeliveryOptions.rate_limit_per_second) and a circuit breaker
// (DeliveryOptions.circuit_breaker), so that one slow or failing receiver cannot take the credits
// of the others (docs/DESIGN.md, "Per-destination fairness and protection").
//
// The dispatcher leases each destination's jobs within its HeadroomFor() (the store's lease
// budget): a destination at its limits is not asked, and its jobs stay queued, unwritten. It
// then asks Admit() for every leased customer job before sending it. A job refused all the same
// (the headroom moved between the two, or the store could not tell the job's destination) is put
// back in the store without counting an attempt (JobQueue::Retry with an empty Attempt), due at
// the returned time: refusals of one destination are spread out (one every interval after the
// previous refusal, at most kMaxDeferral ahead), so a backlog comes back at the pace the
// destination can take, not all at once.
//
// Concurrency: jobs admitted and not yet settled (OnOutcome, or their lease deadline passed) are
// the destination's in-flight jobs. The limit is AIMD driven by outcomes, as in
// Netflix's concurrency-limits AIMDLimit, with a latency gradient as the drop signal (Envoy's
// adaptive concurrency filter): a retryable failure, or a delivered attempt slower than
// `tolerance` × the destination's minimum latency of the last two windows (and 100 ms more than
// it), multiplies the limit by `backoff_ratio`; any other delivery while at least half the limit
// is in use adds 1. On top of it, while other destinations have work (a job admitted or refused
// within `active_window`, or in flight), each gets at most an equal share of the capacity the
// deliverers granted (their credits), so a receiver that is slow from the start — whose latency
// never rises — still leaves the others their share; alone, a destination may use all of it, or
// 3/4 when its smoothed latency is at least `headroom_latency` (the rest keeps leasing going, so
// that jobs of others queued behind a slow backlog are seen).
//
// Rate: a token bucket per destination holding at most one second of tokens, refilled on the
// injected clock, divided by `rate_divisor` (collectors sharing the work).
//
// Circuit breaker: closed → open after `failures` consecutive retryable failures (a delivery
// resets the count; permanent failures count neither way); open for `pause_ms` → half-open at
// the first Admit after that: one probe job is admitted, the others refused until its outcome;
// a delivery closes the breaker (pause back to `pause_ms`), a failure opens it again for twice
// the last pause, at most `max_pause_ms`. A probe whose lease expires without an outcome lets
// the next job probe.
//
// Thread-safe. Time only from the injected clock.
#ifndef HOOKRELAY_COLLECTOR_DISPATCH_DESTINATION_GOVERNOR_H_
#define HOOKRELAY_COLLECTOR_DISPATCH_DESTINATION_GOVERNOR_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "hookrelay/v1/collector.pb.h"
#include "hookrelay/v1/config.pb.h"

namespace prometheus {
class Counter;
class Gauge;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace hookrelay::collector {

class DestinationGovernor {
 public:
  struct Options {
    // A new destination starts unconstrained (the credits bound it); drops shrink it.
    double initial_limit = 1000;
    double min_limit = 2;
    double max_limit = 1000;
    double backoff_ratio = 0.9;
    // A delivery slower than tolerance × the minimum latency (and by 100 ms) is a drop.
    double tolerance = 2.0;
    // The minimum latency is the smallest of the current and the previous window.
    absl::Duration latency_window = absl::Seconds(30);
    // A destination with a job admitted or refused this recently competes for the fair share.
    absl::Duration active_window = absl::Seconds(1);
    // A destination this slow (smoothed latency) may hold 3/4 of the credits when alone.
    absl::Duration headroom_latency = absl::Milliseconds(250);
  };

  enum class Verdict { kAdmit, kConcurrency, kRateLimit, kCircuitOpen };
  struct Admission {
    Verdict verdict = Verdict::kAdmit;
    // When refused: when the job should be due again.
    absl::Time retry_at = absl::InfinitePast();
  };

  enum class Circuit { kClosed = 0, kOpen = 1, kHalfOpen = 2 };
  struct State {
    int64_t limit = 0;  // the adaptive limit (before the fair share)
    int64_t in_flight = 0;
    Circuit circuit = Circuit::kClosed;
    int consecutive_failures = 0;
  };

  // Refusals are spread at most this far ahead of now: a backlog beyond that many minutes of the
  // destination's pace is put back again every kMaxDeferral (one store write per job each time).
  static constexpr absl::Duration kMaxDeferral = absl::Minutes(10);
  // The window the completion rate is measured over.
  static constexpr absl::Duration kRateWindow = absl::Milliseconds(200);

  // `registry` may be null; `clock` must outlive the governor.
  DestinationGovernor(Options options, const common::Clock& clock,
                      prometheus::Registry* registry);

  // Whether job `job_id` of `destination` may be sent now under a lease ending at `deadline`.
  // `capacity`: the credits all connected deliverers granted (held + available); `rate_divisor`
  // (≥ 1): how many collectors share the destination's rate limit.
  // `within_headroom`: the job was leased within a HeadroomFor of this pass, whose concurrency
  // answer stands (the fair share may have moved since, as other destinations were asked: the
  // next pass follows it, rather than this job being put back).
  Admission Admit(const std::string& destination, const hookrelay::v1::DeliveryOptions& options,
                  uint64_t job_id, absl::Time deadline, int64_t capacity, int rate_divisor = 1,
                  bool within_headroom = false);

  // How many jobs of `destination` Admit would take now (the dispatcher's lease budget, so that
  // jobs it would refuse stay queued in the store), and, when none, the time that may change
  // without an outcome (the circuit's pause ending, a token, a probe's lease running out;
  // InfiniteFuture when only an outcome can). Marks the destination active (it has jobs
  // waiting) for the fair share. Same arguments as Admit.
  struct Headroom {
    size_t jobs = 0;
    absl::Time wake_at = absl::InfiniteFuture();
  };
  Headroom HeadroomFor(const std::string& destination,
                       const hookrelay::v1::DeliveryOptions& options, int64_t capacity,
                       int rate_divisor = 1);

  // The outcome of an admitted job: its latency and kind drive the limit and the breaker.
  // `options` are the destination's current ones (its breaker settings). Returns true when this
  // outcome opened the breaker (for a log line). `job_id`: the job it settles (one of those a
  // grouped outcome names); the outcome's own without it.
  bool OnOutcome(const std::string& destination, const hookrelay::v1::DeliveryOptions& options,
                 uint64_t job_id, const hookrelay::v1::Outcome& outcome);
  bool OnOutcome(const std::string& destination, const hookrelay::v1::DeliveryOptions& options,
                 const hookrelay::v1::Outcome& outcome) {
    return OnOutcome(destination, options, outcome.job_id(), outcome);
  }

  // An admitted job's lease was extended: its slot stays taken until `deadline`.
  void ExtendInFlight(const std::string& destination, uint64_t job_id, absl::Time deadline);

  State Get(const std::string& destination) const;
  static const char* CircuitName(Circuit circuit);

 private:
  struct Dest {
    double limit = 0;
    absl::flat_hash_map<uint64_t, absl::Time> in_flight;  // job id → lease deadline
    // No in-flight entry expires before this (pruning scans only once it has passed).
    absl::Time earliest_deadline = absl::InfiniteFuture();
    // Latency minimum: this window's and the previous one's.
    absl::Duration min_current = absl::InfiniteDuration();
    absl::Duration min_previous = absl::InfiniteDuration();
    absl::Time window_start = absl::InfinitePast();
    absl::Duration latency_ewma = absl::Milliseconds(100);
    // When the limit was last cut: an outcome of an attempt started before it says nothing new
    // (one cut per round trip, as TCP does, so one burst of slow answers is one cut, not fifty).
    absl::Time last_decrease = absl::InfinitePast();
    // Outcomes per second, measured over windows of kRateWindow: the pace refusals are spread
    // at (Little's law on a stale latency and a fresh limit would strand a backlog).
    double completion_rate = 0;
    int64_t window_outcomes = 0;
    absl::Time rate_window_start = absl::InfinitePast();
    absl::Time last_active = absl::InfinitePast();
    // Where the next refusal is spread to.
    absl::Time defer_cursor = absl::InfinitePast();
    // Token bucket.
    double tokens = -1;  // < 0: not started (full)
    absl::Time refilled_at = absl::InfinitePast();
    // Breaker.
    Circuit circuit = Circuit::kClosed;
    int consecutive_failures = 0;
    absl::Time open_until = absl::InfinitePast();
    absl::Duration pause = absl::ZeroDuration();  // the last pause (0: none yet)
    uint64_t probe_job = 0;
    absl::Time probe_deadline = absl::InfinitePast();
    prometheus::Gauge* limit_gauge = nullptr;
    prometheus::Gauge* circuit_gauge = nullptr;
  };

  Dest& GetLocked(const std::string& destination) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The adaptive limit, capped by the fair share of `capacity` among active destinations.
  int64_t ConcurrencyLimitLocked(const Dest& d, absl::Time now, int64_t capacity) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops in-flight entries whose lease passed.
  void PruneLocked(Dest& d, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time DeferLocked(Dest& d, absl::Time earliest, absl::Duration interval, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetCircuitLocked(Dest& d, Circuit c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OpenLocked(Dest& d, const hookrelay::v1::DeliveryOptions& options, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const common::Clock& clock_;
  prometheus::Family<prometheus::Gauge>* limit_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* circuit_family_ = nullptr;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Dest> dests_ ABSL_GUARDED_BY(mu_);
};

// Effective circuit breaker settings (defaults filled in); failures == 0 means no breaker.
hookrelay::v1::CircuitBreaker EffectiveBreaker(const hookrelay::v1::DeliveryOptions& options);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_DISPATCH_DESTINATION_GOVERNOR_H_
