#include "deliverer/outcome_policy.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/random/bit_gen_ref.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/clock.h"
#include "common/config_validate.h"

namespace hookrelay::deliverer {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A random bit generator that always returns the same word: 0 makes the jitter factor 0.5 (the
// shortest delay), all ones makes it 1.0 (the longest).
class ConstantUrbg {
 public:
  using result_type = uint64_t;
  explicit ConstantUrbg(uint64_t v) : v_(v) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~uint64_t{0}; }
  result_type operator()() { return v_; }

 private:
  uint64_t v_;
};

constexpr uint64_t kShortest = 0;
constexpr uint64_t kLongest = ~uint64_t{0};

// The defaults: 4 h window, 1 s initial backoff, 10 min maximum.
hookrelay::v1::DeliveryOptions DefaultOptions() {
  return common::EffectiveOptions(hookrelay::v1::Destination());
}

hookrelay::v1::Job MakeJob(int attempts, absl::Time first_attempt) {
  hookrelay::v1::Job job;
  job.set_attempts(attempts);
  job.set_first_attempt_unix_ms(absl::ToUnixMillis(first_attempt));
  return job;
}

UrlResult Answered(std::string url, int status, std::string retry_after = "") {
  return UrlResult{std::move(url), status, TransportError::kNone, std::move(retry_after)};
}

UrlResult Failed(std::string url, TransportError error) {
  return UrlResult{std::move(url), 0, error, ""};
}

class OutcomePolicyTest : public ::testing::Test {
 protected:
  // Decides the first attempt's outcome (job without attempts) at the clock's time.
  Decision First(const std::vector<UrlResult>& results, uint64_t bits = kLongest) {
    ConstantUrbg rng(bits);
    return DecideOutcome(results, hookrelay::v1::Job(), options_, clock_.Now(), rng);
  }

