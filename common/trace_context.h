// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` and `tracestate`
// values a client sends with an ingest request, kept with each of its jobs and sent on every
// webhook attempt with a new parent (span) id.
//
// traceparent, version 00: `00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>`, lowercase hex
// only, neither id all zeros. Version ff is invalid; a higher version is read as 00 when its
// first 55 characters have that shape and the next one, if any, is '-' (W3C §4.3, future
// versions); the value is then kept as version 00. An invalid traceparent is ignored, never an
// error: the request goes on without a trace context (W3C: "the vendor MUST ignore" it).
//
// tracestate is kept only beside a valid traceparent, after stripping surrounding whitespace, when
// it is at most kMaxTracestateBytes of printable ASCII; otherwise it is dropped (W3C lets a
// vendor drop tracestate it cannot keep whole).
//
// Pure functions; thread-safe.
#ifndef HOOKRELAY_COMMON_TRACE_CONTEXT_H_
#define HOOKRELAY_COMMON_TRACE_CONTEXT_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/random/bit_gen_ref.h"

namespace hookrelay::common {

inline constexpr std::string_view kTraceparentHeader = "traceparent";
inline constexpr std::string_view kTracestateHeader = "tracestate";
// W3C §3.3.1.5: a vendor should propagate at least 512 characters of tracestate.
inline constexpr size_t kMaxTracestateBytes = 512;

struct TraceParent {
  std::string trace_id;   // 32 lowercase hex digits, not all zero
  std::string parent_id;  // 16 lowercase hex digits, not all zero
  std::string flags;      // 2 lowercase hex digits

  // "00-<trace_id>-<parent_id>-<flags>".
  std::string ToString() const;
};

// The traceparent read from `value`, or nullopt when it is invalid (see above).
std::optional<TraceParent> ParseTraceparent(std::string_view value);

// `value` stripped of surrounding spaces and tabs when it may be kept (at most
// kMaxTracestateBytes, printable ASCII only), else "".
std::string SanitizeTracestate(std::string_view value);

// What an ingest request's trace context headers leave to keep with its jobs: both empty unless
// the traceparent is valid; then the traceparent as version 00 and the sanitized tracestate.
struct TraceContext {
  std::string traceparent;
  std::string tracestate;
};
TraceContext TraceContextFromHeaders(std::string_view traceparent, std::string_view tracestate);

// 16 lowercase hex digits, never all zero: a new parent id for an outgoing request.
std::string NewSpanId(absl::BitGenRef gen);

// The traceparent to send on one attempt: `stored`'s trace id and flags with a new parent id
// drawn from `gen`; "" when `stored` is empty or invalid.
std::string ChildTraceparent(std::string_view stored, absl::BitGenRef gen);

// The trace id of `stored` (a traceparent), or "" when it is empty or invalid.
std::string TraceIdOf(std::string_view stored);

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_TRACE_CONTEXT_H_
