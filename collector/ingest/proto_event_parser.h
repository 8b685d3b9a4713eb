// Converts gRPC events (hookrelay.v1.Event) into RawEvents for the shared validation core.
#ifndef HOOKRELAY_COLLECTOR_INGEST_PROTO_EVENT_PARSER_H_
#define HOOKRELAY_COLLECTOR_INGEST_PROTO_EVENT_PARSER_H_

#include <string>

#include "collector/model/event.h"
#include "google/protobuf/struct.pb.h"
#include "hookrelay/v1/event.pb.h"

namespace hookrelay::collector {

// Converts `event`. Problems (an ingest-forbidden type, an out-of-range timestamp) are recorded
// in RawEvent::parse_error; json_bytes is the size the event has as compact JSON, computed from
// its fields (string escapes are not counted).
RawEvent RawEventFromProto(const hookrelay::v1::Event& event);

// Appends a google.protobuf.Struct as a compact JSON object (numbers that are integral print as
// integers; NaN/Infinity as null).
void AppendStructJson(std::string* out, const google::protobuf::Struct& s);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_INGEST_PROTO_EVENT_PARSER_H_
