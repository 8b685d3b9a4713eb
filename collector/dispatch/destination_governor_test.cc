#include "collector/dispatch/destination_governor.h"

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/collector.pb.h"
#include "hookrelay/v1/config.pb.h"
#include "prometheus/registry.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::DeliveryOptions;
using hookrelay::v1::Outcome;
using Verdict = DestinationGovernor::Verdict;
using Circuit = DestinationGovernor::Circuit;

constexpr absl::Duration kLease = absl::Seconds(90);

Outcome Delivered(uint64_t job, int latency_ms) {
  Outcome o;
  o.set_job_id(job);
  o.set_kind(Outcome::DELIVERED);
  auto* u = o.mutable_attempt()->add_urls();
  u->set_status(200);
  u->set_latency_ms(latency_ms);
  return o;
}

Outcome Failed(uint64_t job, int status = 503) {
  Outcome o;
  o.set_job_id(job);
  o.set_kind(Outcome::RETRY);
  auto* u = o.mutable_attempt()->add_urls();
  u->set_status(status);
  u->set_latency_ms(5);
  return o;
}

class DestinationGovernorTest : public ::testing::Test {
 protected:
  DestinationGovernor::Admission Admit(const std::string& dest, uint64_t job,
                                       const DeliveryOptions& options = DeliveryOptions(),
                                       int64_t capacity = 256) {
    return governor_.Admit(dest, options, job, clock_.Now() + kLease, capacity);
  }

  common::ManualClock clock_{absl::FromUnixSeconds(1'800'000'000)};
  prometheus::Registry registry_;
  DestinationGovernor governor_{DestinationGovernor::Options(), clock_, &registry_};
};

// A destination whose latency rises well above its baseline gets a smaller limit, and its jobs
// beyond it are refused, while a fast destination beside it keeps being admitted.
TEST_F(DestinationGovernorTest, AdaptiveLimitShrinksForASlowDestinationAndAFastOneKeepsFlowing) {
  DestinationGovernor::Options options;
  options.initial_limit = 20;
  DestinationGovernor governor(options, clock_, nullptr);
  auto admit = [&](const std::string& dest, uint64_t id) {
    return governor.Admit(dest, {}, id, clock_.Now() + kLease, 256);
  };
  uint64_t job = 1;
  // Fast at first: the limit grows while in use.
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 15; ++i) {
      ASSERT_EQ(admit("slow", job + i).verdict, Verdict::kAdmit);
    }
    for (int i = 0; i < 15; ++i) governor.OnOutcome("slow", {}, Delivered(job + i, 10));
    job += 15;
    clock_.Advance(absl::Milliseconds(50));
  }
  const int64_t before = governor.Get("slow").limit;
  EXPECT_GT(before, 20);
  // Now the receiver answers in 2 s: each slow answer sent after the previous cut is a drop.
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(admit("slow", job).verdict, Verdict::kAdmit);
    clock_.Advance(absl::Seconds(2));
    governor.OnOutcome("slow", {}, Delivered(job++, 2000));
  }
  const int64_t after = governor.Get("slow").limit;
  EXPECT_LT(after, before / 2);
  // Fill the slow destination to its limit: the next job is refused and put back later.
  int admitted = 0;
  for (int i = 0; i < 1000; ++i) {
    if (admit("slow", job++).verdict != Verdict::kAdmit) break;
    ++admitted;
  }
  EXPECT_EQ(admitted, after);
  const DestinationGovernor::Admission refused = admit("slow", job++);
  EXPECT_EQ(refused.verdict, Verdict::kConcurrency);
  EXPECT_GT(refused.retry_at, clock_.Now());
  // The fast destination is unaffected.
  for (int i = 0; i < 15; ++i) EXPECT_EQ(admit("fast", job++).verdict, Verdict::kAdmit);
}

