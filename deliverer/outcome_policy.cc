#include "deliverer/outcome_policy.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "absl/random/distributions.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "common/strings.h"

namespace hookrelay::deliverer {

std::string_view UrlHost(std::string_view url) {
  if (const size_t scheme_end = url.find("://"); scheme_end != std::string_view::npos) {
    url.remove_prefix(scheme_end + 3);
  }
  url = url.substr(0, url.find_first_of("/?#"));
  if (const size_t at = url.rfind('@'); at != std::string_view::npos) url.remove_prefix(at + 1);
  return url;
}

namespace {

using common::ToAbsl;

enum class UrlClass { kSuccess, kRetryable, kPermanent };

UrlClass Classify(const UrlResult& r) {
  switch (r.error) {
    case TransportError::kNone:
      break;
    case TransportError::kTlsVerification:
    case TransportError::kForbiddenAddress:
      return UrlClass::kPermanent;
    case TransportError::kTimeout:
    case TransportError::kConnect:
    case TransportError::kOther:
      return UrlClass::kRetryable;
  }
  if (r.status >= 200 && r.status <= 299) return UrlClass::kSuccess;
  if (r.status >= 400 && r.status <= 499 && r.status != 429) return UrlClass::kPermanent;
  return UrlClass::kRetryable;
}

// "503 from host", "timeout from host", ...
void AppendDescription(std::string* out, const UrlResult& r) {
  std::string_view host = UrlHost(r.url);
  if (host.empty()) host = "unknown host";
  if (r.error == TransportError::kNone) {
    if (r.status != 0) {
      absl::StrAppend(out, r.status, " from ", ToAbsl(host));
    } else {
      absl::StrAppend(out, "no status from ", ToAbsl(host));
    }
    return;
  }
  absl::StrAppend(out, ToAbsl(TransportErrorText(r.error)),
                  r.error == TransportError::kForbiddenAddress ? " for " : " from ", ToAbsl(host));
}

std::string DescribeAll(absl::Span<const UrlResult> results) {
  std::string out;
  for (const UrlResult& r : results) {
    if (!out.empty()) out.append(", ");
    AppendDescription(&out, r);
  }
  return out;
}

Decision Dead(std::string reason) {
  return Decision{DecisionKind::kDead, absl::InfinitePast(), std::move(reason)};
}

// ---- HTTP-date (RFC 9110 §5.6.7) ----

constexpr std::string_view kShortDays[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
constexpr std::string_view kLongDays[] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                          "Friday", "Saturday", "Sunday"};
constexpr std::string_view kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// A forward-only reader over a header value. Names compare case-insensitively (lenient about
// what receivers send); everything else is exact.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}

  bool Done() const { return s_.empty(); }

  bool Lit(std::string_view lit) {
    if (s_.substr(0, lit.size()) != lit) return false;
    s_.remove_prefix(lit.size());
    return true;
  }

  bool Name(std::string_view name) {
    if (s_.size() < name.size() ||
        !absl::EqualsIgnoreCase(ToAbsl(s_.substr(0, name.size())), ToAbsl(name))) {
      return false;
    }
    s_.remove_prefix(name.size());
    return true;
  }

  // Index of the name of `names` that the input starts with.
  template <size_t N>
  bool OneOf(const std::string_view (&names)[N], int* index) {
    for (size_t i = 0; i < N; ++i) {
      if (Name(names[i])) {
        *index = static_cast<int>(i);
        return true;
      }
    }
    return false;
  }

  // Exactly `n` digits.
  bool Digits(int n, int* out) {
    if (s_.size() < static_cast<size_t>(n)) return false;
    int v = 0;
    for (int i = 0; i < n; ++i) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(s_[i]))) return false;
      v = v * 10 + (s_[i] - '0');
    }
    s_.remove_prefix(n);
    *out = v;
    return true;
  }

  // HH:MM:SS
  bool TimeOfDay(int* h, int* m, int* s) {
    return Digits(2, h) && Lit(":") && Digits(2, m) && Lit(":") && Digits(2, s);
  }

 private:
  std::string_view s_;
};

bool MakeTime(int64_t year, int month, int day, int h, int m, int s, absl::Time* out) {
  if (h > 23 || m > 59 || s > 60) return false;
  if (s == 60) s = 59;  // a leap second; a second early is harmless for a retry floor
  const absl::CivilDay cd(year, month, day);
  if (cd.year() != year || cd.month() != month || cd.day() != day) return false;  // no Feb 30
  *out = absl::FromCivil(absl::CivilSecond(year, month, day, h, m, s), absl::UTCTimeZone());
  return true;
}

bool ParseHttpDate(std::string_view v, absl::Time now, absl::Time* out) {
  int wday = 0, day = 0, month = 0, year = 0, h = 0, m = 0, s = 0;
  {  // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
    Cursor c(v);
    if (c.OneOf(kShortDays, &wday) && c.Lit(", ") && c.Digits(2, &day) && c.Lit(" ") &&
        c.OneOf(kMonths, &month) && c.Lit(" ") && c.Digits(4, &year) && c.Lit(" ") &&
        c.TimeOfDay(&h, &m, &s) && c.Lit(" ") && c.Name("GMT") && c.Done()) {
      return MakeTime(year, month + 1, day, h, m, s, out);
    }
  }
  {  // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
    Cursor c(v);
    if (c.OneOf(kLongDays, &wday) && c.Lit(", ") && c.Digits(2, &day) && c.Lit("-") &&
        c.OneOf(kMonths, &month) && c.Lit("-") && c.Digits(2, &year) && c.Lit(" ") &&
        c.TimeOfDay(&h, &m, &s) && c.Lit(" ") && c.Name("GMT") && c.Done()) {
      // A two-digit year more than 50 years ahead is the most recent such year in the past.
      const int64_t now_year = absl::ToCivilYear(now, absl::UTCTimeZone()).year();
      int64_t full_year = now_year - now_year % 100 + year;
      if (full_year > now_year + 50) full_year -= 100;
      return MakeTime(full_year, month + 1, day, h, m, s, out);
    }
  }
  {  // asctime: Sun Nov  6 08:49:37 1994
    Cursor c(v);
    if (c.OneOf(kShortDays, &wday) && c.Lit(" ") && c.OneOf(kMonths, &month) && c.Lit(" ") &&
        ((c.Lit(" ") && c.Digits(1, &day)) || c.Digits(2, &day)) && c.Lit(" ") &&
        c.TimeOfDay(&h, &m, &s) && c.Lit(" ") && c.Digits(4, &year) && c.Done()) {
      return MakeTime(year, month + 1, day, h, m, s, out);
    }
  }
  return false;
}

}  // namespace

