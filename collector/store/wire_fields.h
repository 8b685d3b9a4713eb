// Reading the top-level fields of a serialized protobuf message without parsing it (the engines
// read a job's queue fields this way, and NewJob finds where its fields are).
#ifndef HOOKRELAY_COLLECTOR_STORE_WIRE_FIELDS_H_
#define HOOKRELAY_COLLECTOR_STORE_WIRE_FIELDS_H_

#include <cstdint>
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

struct Field {
  uint64_t number = 0;
  uint64_t varint = 0;     // a varint field's value
  std::string_view bytes;  // a length-delimited field's bytes
};

// Reads the field at p and moves p past it; false when the bytes are not a message (groups are
// never in the messages read this way).
inline bool NextField(const char*& p, const char* end, Field& field) {
  uint64_t tag = 0;
  if (!ReadVarint(p, end, tag)) return false;
  field.number = tag >> 3;
  field.varint = 0;
  field.bytes = std::string_view();
  switch (tag & 7) {
    case 0:  // varint
      return ReadVarint(p, end, field.varint);
    case 1:  // 64-bit
      if (end - p < 8) return false;
      p += 8;
      return true;
    case 2: {  // length-delimited
      uint64_t len = 0;
      if (!ReadVarint(p, end, len) || len > static_cast<uint64_t>(end - p)) return false;
      field.bytes = std::string_view(p, static_cast<size_t>(len));
      p += len;
      return true;
    }
    case 5:  // 32-bit
      if (end - p < 4) return false;
      p += 4;
      return true;
    default:
      return false;
  }
}

}  // namespace hookrelay::collector::wire

#endif  // HOOKRELAY_COLLECTOR_STORE_WIRE_FIELDS_H_
