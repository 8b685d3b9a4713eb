#include "common/trace_context.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"

namespace hookrelay::common {
namespace {

// Version 00's length: 2 + 1 + 32 + 1 + 16 + 1 + 2.
constexpr size_t kTraceparentSize = 55;

// W3C allows lowercase hex only ("HEXDIGLC"): uppercase is invalid, not normalised.
bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

}  // namespace

std::string TraceParent::ToString() const {
  return absl::StrCat("00-", trace_id, "-", parent_id, "-", flags);
}

std::optional<TraceParent> ParseTraceparent(std::string_view value) {
  // Optional whitespace around a header value is not part of it (RFC 9110 §5.5).
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.size() < kTraceparentSize) return std::nullopt;
  const std::string_view version = value.substr(0, 2);
  if (!IsLowerHex(version) || version == "ff") return std::nullopt;
  if (version == "00") {
    if (value.size() != kTraceparentSize) return std::nullopt;
  } else if (value.size() > kTraceparentSize && value[kTraceparentSize] != '-') {
    // A future version may append fields, each after a '-'.
    return std::nullopt;
  }
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') return std::nullopt;
  TraceParent out;
  const std::string_view trace_id = value.substr(3, 32);
  const std::string_view parent_id = value.substr(36, 16);
  const std::string_view flags = value.substr(53, 2);
  if (!IsLowerHex(trace_id) || !IsLowerHex(parent_id) || !IsLowerHex(flags)) return std::nullopt;
  if (AllZero(trace_id) || AllZero(parent_id)) return std::nullopt;
  out.trace_id = std::string(trace_id);
  out.parent_id = std::string(parent_id);
  out.flags = std::string(flags);
  return out;
}

std::string SanitizeTracestate(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.size() > kMaxTracestateBytes) return std::string();
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) return std::string();
  }
  return std::string(value);
}

TraceContext TraceContextFromHeaders(std::string_view traceparent, std::string_view tracestate) {
  TraceContext out;
  std::optional<TraceParent> parent = ParseTraceparent(traceparent);
  if (!parent.has_value()) return out;
  out.traceparent = parent->ToString();
  out.tracestate = SanitizeTracestate(tracestate);
  return out;
}

std::string NewSpanId(absl::BitGenRef gen) {
  uint64_t id = 0;
  while (id == 0) id = absl::Uniform<uint64_t>(gen);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kHex[id & 0xf];
    id >>= 4;
  }
  return out;
}

std::string ChildTraceparent(std::string_view stored, absl::BitGenRef gen) {
  std::optional<TraceParent> parent = ParseTraceparent(stored);
  if (!parent.has_value()) return std::string();
  parent->parent_id = NewSpanId(gen);
  return parent->ToString();
}

std::string TraceIdOf(std::string_view stored) {
  std::optional<TraceParent> parent = ParseTraceparent(stored);
  return parent.has_value() ? std::move(parent->trace_id) : std::string();
}

}  // namespace hookrelay::common
