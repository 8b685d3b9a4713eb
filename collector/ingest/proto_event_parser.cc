#include "collector/ingest/proto_event_parser.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/json_writer.h"
#include "common/proto_time.h"

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
  auto as_json = [](const google::protobuf::Struct& s) {
    return [&s](std::string* out) { AppendStructJson(out, s); };
  };
  if (e.has_properties()) common::AssignWritten(&raw.properties, as_json(e.properties()));
  if (e.has_traits()) common::AssignWritten(&raw.traits, as_json(e.traits()));
  if (e.has_context()) common::AssignWritten(&raw.context, as_json(e.context()));
  if (e.has_integrations()) {
    common::AssignWritten(&raw.integrations, as_json(e.integrations()));
    const auto& fields = e.integrations().fields();
    if (auto it = fields.find("All"); it != fields.end()) raw.flags.all = Switch(it->second);
    if (auto it = fields.find("Webhooks"); it != fields.end()) raw.flags.webhooks = Switch(it->second);
  }

  // The size the event has as compact JSON with the HTTP API's field names.
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
  return raw;
}

}  // namespace hookrelay::collector