  common::ManualClock clock_;
  hookrelay::v1::DeliveryOptions options_ = DefaultOptions();
};

// 500, 500, then 200: two quick retries (within 1 s, then within 2 s), then delivered.
TEST_F(OutcomePolicyTest, FiveHundredTwiceThenDelivered) {
  std::mt19937_64 rng(42);
  const absl::Time start = clock_.Now();
  hookrelay::v1::Job job;
  const int statuses[] = {500, 500, 200};
  std::vector<Decision> decisions;
  for (const int status : statuses) {
    const std::vector<UrlResult> results = {Answered("https://a.example/hook", status)};
    decisions.push_back(DecideOutcome(results, job, options_, clock_.Now(), rng));
    if (decisions.back().kind != DecisionKind::kRetry) break;
    if (job.first_attempt_unix_ms() == 0) job.set_first_attempt_unix_ms(absl::ToUnixMillis(start));
    job.set_attempts(job.attempts() + 1);
    clock_.Set(decisions.back().not_before);
  }
  ASSERT_EQ(decisions.size(), 3u);
  EXPECT_EQ(decisions[0].kind, DecisionKind::kRetry);
  EXPECT_EQ(decisions[0].reason, "500 from a.example");
  EXPECT_GE(decisions[0].not_before, start + absl::Milliseconds(500));
  EXPECT_LE(decisions[0].not_before, start + absl::Seconds(1));
  EXPECT_EQ(decisions[1].kind, DecisionKind::kRetry);
  const absl::Duration second_delay = decisions[1].not_before - decisions[0].not_before;
  EXPECT_GE(second_delay, absl::Seconds(1));
  EXPECT_LE(second_delay, absl::Seconds(2));
  EXPECT_EQ(decisions[2].kind, DecisionKind::kDelivered);
  EXPECT_EQ(decisions[2].reason, "200 from a.example");
  EXPECT_EQ(decisions[2].not_before, absl::InfinitePast());
}

struct WindowRun {
  int attempts = 0;           // POSTs made, the last one included
  absl::Duration dead_after;  // from the first attempt to the DEAD decision
  absl::Duration longest_delay;
  Decision last;
};

// Answers every attempt with 503, moving the clock to each decided retry time (attempts take no
// time), until the job is dead.
WindowRun RunUntilDead(absl::BitGenRef rng) {
  common::ManualClock clock;
  const hookrelay::v1::DeliveryOptions options = DefaultOptions();
  const absl::Time start = clock.Now();
  hookrelay::v1::Job job;
  WindowRun run;
  run.longest_delay = absl::ZeroDuration();
  const std::vector<UrlResult> results = {Answered("https://hooks.example.com/in", 503)};
  for (;;) {
    ++run.attempts;
    const Decision d = DecideOutcome(results, job, options, clock.Now(), rng);
    if (d.kind != DecisionKind::kRetry) {
      run.dead_after = clock.Now() - start;
      run.last = d;
      return run;
    }
    run.longest_delay = std::max(run.longest_delay, d.not_before - clock.Now());
    job.set_first_attempt_unix_ms(absl::ToUnixMillis(start));
    job.set_attempts(job.attempts() + 1);
    clock.Set(d.not_before);
  }
}

// 5xx for 4 hours: the job dies exactly when the window ends. With the longest jitter the delays
// are 1, 2, 4, ... 512 s (10 retries, 1023 s), then 600 s 22 times (to 14223 s), then a last
// retry moved to 14400 s: 34 attempts. With the shortest, 0.5 ... 256 s then 300 s: 58 attempts.
TEST(OutcomePolicyWindowTest, FiveHundredsForFourHoursThenDead) {
  ConstantUrbg longest(kLongest);
  const WindowRun slow = RunUntilDead(longest);
  EXPECT_EQ(slow.attempts, 34);
  EXPECT_EQ(slow.dead_after, absl::Hours(4));
  EXPECT_EQ(slow.longest_delay, absl::Minutes(10));
  EXPECT_EQ(slow.last.kind, DecisionKind::kDead);
  EXPECT_EQ(slow.last.reason,
            "retry window of 4h0m0s exhausted; last: 503 from hooks.example.com");

  ConstantUrbg shortest(kShortest);
  const WindowRun fast = RunUntilDead(shortest);
  EXPECT_EQ(fast.attempts, 58);
  EXPECT_EQ(fast.dead_after, absl::Hours(4));
  EXPECT_EQ(fast.longest_delay, absl::Minutes(5));

  std::mt19937_64 seeded(7);
  const WindowRun random = RunUntilDead(seeded);
  EXPECT_GE(random.attempts, 34);
  EXPECT_LE(random.attempts, 58);
  EXPECT_EQ(random.dead_after, absl::Hours(4));
  ::testing::Test::RecordProperty("attempts_in_4h_seeded", random.attempts);
}

// A 400 is permanent: dead at once, the reason naming the status and host.
TEST_F(OutcomePolicyTest, FourHundredIsDeadAtOnce) {
  const Decision d = First({Answered("https://a.example/hook", 400)});
  EXPECT_EQ(d.kind, DecisionKind::kDead);
  EXPECT_EQ(d.reason, "every URL failed permanently: 400 from a.example");
}

// 429 with Retry-After: 30 waits at least 30 s, though the backoff alone would be 1 s.
TEST_F(OutcomePolicyTest, TooManyRequestsHonoursRetryAfterSeconds) {
  const Decision d = First({Answered("https://a.example/hook", 429, "30")});
  EXPECT_EQ(d.kind, DecisionKind::kRetry);
  EXPECT_GE(d.not_before, clock_.Now() + absl::Seconds(30));
  EXPECT_EQ(d.not_before, clock_.Now() + absl::Seconds(30));
  EXPECT_EQ(d.reason, "429 from a.example");
}

// Retry-After as an HTTP-date two minutes ahead.
TEST_F(OutcomePolicyTest, RetryAfterHttpDate) {
  clock_.Set(absl::FromCivil(absl::CivilSecond(2023, 11, 14, 22, 13, 20), absl::UTCTimeZone()));
  const Decision d =
      First({Answered("https://a.example/hook", 503, "Tue, 14 Nov 2023 22:15:20 GMT")});
  EXPECT_EQ(d.kind, DecisionKind::kRetry);
  EXPECT_EQ(d.not_before, clock_.Now() + absl::Minutes(2));
}

// Retry-After is capped at the maximum backoff (10 min by default).
TEST_F(OutcomePolicyTest, RetryAfterCappedAtMaxBackoff) {
  const Decision d = First({Answered("https://a.example/hook", 503, "86400")});
  EXPECT_EQ(d.kind, DecisionKind::kRetry);
  EXPECT_EQ(d.not_before, clock_.Now() + absl::Minutes(10));
}

// The largest Retry-After of all URLs wins; unparsable values are ignored.
TEST_F(OutcomePolicyTest, LargestRetryAfterWins) {
  const Decision d = First({Answered("https://a.example/", 503, "20"),
                            Answered("https://b.example/", 429, "45"),
                            Answered("https://c.example/", 503, "soon")});
  EXPECT_EQ(d.not_before, clock_.Now() + absl::Seconds(45));
}

// A Retry-After ending after the window is dead at once.
TEST_F(OutcomePolicyTest, RetryAfterBeyondWindowIsDead) {
  const absl::Time start = clock_.Now();
  clock_.Advance(absl::Hours(4) - absl::Minutes(1));
  ConstantUrbg rng(kShortest);
  const std::vector<UrlResult> results = {Answered("https://a.example/", 503, "120")};
  const Decision d = DecideOutcome(results, MakeJob(30, start), options_, clock_.Now(), rng);
  EXPECT_EQ(d.kind, DecisionKind::kDead);
  EXPECT_EQ(d.reason,
            "retry window of 4h0m0s exhausted (Retry-After 2m0s ends after it); "
            "last: 503 from a.example");
}

// A retry that would fall after the window is moved to its end (one last attempt).
TEST_F(OutcomePolicyTest, LastRetryMovedToWindowEnd) {
  const absl::Time start = clock_.Now();
  clock_.Advance(absl::Hours(4) - absl::Seconds(10));
  const std::vector<UrlResult> results = {Answered("https://a.example/", 502)};
  ConstantUrbg rng(kLongest);
  Decision d = DecideOutcome(results, MakeJob(30, start), options_, clock_.Now(), rng);
  EXPECT_EQ(d.kind, DecisionKind::kRetry);
  EXPECT_EQ(d.not_before, start + absl::Hours(4));
  d = DecideOutcome(results, MakeJob(31, start), options_, start + absl::Hours(4), rng);
  EXPECT_EQ(d.kind, DecisionKind::kDead);
}

// One URL answers 500 and another 200: delivered, the 500 is not retried.
TEST_F(OutcomePolicyTest, OneSuccessIsEnough) {
  const Decision d =
      First({Answered("https://a.example/hook", 500), Answered("https://b.example/hook", 200)});
  EXPECT_EQ(d.kind, DecisionKind::kDelivered);
  EXPECT_EQ(d.reason, "200 from b.example");
  EXPECT_EQ(First({Answered("https://a.example/", 204)}).kind, DecisionKind::kDelivered);
}

// One permanent and one retryable failure: retried, the reason naming both.
TEST_F(OutcomePolicyTest, PermanentPlusRetryableRetries) {
  const Decision d =
      First({Answered("https://a.example/hook", 400), Answered("https://b.example/hook", 503)});
  EXPECT_EQ(d.kind, DecisionKind::kRetry);
  EXPECT_EQ(d.reason, "400 from a.example, 503 from b.example");
}

// TLS verification failing on every URL is permanent.
TEST_F(OutcomePolicyTest, TlsFailureEverywhereIsDead) {
  const Decision d = First({Failed("https://a.example/hook", TransportError::kTlsVerification),
                            Failed("https://b.example/hook", TransportError::kTlsVerification)});
  EXPECT_EQ(d.kind, DecisionKind::kDead);
  EXPECT_EQ(d.reason,
            "every URL failed permanently: TLS verification failure from a.example, "
            "TLS verification failure from b.example");
}

// A receiver refused for its private address is permanent: retrying cannot help.
TEST_F(OutcomePolicyTest, ForbiddenAddressIsDead) {
  const Decision d = First({Failed("http://10.0.0.7/hook", TransportError::kForbiddenAddress)});
  EXPECT_EQ(d.kind, DecisionKind::kDead);
  EXPECT_EQ(d.reason,
            "every URL failed permanently: private network address refused for 10.0.0.7");
}

// Timeouts, connection errors and other transport errors are retried.
TEST_F(OutcomePolicyTest, TransportErrorsRetry) {
  Decision d = First({Failed("https://a.example/hook", TransportError::kTimeout)});
  EXPECT_EQ(d.kind, DecisionKind::kRetry);
  EXPECT_EQ(d.reason, "timeout from a.example");
  d = First({Failed("http://a.example:8080", TransportError::kConnect)});
  EXPECT_EQ(d.kind, DecisionKind::kRetry);
  EXPECT_EQ(d.reason, "connection error from a.example:8080");
  d = First({Failed("https://a.example/", TransportError::kOther),
             Failed("https://b.example/", TransportError::kTlsVerification)});
  EXPECT_EQ(d.kind, DecisionKind::kRetry);
  EXPECT_EQ(d.reason, "transport error from a.example, TLS verification failure from b.example");
}

// Statuses outside 2xx/4xx/5xx (a redirect) and a missing status are retried.
TEST_F(OutcomePolicyTest, UnexpectedStatusesRetry) {
  EXPECT_EQ(First({Answered("https://a.example/", 301)}).kind, DecisionKind::kRetry);
  const Decision d = First({Answered("https://a.example/", 0)});
  EXPECT_EQ(d.kind, DecisionKind::kRetry);
  EXPECT_EQ(d.reason, "no status from a.example");
}

// Reasons name hosts only: no user info, path or query (which may hold tokens).
TEST_F(OutcomePolicyTest, ReasonsHideCredentials) {
  const Decision d =
      First({Answered("https://user:pa55@hooks.example.com:8443/in?token=s3cret#frag", 404)});
  EXPECT_EQ(d.reason, "every URL failed permanently: 404 from hooks.example.com:8443");
  EXPECT_THAT(d.reason, Not(HasSubstr("s3cret")));
  EXPECT_THAT(d.reason, Not(HasSubstr("pa55")));
}

// A destination without URLs cannot be delivered.
TEST_F(OutcomePolicyTest, NoUrlsIsDead) {
  const Decision d = First({});
  EXPECT_EQ(d.kind, DecisionKind::kDead);
  EXPECT_EQ(d.reason, "destination has no receiver URLs");
}

// The window counts from the job's first attempt, and uses the destination's options.
TEST_F(OutcomePolicyTest, CustomWindowAndBackoff) {
  options_.set_retry_window_seconds(90);
  options_.set_initial_backoff_ms(10000);
  options_.set_max_backoff_ms(20000);
  const absl::Time start = clock_.Now();
  ConstantUrbg rng(kLongest);
  const std::vector<UrlResult> results = {Answered("https://a.example/", 500)};
  Decision d = DecideOutcome(results, MakeJob(5, start), options_, start + absl::Seconds(30), rng);
  EXPECT_EQ(d.not_before, start + absl::Seconds(50));
  d = DecideOutcome(results, MakeJob(6, start), options_, start + absl::Seconds(90), rng);
  EXPECT_EQ(d.kind, DecisionKind::kDead);
  EXPECT_EQ(d.reason, "retry window of 1m30s exhausted; last: 500 from a.example");
}

// Backoff doubles per attempt from the initial value up to the maximum, jittered in [0.5, 1].
TEST(RetryBackoffTest, DoublesWithJitterUpToMax) {
  const hookrelay::v1::DeliveryOptions options = DefaultOptions();
  ConstantUrbg lo(kShortest), hi(kLongest);
  EXPECT_EQ(RetryBackoff(options, 0, lo), absl::Milliseconds(500));
  EXPECT_EQ(RetryBackoff(options, 0, hi), absl::Seconds(1));
  EXPECT_EQ(RetryBackoff(options, -3, hi), absl::Seconds(1));
  EXPECT_EQ(RetryBackoff(options, 3, lo), absl::Seconds(4));
  EXPECT_EQ(RetryBackoff(options, 3, hi), absl::Seconds(8));
  EXPECT_EQ(RetryBackoff(options, 20, lo), absl::Minutes(5));
  EXPECT_EQ(RetryBackoff(options, 20, hi), absl::Minutes(10));
  EXPECT_EQ(RetryBackoff(options, 1000000, hi), absl::Minutes(10));
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) {
    const absl::Duration d = RetryBackoff(options, 2, rng);
    EXPECT_GE(d, absl::Seconds(2));
    EXPECT_LE(d, absl::Seconds(4));
  }
}

