// Bytes as (traceparent, tracestate), split at the first NUL byte, through the ingest side of
// common/trace_context.h: a traceparent that parses prints back as a valid version 00 value that
// parses to the same fields; a child keeps the trace id and flags with a new non-zero parent id;
// a kept tracestate is at most kMaxTracestateBytes of printable ASCII.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "absl/random/bit_gen_ref.h"
#include "common/trace_context.h"

namespace {

bool LowerHex(std::string_view s) {
  for (const char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using hookrelay::common::TraceParent;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view traceparent = input.substr(0, nul);
  const std::string_view tracestate =
      nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

  const std::optional<TraceParent> parsed = hookrelay::common::ParseTraceparent(traceparent);
  const hookrelay::common::TraceContext context =
      hookrelay::common::TraceContextFromHeaders(traceparent, tracestate);
  if (!parsed.has_value()) {
    if (!context.traceparent.empty() || !context.tracestate.empty()) std::abort();
    return 0;
  }
  const std::string printed = parsed->ToString();
  if (printed.size() != 55 || printed.compare(0, 3, "00-") != 0) std::abort();
  if (!LowerHex(parsed->trace_id) || !LowerHex(parsed->parent_id) || !LowerHex(parsed->flags)) {
    std::abort();
  }
  const std::optional<TraceParent> again = hookrelay::common::ParseTraceparent(printed);
  if (!again.has_value() || again->ToString() != printed) std::abort();
  if (context.traceparent != printed) std::abort();
  if (context.tracestate.size() > hookrelay::common::kMaxTracestateBytes) std::abort();
  for (const char c : context.tracestate) {
    if (c < 0x20 || c > 0x7e) std::abort();
  }

  std::mt19937_64 gen(size);
  const std::optional<TraceParent> child =
      hookrelay::common::ParseTraceparent(hookrelay::common::ChildTraceparent(printed, gen));
  if (!child.has_value() || child->trace_id != parsed->trace_id || child->flags != parsed->flags) {
    std::abort();
  }
  return 0;
}
