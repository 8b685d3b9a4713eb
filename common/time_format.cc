#include "common/time_format.h"

#include <cstring>

namespace hookrelay::common {
namespace {

// Howard Hinnant's civil-from-days / days-from-civil (proleptic Gregorian), exact and branch-light.
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

void CivilFromDays(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = static_cast<int64_t>(yoe) + era * 400 + (*m <= 2);
}

bool IsLeap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

unsigned DaysInMonth(int64_t y, unsigned m) {
  static constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeap(y) ? 29 : kDays[m - 1];
}

void Put2(char* p, unsigned v) {
  p[0] = static_cast<char>('0' + v / 10);
  p[1] = static_cast<char>('0' + v % 10);
}

// Reads exactly `n` digits at s[*i].
bool Digits(std::string_view s, size_t* i, int n, int* out) {
  if (*i + n > s.size()) return false;
  int v = 0;
  for (int k = 0; k < n; ++k) {
    const char c = s[*i + k];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *i += n;
  *out = v;
  return true;
}

constexpr int64_t kMinMillis = -62167219200000;  // 0000-01-01T00:00:00Z
constexpr int64_t kMaxMillis = 253402300799999;  // 9999-12-31T23:59:59.999Z

}  // namespace

void AppendIso8601Millis(std::string* out, absl::Time t) {
  int64_t ms = absl::ToUnixMillis(t);
  if (ms < kMinMillis) ms = kMinMillis;
  if (ms > kMaxMillis) ms = kMaxMillis;
  int64_t days = ms / 86400000;
  int64_t rem = ms % 86400000;
  if (rem < 0) {
    rem += 86400000;
    --days;
  }
  int64_t y;
  unsigned m, d;
  CivilFromDays(days, &y, &m, &d);
  const auto secs = static_cast<unsigned>(rem / 1000);
  const auto millis = static_cast<unsigned>(rem % 1000);
  char buf[24];
  const auto yy = static_cast<unsigned>(y);
  Put2(buf, yy / 100);
  Put2(buf + 2, yy % 100);
  buf[4] = '-';
  Put2(buf + 5, m);
  buf[7] = '-';
  Put2(buf + 8, d);
  buf[10] = 'T';
  Put2(buf + 11, secs / 3600);
  buf[13] = ':';
  Put2(buf + 14, secs / 60 % 60);
  buf[16] = ':';
  Put2(buf + 17, secs % 60);
  buf[19] = '.';
  buf[20] = static_cast<char>('0' + millis / 100);
  Put2(buf + 21, millis % 100);
  buf[23] = 'Z';
  out->append(buf, sizeof(buf));
}

std::string FormatIso8601Millis(absl::Time t) {
  std::string s;
  AppendIso8601Millis(&s, t);
  return s;
}

std::optional<absl::Time> ParseIso8601(std::string_view s) {
  size_t i = 0;
  int year = 0, month = 0, day = 0;
  if (!Digits(s, &i, 4, &year) || i >= s.size() || s[i++] != '-' || !Digits(s, &i, 2, &month) ||
      i >= s.size() || s[i++] != '-' || !Digits(s, &i, 2, &day)) {
    return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 ||
      static_cast<unsigned>(day) > DaysInMonth(year, static_cast<unsigned>(month))) {
    return std::nullopt;
  }
  const int64_t days = DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  if (i == s.size()) return absl::FromUnixSeconds(days * 86400);

  if (s[i] != 'T' && s[i] != 't' && s[i] != ' ') return std::nullopt;
  ++i;
  int hour, minute, second = 0;
  if (!Digits(s, &i, 2, &hour) || i >= s.size() || s[i++] != ':' || !Digits(s, &i, 2, &minute)) {
    return std::nullopt;
  }
  if (i < s.size() && s[i] == ':') {
    ++i;
    if (!Digits(s, &i, 2, &second)) return std::nullopt;
  }
  // 24:00:00 and leap seconds are not accepted; callers send real clock times.
  if (hour > 23 || minute > 59 || second > 59) return std::nullopt;
  int64_t nanos = 0;
  if (i < s.size() && (s[i] == '.' || s[i] == ',')) {
    ++i;
    int n = 0;
    int64_t scale = 100000000;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      nanos += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
      ++n;
    }
    if (n == 0) return std::nullopt;
  }
  if (i >= s.size()) return std::nullopt;  // an offset is required with a time
  int64_t offset_seconds = 0;
  if (s[i] == 'Z' || s[i] == 'z') {
    ++i;
  } else if (s[i] == '+' || s[i] == '-') {
    const int sign = s[i] == '-' ? -1 : 1;
    ++i;
    int oh, om;
    if (!Digits(s, &i, 2, &oh)) return std::nullopt;
    if (i < s.size() && s[i] == ':') ++i;
    if (!Digits(s, &i, 2, &om)) return std::nullopt;
    if (oh > 23 || om > 59) return std::nullopt;
    offset_seconds = sign * (oh * 3600 + om * 60);
  } else {
    return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  const int64_t seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset_seconds;
  return absl::FromUnixSeconds(seconds) + absl::Nanoseconds(nanos);
}

}  // namespace hookrelay::common