absl::Time Utc(int64_t y, int m, int d, int hh, int mm, int ss) {
  return absl::FromCivil(absl::CivilSecond(y, m, d, hh, mm, ss), absl::UTCTimeZone());
}

// Retry-After as delay-seconds.
TEST(ParseRetryAfterTest, Seconds) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  EXPECT_EQ(ParseRetryAfter("120", now), absl::Seconds(120));
  EXPECT_EQ(ParseRetryAfter(" \t0 ", now), absl::ZeroDuration());
  EXPECT_EQ(ParseRetryAfter("99999999999999999999999", now), absl::InfiniteDuration());
  EXPECT_EQ(ParseRetryAfter("", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("-5", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("1.5", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("12s", now), std::nullopt);
}

// Retry-After as an HTTP-date in each of the three formats; a past date means no wait.
TEST(ParseRetryAfterTest, HttpDates) {
  const absl::Time now = Utc(2023, 11, 14, 22, 13, 20);
  EXPECT_EQ(ParseRetryAfter("Tue, 14 Nov 2023 22:15:20 GMT", now), absl::Minutes(2));
  EXPECT_EQ(ParseRetryAfter("tue, 14 nov 2023 22:15:20 gmt", now), absl::Minutes(2));
  EXPECT_EQ(ParseRetryAfter("Tuesday, 14-Nov-23 22:15:20 GMT", now), absl::Minutes(2));
  EXPECT_EQ(ParseRetryAfter("Tue Nov 14 22:15:20 2023", now), absl::Minutes(2));
  EXPECT_EQ(ParseRetryAfter("Wed Dec  6 00:00:00 2023", now), Utc(2023, 12, 6, 0, 0, 0) - now);
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", now), absl::ZeroDuration());
  EXPECT_EQ(ParseRetryAfter("Sunday, 06-Nov-94 08:49:37 GMT", now), absl::ZeroDuration());
  EXPECT_EQ(ParseRetryAfter("Sun Nov  6 08:49:37 1994", now), absl::ZeroDuration());
  // Two-digit years more than 50 years ahead are in the past century.
  EXPECT_EQ(ParseRetryAfter("Tuesday, 14-Nov-73 22:13:20 GMT", now),
            Utc(2073, 11, 14, 22, 13, 20) - now);
  EXPECT_EQ(ParseRetryAfter("Wednesday, 14-Nov-74 22:13:20 GMT", now), absl::ZeroDuration());
}

// Malformed dates are ignored.
TEST(ParseRetryAfterTest, MalformedDates) {
  const absl::Time now = Utc(2023, 11, 14, 22, 13, 20);
  for (const char* v : {"Tue, 31 Feb 2024 00:00:00 GMT", "Tue, 14 Nov 2023 24:00:00 GMT",
                        "Tue, 14 Nov 2023 22:15:20 UTC", "Tue, 14 Nov 2023 22:15:20",
                        "Tue, 14 Nov 2023 22:15:20 GMT extra", "Xyz, 14 Nov 2023 22:15:20 GMT",
                        "Tue, 14 Foo 2023 22:15:20 GMT", "2023-11-14T22:15:20Z", "soon"}) {
    EXPECT_EQ(ParseRetryAfter(v, now), std::nullopt) << v;
  }
}

// Durations print as Go does.
TEST(FormatDurationGoTest, LikeGo) {
  EXPECT_EQ(FormatDurationGo(absl::Hours(4)), "4h0m0s");
  EXPECT_EQ(FormatDurationGo(absl::Hours(25) + absl::Seconds(1)), "25h0m1s");
  EXPECT_EQ(FormatDurationGo(absl::Seconds(90)), "1m30s");
  EXPECT_EQ(FormatDurationGo(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatDurationGo(absl::ZeroDuration()), "0s");
}

}  // namespace
}  // namespace hookrelay::deliverer