// Slow answers to attempts that were all sent before the limit was cut are one congestion
// episode: one cut, not one per answer (else a single burst collapses the limit to its floor).
TEST_F(DestinationGovernorTest, OneCutPerRoundTrip) {
  DestinationGovernor::Options options;
  options.initial_limit = 100;
  DestinationGovernor governor(options, clock_, nullptr);
  uint64_t job = 1;
  for (int i = 0; i < 5; ++i) {  // the baseline: 10 ms
    ASSERT_EQ(governor.Admit("d", {}, job, clock_.Now() + kLease, 256).verdict, Verdict::kAdmit);
    clock_.Advance(absl::Milliseconds(10));
    governor.OnOutcome("d", {}, Delivered(job++, 10));
  }
  const int64_t before = governor.Get("d").limit;
  // 40 attempts sent together, all answered in 2 s.
  const uint64_t first = job;
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(governor.Admit("d", {}, job++, clock_.Now() + kLease, 256).verdict,
              Verdict::kAdmit);
  }
  clock_.Advance(absl::Seconds(2));
  for (uint64_t j = first; j < job; ++j) governor.OnOutcome("d", {}, Delivered(j, 2000));
  const int64_t after_burst = governor.Get("d").limit;
  EXPECT_EQ(after_burst, static_cast<int64_t>(before * options.backoff_ratio));
  // An attempt sent after that cut and slow again: the next cut.
  ASSERT_EQ(governor.Admit("d", {}, job, clock_.Now() + kLease, 256).verdict, Verdict::kAdmit);
  clock_.Advance(absl::Seconds(2));
  governor.OnOutcome("d", {}, Delivered(job++, 2000));
  EXPECT_LT(governor.Get("d").limit, after_burst);
}

// Refused jobs come back at the pace the destination completes jobs (measured), not at
// latency / limit: after the limit was cut while answers were slow, that estimate would be 100×
// too slow and strand the backlog in the store.
TEST_F(DestinationGovernorTest, RefusalsAreSpreadAtTheMeasuredCompletionRate) {
  DestinationGovernor::Options options;
  options.initial_limit = 10;
  options.max_limit = 10;
  DestinationGovernor governor(options, clock_, nullptr);
  auto admit = [&](uint64_t id) {
    return governor.Admit("d", {}, id, clock_.Now() + kLease, 256);
  };
  uint64_t job = 1;
  uint64_t oldest = job;
  for (int i = 0; i < 10; ++i) ASSERT_EQ(admit(job++).verdict, Verdict::kAdmit);
  // Answers take 1 s each, and one completes every millisecond (10 in flight... and a receiver
  // that pipelines): 1,000 jobs per second, whatever latency / limit says (100 ms apart).
  for (int i = 0; i < 600; ++i) {
    clock_.Advance(absl::Milliseconds(1));
    governor.OnOutcome("d", {}, Delivered(oldest++, 1000));
    ASSERT_EQ(admit(job++).verdict, Verdict::kAdmit);
  }
  const DestinationGovernor::Admission a = admit(job++);
  const DestinationGovernor::Admission b = admit(job++);
  ASSERT_EQ(a.verdict, Verdict::kConcurrency);
  ASSERT_EQ(b.verdict, Verdict::kConcurrency);
  EXPECT_GE(b.retry_at - a.retry_at, absl::Microseconds(900));
  EXPECT_LE(b.retry_at - a.retry_at, absl::Microseconds(1100));
  EXPECT_LE(a.retry_at - clock_.Now(), absl::Microseconds(1100));
}

// A receiver slow from the start (no latency rise) still gets no more than an equal share of the
// deliverers' credits while another destination has work; alone, it may use them all.
TEST_F(DestinationGovernorTest, FairShareCapsADestinationOnlyWhileOthersHaveWork) {
  DestinationGovernor::Options options;
  options.initial_limit = 200;
  DestinationGovernor governor(options, clock_, nullptr);
  uint64_t job = 1;
  // Alone: 100 jobs (all the credits) are admitted.
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(governor.Admit("slow", {}, job++, clock_.Now() + kLease, 100).verdict,
              Verdict::kAdmit);
  }
  clock_.Advance(absl::Seconds(5));  // "slow" still holds its 100 jobs in flight
  // Another destination shows up: it is admitted, and the slow one gets no new job until it is
  // under half the capacity.
  EXPECT_EQ(governor.Admit("fast", {}, job++, clock_.Now() + kLease, 100).verdict,
            Verdict::kAdmit);
  EXPECT_EQ(governor.Admit("slow", {}, job++, clock_.Now() + kLease, 100).verdict,
            Verdict::kConcurrency);
  for (uint64_t j = 1; j <= 51; ++j) governor.OnOutcome("slow", {}, Delivered(j, 2000));
  EXPECT_EQ(governor.Get("slow").in_flight, 49);
  EXPECT_EQ(governor.Admit("slow", {}, job++, clock_.Now() + kLease, 100).verdict,
            Verdict::kAdmit);
  EXPECT_EQ(governor.Admit("slow", {}, job++, clock_.Now() + kLease, 100).verdict,
            Verdict::kConcurrency);
}

