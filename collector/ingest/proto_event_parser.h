// Converts gRPC events (hookrelay.v1.Event) into RawEvents for the shared validation core.
#ifndef HOOKRELAY_COLLECTOR_INGEST_PROTO_EVENT_PARSER_H_
#define HOOKRELAY_COLLECTOR_INGEST_PROTO_EVENT_PARSER_H_

#include <optional>
#include <string>
#include <string_view>

#include "collector/model/event.h"
#include "google/protobuf/struct.pb.h"
#include "hookrelay/internal/ingest_wire.pb.h"
#include "hookrelay/v1/event.pb.h"

namespace hookrelay::collector {

// Converts `event`. Problems (an ingest-forbidden type, an out-of-range timestamp) are recorded
// in RawEvent::parse_error; json_bytes is the size the event has as compact JSON, computed from
// its fields (string escapes are not counted).
RawEvent RawEventFromProto(const hookrelay::v1::Event& event);

// The same from the collector's own reading of the event (hookrelay/internal/ingest_wire.proto):
// properties, traits and context written out as JSON straight from their wire bytes, keys in
// the order they came. nullopt when a Struct is anything but plain — malformed, a repeated
// key, a field set twice, an unknown field, text that is not UTF-8, nesting deeper than 20 —
// and the caller then parses the request as hookrelay.v1.IngestRequest (protobuf's rules decide).
std::optional<RawEvent> RawEventFromWire(const hookrelay::internal::EventWire& event);

// A serialized google.protobuf.Struct appended as compact JSON, like AppendStructJson; false
// (and `out` partly written) for the cases RawEventFromWire gives up on.
bool AppendStructWireJson(std::string* out, std::string_view serialized);

// Appends a google.protobuf.Struct as a compact JSON object (numbers that are integral print as
// integers; NaN/Infinity as null).
void AppendStructJson(std::string* out, const google::protobuf::Struct& s);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_INGEST_PROTO_EVENT_PARSER_H_
