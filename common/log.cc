#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "common/clock.h"
#include "common/json_writer.h"

namespace hookrelay::common {
namespace {

std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<const Clock*> g_clock{nullptr};

// Where lines go. Never destroyed, so logging from other static destructors stays safe.
struct Output {
  absl::Mutex mu;
  std::function<void(std::string_view)> sink ABSL_GUARDED_BY(mu);
};

Output& GetOutput() {
  static Output* const output = new Output();
  return *output;
}

// Strings and numbers are written by common/json_writer, the project's one JSON escaper (invalid
// UTF-8 → U+FFFD, control characters and DEL escaped, NaN and infinities → null).
void AppendJsonString(std::string& out, std::string_view s) { common::AppendJsonString(&out, s); }
void AppendDouble(std::string& out, double value) { common::AppendJsonDouble(&out, value); }

// RFC 3339 UTC with milliseconds: 2026-11-21T10:00:00.123Z.
void AppendTimestamp(std::string& out, absl::Time now) {
  const int64_t millis = absl::ToUnixMillis(now);
  time_t seconds = static_cast<time_t>(millis / 1000);
  int64_t ms = millis % 1000;
  if (ms < 0) {
    ms += 1000;
    --seconds;
  }
  struct tm tm;
  gmtime_r(&seconds, &tm);
  char buffer[48];
  const int n = std::snprintf(buffer, sizeof(buffer), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                              tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                              tm.tm_sec, static_cast<int>(ms));
  if (n > 0) out.append(buffer, std::min(static_cast<size_t>(n), sizeof(buffer) - 1));
}

// Writes all of `data` to stdout, resuming after partial writes and EINTR. Errors are dropped:
// there is nowhere left to report them.
void WriteToStdout(std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(STDOUT_FILENO, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void LogImpl(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields,
             const LogField* extra) {
  const Clock* clock = g_clock.load(std::memory_order_acquire);
  const absl::Time now = clock == nullptr ? absl::Now() : clock->Now();

  std::string line;
  line.reserve(128 + msg.size() + 32 * fields.size());
  line.append("{\"ts\":\"");
  AppendTimestamp(line, now);
  line.append("\",\"level\":\"");
  line.append(LogLevelName(level));
  line.append("\",\"msg\":");
  AppendJsonString(line, msg);
  for (const LogField& field : fields) {
    line.push_back(',');
    field.AppendTo(line);
  }
  if (extra != nullptr) {
    line.push_back(',');
    extra->AppendTo(line);
  }
  line.append("}\n");

  Output& output = GetOutput();
  absl::MutexLock lock(&output.mu);
  if (output.sink) {
    output.sink(std::string_view(line.data(), line.size() - 1));
  } else {
    WriteToStdout(line);
  }
}

}  // namespace

void LogField::AppendTo(std::string& out) const {
  if (key_ == "ts" || key_ == "level" || key_ == "msg") {
    out.append("\"_");
    out.append(key_);
    out.push_back('"');
  } else {
    AppendJsonString(out, key_);
  }
  out.push_back(':');
  switch (kind_) {
    case Kind::kString:
      AppendJsonString(out, string_);
      break;
    case Kind::kInt:
      absl::StrAppend(&out, int_);
      break;
    case Kind::kUint:
      absl::StrAppend(&out, uint_);
      break;
    case Kind::kDouble:
      AppendDouble(out, double_);
      break;
    case Kind::kBool:
      out.append(bool_ ? "true" : "false");
      break;
  }
}

void Log(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields) {
  if (!LogEnabled(level)) return;
  LogImpl(level, msg, fields, nullptr);
}

void SetMinLogLevel(LogLevel level) {
  g_min_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

LogLevel MinLogLevel() {
  return static_cast<LogLevel>(g_min_level.load(std::memory_order_relaxed));
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_min_level.load(std::memory_order_relaxed);
}

std::optional<LogLevel> ParseLogLevel(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warning" || lower == "warn") return LogLevel::kWarning;
  if (lower == "error") return LogLevel::kError;
  return std::nullopt;
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

absl::Status SetMinLogLevelFromEnv() {
  const char* value = getenv("HOOKRELAY_LOG_LEVEL");
  if (value == nullptr || *value == '\0') return absl::OkStatus();
  const std::optional<LogLevel> level = ParseLogLevel(value);
  if (!level.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HOOKRELAY_LOG_LEVEL \"", absl::CHexEscape(value),
        "\": expected debug, info, warning or error"));
  }
  SetMinLogLevel(*level);
  return absl::OkStatus();
}

void SetLogSinkForTesting(std::function<void(std::string_view line)> sink) {
  Output& output = GetOutput();
  absl::MutexLock lock(&output.mu);
  output.sink = std::move(sink);
}

void SetLogClockForTesting(const Clock* clock) {
  g_clock.store(clock, std::memory_order_release);
}

LogRateLimiter::LogRateLimiter(double per_second, int burst, const Clock& clock)
    : per_second_(per_second),
      burst_(static_cast<double>(burst)),
      clock_(clock),
      tokens_(static_cast<double>(burst)),
      last_(clock.Now()) {}

bool LogRateLimiter::Allow(uint64_t* suppressed) {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * per_second_);
    last_ = now;
  }
  if (tokens_ < 1.0) {
    ++suppressed_;
    return false;
  }
  tokens_ -= 1.0;
  if (suppressed != nullptr) *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

void LogRateLimited(LogRateLimiter& limiter, LogLevel level, std::string_view msg,
                    std::initializer_list<LogField> fields) {
  if (!LogEnabled(level)) return;
  uint64_t suppressed = 0;
  if (!limiter.Allow(&suppressed)) return;
  if (suppressed == 0) {
    LogImpl(level, msg, fields, nullptr);
  } else {
    const LogField extra("suppressed", suppressed);
    LogImpl(level, msg, fields, &extra);
  }
}

}  // namespace hookrelay::common