// Alone, a slow destination keeps a quarter of the credits free (so that the dispatcher keeps
// leasing and sees other destinations' jobs behind its backlog); a fast one may use them all.
TEST_F(DestinationGovernorTest, ASlowDestinationAloneLeavesHeadroom) {
  uint64_t job = 1;
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(Admit("slow", job, {}, 100).verdict, Verdict::kAdmit);
    governor_.OnOutcome("slow", {}, Delivered(job++, 2000));
  }
  int admitted = 0;
  while (Admit("slow", job++, {}, 100).verdict == Verdict::kAdmit) ++admitted;
  EXPECT_EQ(admitted, 75);
  // A fast destination alone (no latency learned above the threshold): every credit.
  DestinationGovernor alone(DestinationGovernor::Options(), clock_, nullptr);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(alone.Admit("fast", {}, job++, clock_.Now() + kLease, 100).verdict, Verdict::kAdmit);
  }
}

// The token bucket admits one second's worth at once, then `rate` per second of the clock; the
// refused jobs are spread one interval apart.
TEST_F(DestinationGovernorTest, RateLimitAdmitsRatePerSecondOnTheClock) {
  DeliveryOptions options;
  options.set_rate_limit_per_second(10);
  uint64_t job = 1;
  auto admit_window = [&](absl::Duration window, absl::Duration step) {
    int admitted = 0;
    for (absl::Duration t; t < window; t += step) {
      // Many jobs offered per step; settle each at once so concurrency never limits.
      for (int i = 0; i < 20; ++i) {
        const uint64_t id = job++;
        if (Admit("r", id, options).verdict == Verdict::kAdmit) {
          ++admitted;
          governor_.OnOutcome("r", options, Delivered(id, 1));
        }
      }
      clock_.Advance(step);
    }
    return admitted;
  };
  EXPECT_EQ(admit_window(absl::Milliseconds(100), absl::Milliseconds(100)), 10);  // the burst
  // Each following second: 10 (the bucket refills at 10/s), whatever is offered (200).
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(admit_window(absl::Seconds(1), absl::Milliseconds(100)), 10) << "second " << s;
  }
  // Refused jobs are spread one token apart, from the next token on.
  for (int i = 0; i < 10; ++i) ASSERT_EQ(Admit("r3", job++, options).verdict, Verdict::kAdmit);
  const DestinationGovernor::Admission a = Admit("r3", job++, options);
  const DestinationGovernor::Admission b = Admit("r3", job++, options);
  ASSERT_EQ(a.verdict, Verdict::kRateLimit);
  ASSERT_EQ(b.verdict, Verdict::kRateLimit);
  EXPECT_EQ(a.retry_at, clock_.Now() + absl::Milliseconds(100));
  EXPECT_EQ(b.retry_at - a.retry_at, absl::Milliseconds(100));
  // Two collectors sharing the rate: each admits half.
  clock_.Advance(absl::Seconds(10));
  int admitted = 0;
  for (int i = 0; i < 20; ++i) {
    const uint64_t id = job++;
    if (governor_.Admit("r2", options, id, clock_.Now() + kLease, 256, 2).verdict ==
        Verdict::kAdmit) {
      ++admitted;
    }
  }
  EXPECT_EQ(admitted, 5);
}

