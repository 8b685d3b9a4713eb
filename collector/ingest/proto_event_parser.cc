#include "collector/ingest/proto_event_parser.h"

#include <cstdint>
#include <cstring>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "collector/store/wire_fields.h"
#include "common/json_writer.h"
#include "common/proto_time.h"
#include "simdjson.h"

namespace hookrelay::collector {
namespace {

using google::protobuf::Value;

void AppendValueJson(std::string* out, const Value& v) {
  switch (v.kind_case()) {
    case Value::kNumberValue:
      common::AppendJsonDouble(out, v.number_value());
      break;
    case Value::kStringValue:
      common::AppendJsonString(out, v.string_value());
      break;
    case Value::kBoolValue:
      out->append(v.bool_value() ? "true" : "false");
      break;
    case Value::kStructValue:
      AppendStructJson(out, v.struct_value());
      break;
    case Value::kListValue: {
      out->push_back('[');
      bool first = true;
      for (const Value& item : v.list_value().values()) {
        if (!first) out->push_back(',');
        first = false;
        AppendValueJson(out, item);
      }
      out->push_back(']');
      break;
    }
    default:
      out->append("null");
  }
}

std::optional<bool> Switch(const Value& v) {
  if (v.kind_case() == Value::kBoolValue) return v.bool_value();
  if (v.kind_case() == Value::kStructValue) return true;
  return std::nullopt;
}

// Protobuf's parser gives up 100 messages deep, i.e. about 32 nested Structs: beyond 20 the
// protobuf parse decides.
constexpr int kMaxWireDepth = 20;

bool AppendStructWire(std::string* out, std::string_view bytes, int depth);

bool AppendStringWire(std::string* out, std::string_view s) {
  if (!simdjson::validate_utf8(s.data(), s.size())) return false;
  common::AppendJsonString(out, s);
  return true;
}

// google.protobuf.Value: exactly one field of its oneof, or none (null).
bool AppendValueWire(std::string* out, std::string_view bytes, int depth) {
  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  if (p == end) {
    out->append("null");
    return true;
  }
  wire::Field field;
  if (!wire::NextField(p, end, field)) return false;
  const bool varint = field.wire_type == wire::kVarint;
  const bool delimited = field.wire_type == wire::kLengthDelimited;
  switch (field.number) {
    case 1:  // null_value
      if (!varint) return false;
      out->append("null");
      break;
    case 2: {  // number_value
      if (field.wire_type != wire::kFixed64) return false;
      double d;
      std::memcpy(&d, &field.varint, sizeof(d));
      common::AppendJsonDouble(out, d);
      break;
    }
    case 3:  // string_value
      if (!delimited || !AppendStringWire(out, field.bytes)) return false;
      break;
    case 4:  // bool_value
      if (!varint) return false;
      out->append(field.varint != 0 ? "true" : "false");
      break;
    case 5:  // struct_value
      if (!delimited || !AppendStructWire(out, field.bytes, depth + 1)) return false;
      break;
    case 6: {  // list_value: repeated Value values = 1
      if (!delimited || depth + 1 > kMaxWireDepth) return false;
      const char* item = field.bytes.data();
      const char* const items_end = item + field.bytes.size();
      out->push_back('[');
      bool first = true;
      while (item != items_end) {
        wire::Field value;
        if (!wire::NextField(item, items_end, value) || value.number != 1 ||
            value.wire_type != wire::kLengthDelimited) {
          return false;
        }
        if (!first) out->push_back(',');
        first = false;
        if (!AppendValueWire(out, value.bytes, depth + 1)) return false;
      }
      out->push_back(']');
      break;
    }
    default:
      return false;
  }
  return p == end;  // A second field would override the first in protobuf's reading.
}

// google.protobuf.Struct: map<string, Value> fields = 1, each entry {key = 1, value = 2}.
bool AppendStructWire(std::string* out, std::string_view bytes, int depth) {
  if (depth > kMaxWireDepth) return false;
  // Keys seen, to give up on a repeated one (protobuf keeps the last): compared one by one
  // while few, hashed beyond.
  constexpr size_t kLinearKeys = 16;
  absl::InlinedVector<std::string_view, kLinearKeys> keys;
  absl::flat_hash_set<std::string_view> many;
  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  out->push_back('{');
  bool first = true;
  while (p != end) {
    wire::Field entry;
    if (!wire::NextField(p, end, entry) || entry.number != 1 ||
        entry.wire_type != wire::kLengthDelimited) {
      return false;
    }
    std::optional<std::string_view> key;
    std::optional<std::string_view> value;
    const char* e = entry.bytes.data();
    const char* const entry_end = e + entry.bytes.size();
    while (e != entry_end) {
      wire::Field f;
      if (!wire::NextField(e, entry_end, f) || f.wire_type != wire::kLengthDelimited) {
        return false;
      }
      std::optional<std::string_view>& slot = f.number == 1 ? key : value;
      if ((f.number != 1 && f.number != 2) || slot.has_value()) return false;
      slot = f.bytes;
    }
    const std::string_view k = key.value_or(std::string_view());
    if (keys.size() < kLinearKeys) {
      for (std::string_view seen : keys) {
        if (seen == k) return false;
      }
      keys.push_back(k);
      if (keys.size() == kLinearKeys) many.insert(keys.begin(), keys.end());
    } else if (!many.insert(k).second) {
      return false;
    }
    if (!first) out->push_back(',');
    first = false;
    if (!AppendStringWire(out, k)) return false;
    out->push_back(':');
    if (!value.has_value()) {
      out->append("null");
    } else if (!AppendValueWire(out, *value, depth)) {
      return false;
    }
  }
  out->push_back('}');
  return true;
}

// The fields an Event and an EventWire share, and the event's size as compact JSON once its
// objects are written.
template <typename E>
void ScalarFields(const E& e, RawEvent& raw) {
  raw.type = e.type();
  if (raw.type == hookrelay::v1::DELETE) {
    raw.type = hookrelay::v1::EVENT_TYPE_UNSPECIFIED;
    raw.unknown_type = "delete";
  } else if (!hookrelay::v1::EventType_IsValid(e.type())) {
    raw.type = hookrelay::v1::EVENT_TYPE_UNSPECIFIED;
    raw.unknown_type = absl::StrCat(static_cast<int>(e.type()));
  }
  raw.message_id = e.message_id();
  raw.user_id = e.user_id();
  raw.anonymous_id = e.anonymous_id();
  raw.event = e.event();
  raw.name = e.name();
  raw.category = e.category();
  raw.group_id = e.group_id();
  raw.previous_id = e.previous_id();
  if (e.has_timestamp()) {
    raw.timestamp = common::FromProtoTime(e.timestamp());
    if (!raw.timestamp) raw.parse_error = FieldError{"timestamp", "timestamp is out of range"};
  }
  if (e.has_sent_at()) {
    raw.sent_at = common::FromProtoTime(e.sent_at());
    if (!raw.sent_at && !raw.parse_error) {
      raw.parse_error = FieldError{"sentAt", "sentAt is out of range"};
    }
  }
}

template <typename E>
void JsonSize(const E& e, RawEvent& raw) {
  size_t n = 2;
  auto field = [&](size_t key_len, size_t value_len, bool quoted) {
    if (value_len == 0) return;
    n += key_len + 3 + value_len + (quoted ? 2 : 0) + 1;
  };
  field(4, EventTypeName(raw.type).size(), true);
  field(9, raw.message_id.size(), true);
  field(6, raw.user_id.size(), true);
  field(11, raw.anonymous_id.size(), true);
  field(5, raw.event.size(), true);
  field(4, raw.name.size(), true);
  field(8, raw.category.size(), true);
  field(7, raw.group_id.size(), true);
  field(10, raw.previous_id.size(), true);
  field(9, e.has_timestamp() ? 24 : 0, true);
  field(6, e.has_sent_at() ? 24 : 0, true);
  field(10, raw.properties.size(), false);
  field(6, raw.traits.size(), false);
  field(7, raw.context.size(), false);
  field(12, raw.integrations.size(), false);
  raw.json_bytes = n;
}

void Integrations(const google::protobuf::Struct& s, RawEvent& raw) {
  common::AssignWritten(&raw.integrations, [&s](std::string* out) { AppendStructJson(out, s); });
  const auto& fields = s.fields();
  if (auto it = fields.find("All"); it != fields.end()) raw.flags.all = Switch(it->second);
  if (auto it = fields.find("Webhooks"); it != fields.end()) {
    raw.flags.webhooks = Switch(it->second);
  }
}

}  // namespace

void AppendStructJson(std::string* out, const google::protobuf::Struct& s) {
  out->push_back('{');
  bool first = true;
  for (const auto& [key, value] : s.fields()) {
    if (!first) out->push_back(',');
    first = false;
    common::AppendJsonString(out, key);
    out->push_back(':');
    AppendValueJson(out, value);
  }
  out->push_back('}');
}

RawEvent RawEventFromProto(const hookrelay::v1::Event& e) {
  RawEvent raw;
  ScalarFields(e, raw);
  auto as_json = [](const google::protobuf::Struct& s) {
    return [&s](std::string* out) { AppendStructJson(out, s); };
  };
  if (e.has_properties()) common::AssignWritten(&raw.properties, as_json(e.properties()));
  if (e.has_traits()) common::AssignWritten(&raw.traits, as_json(e.traits()));
  if (e.has_context()) common::AssignWritten(&raw.context, as_json(e.context()));
  if (e.has_integrations()) Integrations(e.integrations(), raw);
  JsonSize(e, raw);
  return raw;
}

bool AppendStructWireJson(std::string* out, std::string_view serialized) {
  return AppendStructWire(out, serialized, 0);
}

std::optional<RawEvent> RawEventFromWire(const hookrelay::internal::EventWire& e) {
  if (e.properties_size() > 1 || e.traits_size() > 1 || e.context_size() > 1 ||
      e.integrations_size() > 1) {
    return std::nullopt;  // Sent in parts, merged by protobuf's reading.
  }
  RawEvent raw;
  ScalarFields(e, raw);
  bool ok = true;
  auto write = [&ok](std::string* json, const google::protobuf::RepeatedPtrField<std::string>& f) {
    if (!ok || f.empty()) return;
    common::AssignWritten(json, [&](std::string* out) { ok = AppendStructWire(out, f[0], 0); });
  };
  write(&raw.properties, e.properties());
  write(&raw.traits, e.traits());
  write(&raw.context, e.context());
  if (!ok) return std::nullopt;
  if (!e.integrations().empty()) {
    // Rare and small, and its switches are looked up: parsed as the Struct it is.
    google::protobuf::Struct integrations;
    if (!integrations.ParseFromString(e.integrations(0))) return std::nullopt;
    Integrations(integrations, raw);
  }
  JsonSize(e, raw);
  return raw;
}

}  // namespace hookrelay::collector
