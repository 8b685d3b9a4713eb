// What one delivery attempt means for its job (SPEC §5.3): delivered, retry at T, or dead.
//
// Rules, for the results of one attempt (one entry per receiver URL):
//  - any 2xx → DELIVERED; the other URLs are not retried.
//  - otherwise, when at least one URL failed retryably → RETRY at
//        now + max(backoff, Retry-After),
//        backoff = U[0.5, 1.0] × min(max_backoff, initial_backoff × 2^attempts)
//    (rounded up to a millisecond; with the defaults the first retry comes 0.5–1 s after the
//    first failure and the delay settles at 5–10 min). Retry-After is the largest value any URL
//    sent, capped at max_backoff so that one receiver cannot park a job beyond the destination's
//    own bound. The retry window (retry_window_seconds from the first attempt) is used in full:
//    a retry that would fall after its end is moved to the end, so the last attempt happens when
//    the window closes; an attempt that fails at or after the end → DEAD ("retry window of
//    4h0m0s exhausted; last: 503 from host, ..."). A Retry-After that itself ends after the
//    window → DEAD at once (the receiver asked us not to come back in time).
//  - every URL failed permanently → DEAD at once, the reason naming each URL's failure.
// Retryable: 5xx, 429, a timeout, a connection error, any other transport error, and statuses
// outside 2xx/4xx/5xx (1xx, 3xx: redirects are not followed, and the window bounds the cost).
// Permanent: 4xx other than 429, a TLS verification failure and a forbidden (private) address
// (no request was sent in either case).
//
// Reasons name URLs by host[:port] only: paths and queries often carry tokens, and user info is
// a credential; they go to logs and to dead letters.
//
// Pure functions of their arguments: time and randomness are injected. Thread-safe.
#ifndef HOOKRELAY_DELIVERER_OUTCOME_POLICY_H_
#define HOOKRELAY_DELIVERER_OUTCOME_POLICY_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/random/bit_gen_ref.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "hookrelay/v1/config.pb.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::deliverer {

// Why no HTTP response was received from a URL.
enum class TransportError {
  kNone,             // a response arrived; UrlResult::status holds its code
  kTimeout,          // no complete answer within the destination's timeout
  kConnect,          // DNS failure, connection refused or reset
  kTlsVerification,  // the receiver's certificate could not be verified; nothing was sent
  kForbiddenAddress,  // the receiver resolved to a loopback/private/link-local/metadata address
                      // and private networks are not allowed; nothing was sent
  kOther,            // anything else (malformed response, ...)
};

// The result of one POST to one URL.
struct UrlResult {
  std::string url;  // as configured
  // HTTP status when `error` is kNone (0 there counts as kOther); ignored otherwise.
  int status = 0;
  TransportError error = TransportError::kNone;
  // The response's Retry-After header value; empty when absent or when there was no response.
  std::string retry_after;
};

// A short description of `error` for reasons, logs and dead letters: "timeout", "connection
// error", "TLS verification failure", "private network address refused", "transport error";
// "" for kNone.
std::string_view TransportErrorText(TransportError error);

enum class DecisionKind { kDelivered, kRetry, kDead };

struct Decision {
  DecisionKind kind = DecisionKind::kDead;
  // kRetry: the earliest time of the next attempt. absl::InfinitePast() otherwise.
  absl::Time not_before = absl::InfinitePast();
  // kDelivered: which URL took it ("200 from host"); kRetry: the failures ("503 from a,
  // timeout from b"); kDead: why the job is dead-lettered.
  std::string reason;
};

// Decides the outcome of the attempt that produced `results`.
//  - `job`: `attempts` = attempts completed before this one; `first_attempt_unix_ms` = start of
//    the first attempt, or 0 when this is the first (the window then starts at `now`).
//  - `options`: the destination's effective options (common::EffectiveOptions; zero fields are
//    not defaulted here).
//  - `now`: the time the attempt finished, from the caller's clock.
//  - `rng`: the jitter source.
// An empty `results` (a destination without URLs, which config validation refuses) → DEAD.
Decision DecideOutcome(absl::Span<const UrlResult> results, const hookrelay::v1::Job& job,
                       const hookrelay::v1::DeliveryOptions& options, absl::Time now,
                       absl::BitGenRef rng);

// The jittered delay before retry number `attempts` + 1:
// U[0.5, 1.0] × min(max_backoff_ms, initial_backoff_ms × 2^attempts), rounded up to a
// millisecond. Negative `attempts` counts as 0.
absl::Duration RetryBackoff(const hookrelay::v1::DeliveryOptions& options, int attempts,
                            absl::BitGenRef rng);

// Parses a Retry-After header value (RFC 9110 §10.2.3): delay-seconds (digits only) or an
// HTTP-date in any of the three formats recipients must accept (IMF-fixdate
// "Sun, 06 Nov 1994 08:49:37 GMT", RFC 850 "Sunday, 06-Nov-94 08:49:37 GMT", asctime
// "Sun Nov  6 08:49:37 1994"). Returns the delay from `now`: zero for a date in the past,
// absl::InfiniteDuration() for a number of seconds too large to represent. nullopt when the
// value is neither form (the header is then ignored). Surrounding spaces and tabs are allowed.
std::optional<absl::Duration> ParseRetryAfter(std::string_view value, absl::Time now);

// `d` the way Go prints a time.Duration of whole seconds: "4h0m0s", "1m30s", "45s", "0s".
// Fractions of a second are dropped.
std::string FormatDurationGo(absl::Duration d);

// host[:port] of `url` (its authority), without scheme, user info, path, query or fragment.
// Not a validating parser.
std::string_view UrlHost(std::string_view url);

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_OUTCOME_POLICY_H_
