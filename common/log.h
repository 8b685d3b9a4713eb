// Structured logging: one JSON object per line on stdout, e.g.
//   {"ts":"2026-11-21T10:00:00.123Z","level":"info","msg":"collector started","grpc_address":"0.0.0.0:50051"}
//
//   LogInfo("collector started", {{"grpc_address", address}, {"port", port}});
//
// Thread-safe: lines from concurrent callers never interleave (each line is written whole, with a
// single write(2) unless the kernel accepts only part of it). Strings are JSON-escaped; bytes that
// are not valid UTF-8 become U+FFFD. Field keys "ts", "level" and "msg" are reserved: a field named
// so is written as "_ts", "_level", "_msg".
//
// Lifecycle events go at info; per-event detail at debug, or through a LogRateLimiter. Never pass
// write keys, shared secrets or header values as fields.
#ifndef HOOKRELAY_COMMON_LOG_H_
#define HOOKRELAY_COMMON_LOG_H_

#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "common/clock.h"

namespace hookrelay::common {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// One `"key":value` pair of a log line. Holds views, never copies: build fields only as
// arguments of a Log call (temporaries such as `status.ToString()` live until the call returns).
class LogField {
 public:
  LogField(std::string_view key, std::string_view value)
      : key_(key), kind_(Kind::kString), string_(value) {}
  LogField(std::string_view key, const char* value)
      : LogField(key, std::string_view(value == nullptr ? "" : value)) {}
  LogField(std::string_view key, const std::string& value)
      : LogField(key, std::string_view(value)) {}
#ifndef ABSL_USES_STD_STRING_VIEW
  // Debian's Abseil has its own string_view (e.g. absl::Status::message()).
  LogField(std::string_view key, absl::string_view value)
      : LogField(key, std::string_view(value.data(), value.size())) {}
#endif
  template <std::same_as<bool> T>
  LogField(std::string_view key, T value) : key_(key), kind_(Kind::kBool), bool_(value) {}
  template <std::signed_integral T>
    requires(!std::same_as<T, char>)
  LogField(std::string_view key, T value) : key_(key), kind_(Kind::kInt), int_(value) {}
  template <std::unsigned_integral T>
    requires(!std::same_as<T, bool> && !std::same_as<T, char>)
  LogField(std::string_view key, T value) : key_(key), kind_(Kind::kUint), uint_(value) {}
  template <std::floating_point T>
  LogField(std::string_view key, T value) : key_(key), kind_(Kind::kDouble), double_(value) {}
  // Seconds, as a number (name the key accordingly, e.g. "latency_s").
  LogField(std::string_view key, absl::Duration value)
      : LogField(key, absl::ToDoubleSeconds(value)) {}

  // Appends `"key":value` (JSON) to `out`.
  void AppendTo(std::string& out) const;

 private:
  enum class Kind { kString, kInt, kUint, kDouble, kBool };
  std::string_view key_;
  Kind kind_;
  union {
    std::string_view string_;
    int64_t int_;
    uint64_t uint_;
    double double_;
    bool bool_;
  };
};

// Writes one line if `level` is at or above the minimum level.
void Log(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields = {});

inline void LogDebug(std::string_view msg, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kDebug, msg, fields);
}
inline void LogInfo(std::string_view msg, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kInfo, msg, fields);
}
inline void LogWarning(std::string_view msg, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kWarning, msg, fields);
}
inline void LogError(std::string_view msg, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kError, msg, fields);
}

// Minimum level written; kInfo until changed. Cheap (one relaxed atomic load): callers may test
// LogEnabled(kDebug) before computing expensive fields.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
bool LogEnabled(LogLevel level);

// "debug", "info", "warning" (or "warn"), "error", any case; nullopt otherwise.
std::optional<LogLevel> ParseLogLevel(std::string_view name);
// "debug", "info", "warning", "error".
std::string_view LogLevelName(LogLevel level);

// Applies HOOKRELAY_LOG_LEVEL when set and non-empty; InvalidArgument (level unchanged) when it
// names no level. For main(); libraries do not call it.
absl::Status SetMinLogLevelFromEnv();

// Redirects lines (without the trailing newline) to `sink`; nullptr restores stdout. The sink is
// called with lines one at a time, under the logger's lock, and must not log itself.
void SetLogSinkForTesting(std::function<void(std::string_view line)> sink);
// Takes "ts" from `clock` (not owned, must outlive its use); nullptr restores the real clock.
void SetLogClockForTesting(const Clock* clock);

// A token bucket for one call site of a per-event message: on average at most `per_second`
// lines, with bursts of up to `burst`. Thread-safe. Typically a function-local static:
//   static LogRateLimiter* const limiter = new LogRateLimiter(1.0, 5);
//   LogRateLimited(*limiter, LogLevel::kWarning, "receiver refused", {{"destination", id}});
class LogRateLimiter {
 public:
  // REQUIRES: per_second > 0, burst >= 1. `clock` must outlive the limiter.
  LogRateLimiter(double per_second, int burst, const Clock& clock = Clock::Real());

  LogRateLimiter(const LogRateLimiter&) = delete;
  LogRateLimiter& operator=(const LogRateLimiter&) = delete;

  // True when a line may be written now. When true and `suppressed` is non-null, sets it to the
  // number of calls refused since the previous allowed one.
  bool Allow(uint64_t* suppressed = nullptr);

 private:
  // Constant after construction.
  const double per_second_;
  const double burst_;
  const Clock& clock_;

  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

// Log() when `limiter` allows it, adding a field "suppressed" with the number of lines dropped
// since the previous one (when non-zero). Lines below the minimum level take no token.
void LogRateLimited(LogRateLimiter& limiter, LogLevel level, std::string_view msg,
                    std::initializer_list<LogField> fields = {});

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_LOG_H_
