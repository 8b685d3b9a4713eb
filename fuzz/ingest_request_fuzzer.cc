// Bytes as a serialized hookrelay.v1.IngestRequest (what gRPC Ingest receives): parsed, each event
// converted as the gRPC front end does and validated.
#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/time/time.h"
#include "collector/model/event.h"
#include "collector/ingest/proto_event_parser.h"
#include "hookrelay/v1/collector.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hookrelay::v1::IngestRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  for (const hookrelay::v1::Event& event : request.events()) {
    hookrelay::collector::RawEvent raw = hookrelay::collector::RawEventFromProto(event);
    (void)hookrelay::collector::Normalize(std::move(raw), absl::FromUnixSeconds(1700000000));
  }
  return 0;
}
