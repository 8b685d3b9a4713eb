// Reading the top-level fields of a serialized protobuf message without parsing it (the engines
// read a job's queue fields this way, NewJob finds where its fields are, and the gRPC front end
// writes an event's google.protobuf.Structs out as JSON: collector/ingest/proto_event_parser.h).
#ifndef HOOKRELAY_COLLECTOR_STORE_WIRE_FIELDS_H_
#define HOOKRELAY_COLLECTOR_STORE_WIRE_FIELDS_H_

#include <cstdint>
#include <cstring>
#include <string_view>

namespace hookrelay::collector::wire {

// A base-128 varint at p (at most 10 bytes), p moved past it; false when truncated or too long.
inline bool ReadVarint(const char*& p, const char* end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const auto byte = static_cast<unsigned char>(*p++);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

struct Field {
  uint64_t number = 0;
  uint32_t wire_type = 0;
  uint64_t varint = 0;     // a varint field's value, or a 64-bit field's bits
  std::string_view bytes;  // a length-delimited field's bytes
};

// Reads the field at p and moves p past it; false when the bytes are not a message (groups are
// never in the messages read this way).
inline bool NextField(const char*& p, const char* end, Field& field) {
  uint64_t tag = 0;
  if (!ReadVarint(p, end, tag)) return false;
  field.number = tag >> 3;
  field.wire_type = static_cast<uint32_t>(tag & 7);
  field.varint = 0;
  field.bytes = std::string_view();
  switch (field.wire_type) {
    case kVarint:
      return ReadVarint(p, end, field.varint);
    case kFixed64:
      if (end - p < 8) return false;
      std::memcpy(&field.varint, p, 8);  // little-endian, as every platform this builds for
      p += 8;
      return true;
    case kLengthDelimited: {
      uint64_t len = 0;
      if (!ReadVarint(p, end, len) || len > static_cast<uint64_t>(end - p)) return false;
      field.bytes = std::string_view(p, static_cast<size_t>(len));
      p += len;
      return true;
    }
    case kFixed32:
      if (end - p < 4) return false;
      p += 4;
      return true;
    default:
      return false;
  }
}

}  // namespace hookrelay::collector::wire

#endif  // HOOKRELAY_COLLECTOR_STORE_WIRE_FIELDS_H_