std::string_view TransportErrorText(TransportError error) {
  switch (error) {
    case TransportError::kNone:
      return "";
    case TransportError::kTimeout:
      return "timeout";
    case TransportError::kConnect:
      return "connection error";
    case TransportError::kTlsVerification:
      return "TLS verification failure";
    case TransportError::kForbiddenAddress:
      return "private network address refused";
    case TransportError::kOther:
      return "transport error";
  }
  return "transport error";
}

std::optional<absl::Duration> ParseRetryAfter(std::string_view value, absl::Time now) {
  const std::string_view v = common::ToStd(absl::StripAsciiWhitespace(ToAbsl(value)));
  if (v.empty()) return std::nullopt;
  if (std::all_of(v.begin(), v.end(),
                  [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); })) {
    int64_t seconds = 0;
    for (const char c : v) {
      if (seconds > (std::numeric_limits<int64_t>::max() - 9) / 10) {
        return absl::InfiniteDuration();
      }
      seconds = seconds * 10 + (c - '0');
    }
    return absl::Seconds(seconds);
  }
  absl::Time at;
  if (!ParseHttpDate(v, now, &at)) return std::nullopt;
  return std::max(at - now, absl::ZeroDuration());
}

absl::Duration RetryBackoff(const hookrelay::v1::DeliveryOptions& options, int attempts,
                            absl::BitGenRef rng) {
  // initial_backoff_ms < 2^32, so shifting by up to 31 stays within uint64_t.
  const int shift = std::clamp(attempts, 0, 31);
  const uint64_t ceiling_ms = std::min<uint64_t>(
      uint64_t{options.max_backoff_ms()}, uint64_t{options.initial_backoff_ms()} << shift);
  // Clamped: absl's closed interval is built with nextafter and may overshoot by an ulp.
  const double factor = std::clamp(absl::Uniform(absl::IntervalClosed, rng, 0.5, 1.0), 0.5, 1.0);
  return absl::Ceil(absl::Milliseconds(static_cast<int64_t>(ceiling_ms)) * factor,
                    absl::Milliseconds(1));
}

std::string FormatDurationGo(absl::Duration d) {
  const int64_t total = absl::ToInt64Seconds(d);
  const int64_t h = total / 3600;
  const int64_t m = total % 3600 / 60;
  const int64_t s = total % 60;
  if (h != 0) return absl::StrCat(h, "h", m, "m", s, "s");
  if (m != 0) return absl::StrCat(m, "m", s, "s");
  return absl::StrCat(s, "s");
}

Decision DecideOutcome(absl::Span<const UrlResult> results, const hookrelay::v1::Job& job,
                       const hookrelay::v1::DeliveryOptions& options, absl::Time now,
                       absl::BitGenRef rng) {
  if (results.empty()) return Dead("destination has no receiver URLs");

  bool any_retryable = false;
  for (const UrlResult& r : results) {
    switch (Classify(r)) {
      case UrlClass::kSuccess: {
        Decision d{DecisionKind::kDelivered, absl::InfinitePast(), {}};
        AppendDescription(&d.reason, r);
        return d;
      }
      case UrlClass::kRetryable:
        any_retryable = true;
        break;
      case UrlClass::kPermanent:
        break;
    }
  }
  std::string failures = DescribeAll(results);
  if (!any_retryable) return Dead(absl::StrCat("every URL failed permanently: ", failures));

  const absl::Duration window = absl::Seconds(options.retry_window_seconds());
  const absl::Time first_attempt =
      job.first_attempt_unix_ms() > 0 ? absl::FromUnixMillis(job.first_attempt_unix_ms()) : now;
  const absl::Time deadline = first_attempt + window;
  auto exhausted = [&](std::string_view extra) {
    return Dead(absl::StrCat("retry window of ", FormatDurationGo(window), " exhausted",
                             ToAbsl(extra), "; last: ", failures));
  };
  if (now >= deadline) return exhausted("");

  const absl::Duration max_backoff = absl::Milliseconds(options.max_backoff_ms());
  absl::Duration retry_after = absl::ZeroDuration();
  for (const UrlResult& r : results) {
    if (r.retry_after.empty()) continue;
    if (std::optional<absl::Duration> ra = ParseRetryAfter(r.retry_after, now); ra.has_value()) {
      retry_after = std::max(retry_after, std::min(*ra, max_backoff));
    }
  }
  if (now + retry_after > deadline) {
    return exhausted(absl::StrCat(" (Retry-After ", FormatDurationGo(retry_after),
                                  " ends after it)"));
  }

  const absl::Duration delay = std::max(RetryBackoff(options, job.attempts(), rng), retry_after);
  return Decision{DecisionKind::kRetry, std::min(now + delay, deadline), std::move(failures)};
}

}  // namespace hookrelay::deliverer