// N consecutive failures open the breaker: jobs are refused (put back, no attempt) until the
// pause ends; then one probe goes; its failure doubles the pause; its success closes it.
TEST_F(DestinationGovernorTest, BreakerOpensPausesProbesAndCloses) {
  DeliveryOptions options;
  options.mutable_circuit_breaker()->set_failures(3);
  options.mutable_circuit_breaker()->set_pause_ms(1000);
  options.mutable_circuit_breaker()->set_max_pause_ms(3000);
  uint64_t job = 1;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(Admit("b", job, options).verdict, Verdict::kAdmit);
    EXPECT_FALSE(governor_.OnOutcome("b", options, Failed(job++)));
  }
  // A delivery resets the count.
  ASSERT_EQ(Admit("b", job, options).verdict, Verdict::kAdmit);
  governor_.OnOutcome("b", options, Delivered(job++, 5));
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(Admit("b", job, options).verdict, Verdict::kAdmit);
    EXPECT_FALSE(governor_.OnOutcome("b", options, Failed(job++)));
  }
  // A 4xx is neither a failure nor a success for the breaker.
  Outcome dead = Failed(job, 400);
  dead.set_kind(Outcome::DEAD);
  ASSERT_EQ(Admit("b", job++, options).verdict, Verdict::kAdmit);
  EXPECT_FALSE(governor_.OnOutcome("b", options, dead));
  ASSERT_EQ(Admit("b", job, options).verdict, Verdict::kAdmit);
  EXPECT_TRUE(governor_.OnOutcome("b", options, Failed(job++)));  // the third in a row
  EXPECT_EQ(governor_.Get("b").circuit, Circuit::kOpen);

  // Open: refused, due no earlier than the end of the pause.
  const absl::Time opened = clock_.Now();
  for (int i = 0; i < 5; ++i) {
    const DestinationGovernor::Admission a = Admit("b", job++, options);
    EXPECT_EQ(a.verdict, Verdict::kCircuitOpen);
    EXPECT_GE(a.retry_at, opened + absl::Seconds(1));
  }
  clock_.Advance(absl::Milliseconds(999));
  EXPECT_EQ(Admit("b", job++, options).verdict, Verdict::kCircuitOpen);
  clock_.Advance(absl::Milliseconds(1));
  // Half-open: one probe, the others wait for it.
  const uint64_t probe = job++;
  EXPECT_EQ(Admit("b", probe, options).verdict, Verdict::kAdmit);
  EXPECT_EQ(governor_.Get("b").circuit, Circuit::kHalfOpen);
  EXPECT_EQ(Admit("b", job++, options).verdict, Verdict::kCircuitOpen);
  // The probe fails: open again for twice as long (2 s).
  EXPECT_TRUE(governor_.OnOutcome("b", options, Failed(probe)));
  clock_.Advance(absl::Milliseconds(1999));
  EXPECT_EQ(Admit("b", job++, options).verdict, Verdict::kCircuitOpen);
  clock_.Advance(absl::Milliseconds(1));
  const uint64_t probe2 = job++;
  EXPECT_EQ(Admit("b", probe2, options).verdict, Verdict::kAdmit);
  // Its lease expires without an outcome: the next job may probe.
  clock_.Advance(kLease);
  const uint64_t probe3 = job++;
  EXPECT_EQ(Admit("b", probe3, options).verdict, Verdict::kAdmit);
  governor_.OnOutcome("b", options, Delivered(probe3, 5));
  EXPECT_EQ(governor_.Get("b").circuit, Circuit::kClosed);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Admit("b", job++, options).verdict, Verdict::kAdmit);
  // The pause starts again from pause_ms after closing.
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Admit("b", job, options).verdict, Verdict::kAdmit);
    governor_.OnOutcome("b", options, Failed(job++));
  }
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Admit("b", job++, options).verdict, Verdict::kAdmit);
}

// Without a breaker configured, failures never pause a destination (only its limit shrinks).
TEST_F(DestinationGovernorTest, NoBreakerWithoutSettings) {
  uint64_t job = 1;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(Admit("n", job).verdict, Verdict::kAdmit);
    clock_.Advance(absl::Milliseconds(5));  // each failure a new round trip
    EXPECT_FALSE(governor_.OnOutcome("n", {}, Failed(job++)));
  }
  EXPECT_EQ(governor_.Get("n").circuit, Circuit::kClosed);
  EXPECT_EQ(governor_.Get("n").limit, 2);  // min_limit: failures still cut the limit
}

}  // namespace
}  // namespace hookrelay::collector

