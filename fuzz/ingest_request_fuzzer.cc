// Bytes as a serialized hookrelay.v1.IngestRequest (what gRPC Ingest receives): parsed, each event
// converted as the gRPC front end does and validated. The collector's one-pass reading
// (RawEventFromWire) must agree with protobuf's wherever it answers: the same fields, objects of
// the same size (their keys may come in another order).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "collector/model/event.h"
#include "collector/ingest/proto_event_parser.h"
#include "hookrelay/internal/ingest_wire.pb.h"
#include "hookrelay/v1/collector.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hookrelay::v1::IngestRequest request;
  const bool parsed = request.ParseFromArray(data, static_cast<int>(size));
  // As the gRPC front end: the one-pass reading stands only when every event of the request
  // has one; then protobuf's reading must accept the request and agree on each event.
  hookrelay::internal::IngestRequestWire wire;
  if (wire.ParseFromArray(data, static_cast<int>(size))) {
    std::vector<hookrelay::collector::RawEvent> one_pass;
    for (const hookrelay::internal::EventWire& event : wire.events()) {
      std::optional<hookrelay::collector::RawEvent> raw =
          hookrelay::collector::RawEventFromWire(event);
      if (!raw.has_value()) break;
      one_pass.push_back(*std::move(raw));
    }
    if (one_pass.size() == static_cast<size_t>(wire.events_size())) {
      if (!parsed || request.events_size() != wire.events_size()) std::abort();
      for (int i = 0; i < request.events_size(); ++i) {
        const hookrelay::collector::RawEvent full =
            hookrelay::collector::RawEventFromProto(request.events(i));
        const hookrelay::collector::RawEvent& one = one_pass[i];
        if (one.json_bytes != full.json_bytes || one.user_id != full.user_id ||
            one.properties.size() != full.properties.size() ||
            one.context.size() != full.context.size() || one.traits.size() != full.traits.size() ||
            one.integrations.size() != full.integrations.size()) {
          std::abort();
        }
      }
    }
  }
  if (!parsed) return 0;
  for (const hookrelay::v1::Event& event : request.events()) {
    hookrelay::collector::RawEvent raw = hookrelay::collector::RawEventFromProto(event);
    (void)hookrelay::collector::Normalize(std::move(raw), absl::FromUnixSeconds(1700000000));
  }
  return 0;
}