namespace hookrelay::collector {
namespace {

// HeadroomFor says how many jobs Admit would take now, without taking any, and when a
// destination held back by time may take jobs again: the concurrency left, whole rate tokens,
// nothing while the breaker is open (until its pause ends), one probe when half-open.
TEST(DestinationGovernorHeadroomTest, MatchesWhatAdmitWouldTake) {
  common::ManualClock clock{absl::FromUnixSeconds(1'800'000'000)};
  DestinationGovernor::Options options;
  options.initial_limit = 4;
  options.min_limit = 1;
  DestinationGovernor governor(options, clock, nullptr);
  const absl::Time deadline = clock.Now() + absl::Seconds(90);

  // Concurrency: 4 free, then 1 after three are admitted; asking takes nothing.
  EXPECT_EQ(governor.HeadroomFor("c", {}, 256).jobs, 4u);
  EXPECT_EQ(governor.HeadroomFor("c", {}, 256).jobs, 4u);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_EQ(governor.Admit("c", {}, id, deadline, 256).verdict,
              DestinationGovernor::Verdict::kAdmit);
  }
  EXPECT_EQ(governor.HeadroomFor("c", {}, 256).jobs, 1u);
  ASSERT_EQ(governor.Admit("c", {}, 4, deadline, 256).verdict,
            DestinationGovernor::Verdict::kAdmit);
  const DestinationGovernor::Headroom full = governor.HeadroomFor("c", {}, 256);
  EXPECT_EQ(full.jobs, 0u);
  EXPECT_EQ(full.wake_at, deadline) << "the in-flight leases' end frees slots without an outcome";

  // Rate: 2/s holds two tokens; none left after two admissions, the next due in half a second.
  DeliveryOptions rated;
  rated.set_rate_limit_per_second(2);
  EXPECT_EQ(governor.HeadroomFor("r", rated, 256).jobs, 2u);
  ASSERT_EQ(governor.Admit("r", rated, 10, deadline, 256).verdict,
            DestinationGovernor::Verdict::kAdmit);
  ASSERT_EQ(governor.Admit("r", rated, 11, deadline, 256).verdict,
            DestinationGovernor::Verdict::kAdmit);
  const DestinationGovernor::Headroom dry = governor.HeadroomFor("r", rated, 256);
  EXPECT_EQ(dry.jobs, 0u);
  EXPECT_EQ(dry.wake_at, clock.Now() + absl::Milliseconds(500));
  clock.Advance(absl::Milliseconds(500));
  EXPECT_EQ(governor.HeadroomFor("r", rated, 256).jobs, 1u);

  // Breaker: open for its pause (nothing, wake at its end), then one probe at a time.
  DeliveryOptions breaker;
  breaker.mutable_circuit_breaker()->set_failures(1);
  breaker.mutable_circuit_breaker()->set_pause_ms(1000);
  ASSERT_EQ(governor.Admit("b", breaker, 20, deadline, 256).verdict,
            DestinationGovernor::Verdict::kAdmit);
  Outcome failed;
  failed.set_job_id(20);
  failed.set_kind(Outcome::RETRY);
  failed.mutable_attempt()->add_urls()->set_status(503);
  ASSERT_TRUE(governor.OnOutcome("b", breaker, failed));
  const DestinationGovernor::Headroom open = governor.HeadroomFor("b", breaker, 256);
  EXPECT_EQ(open.jobs, 0u);
  EXPECT_EQ(open.wake_at, clock.Now() + absl::Seconds(1));
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(governor.HeadroomFor("b", breaker, 256).jobs, 1u);
  ASSERT_EQ(governor.Admit("b", breaker, 21, clock.Now() + absl::Seconds(90), 256).verdict,
            DestinationGovernor::Verdict::kAdmit);
  const DestinationGovernor::Headroom probing = governor.HeadroomFor("b", breaker, 256);
  EXPECT_EQ(probing.jobs, 0u) << "one probe at a time while half-open";
  EXPECT_EQ(probing.wake_at, clock.Now() + absl::Seconds(90));
}

}  // namespace
}  // namespace hookrelay::collector
