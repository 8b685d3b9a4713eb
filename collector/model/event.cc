#include "collector/model/event.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_writer.h"
#include "common/time_format.h"
#include "common/uuid.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::EventType;

bool NeedsIdentity(EventType t) {
  return t == hookrelay::v1::IDENTIFY || t == hookrelay::v1::TRACK || t == hookrelay::v1::PAGE ||
         t == hookrelay::v1::SCREEN || t == hookrelay::v1::GROUP;
}

FieldError Missing(std::string_view field, std::string_view what) {
  return FieldError{std::string(field), std::string(what)};
}

}  // namespace

std::optional<FieldError> CheckIdentifier(std::string_view field, std::string_view value) {
  size_t chars = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if ((c & 0xC0) != 0x80) ++chars;  // Not a UTF-8 continuation byte: a new character.
    // C0 controls and DEL as single bytes; C1 controls (U+0080–U+009F) as C2 80..C2 9F.
    const bool c0 = c < 0x20 || c == 0x7F;
    const bool c1 = c == 0xC2 && i + 1 < value.size() &&
                    static_cast<unsigned char>(value[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(value[i + 1]) <= 0x9F;
    if (c0 || c1) {
      const unsigned code = c1 ? static_cast<unsigned char>(value[i + 1]) : c;
      return FieldError{std::string(field),
                        absl::StrFormat("%s contains the control character U+%04X at character "
                                        "%d; control characters are not allowed",
                                        std::string(field), code, chars)};
    }
  }
  if (chars > kMaxIdentifierChars) {
    return FieldError{std::string(field), absl::StrCat(std::string(field), " is ", chars,
                                                       " characters, at most ",
                                                       kMaxIdentifierChars, " allowed")};
  }
  return std::nullopt;
}

std::optional<FieldError> CheckMessageId(std::string_view value) {
  const size_t chars = common::Utf8Length(value);
  if (chars > kMaxMessageIdChars) {
    return FieldError{"messageId", absl::StrCat("messageId is ", chars, " characters, at most ",
                                                kMaxMessageIdChars, " allowed")};
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c > 0x7E) {
      return FieldError{"messageId",
                        absl::StrFormat("messageId has byte 0x%02X at offset %d; it becomes the "
                                        "Idempotency-Key header, so only printable ASCII "
                                        "(0x20-0x7E) is allowed",
                                        c, i)};
    }
  }
  if (!value.empty() && (value.front() == ' ' || value.back() == ' ')) {
    return FieldError{"messageId", "messageId may not start or end with a space"};
  }
  return std::nullopt;
}

std::string_view EventTypeName(EventType type) {
  switch (type) {
    case hookrelay::v1::TRACK: return "track";
    case hookrelay::v1::IDENTIFY: return "identify";
    case hookrelay::v1::PAGE: return "page";
    case hookrelay::v1::SCREEN: return "screen";
    case hookrelay::v1::GROUP: return "group";
    case hookrelay::v1::ALIAS: return "alias";
    case hookrelay::v1::DELETE: return "delete";
    default: return "";
  }
}

EventType ParseIngestType(std::string_view name) {
  if (name == "track") return hookrelay::v1::TRACK;
  if (name == "identify") return hookrelay::v1::IDENTIFY;
  if (name == "page") return hookrelay::v1::PAGE;
  if (name == "screen") return hookrelay::v1::SCREEN;
  if (name == "group") return hookrelay::v1::GROUP;
  if (name == "alias") return hookrelay::v1::ALIAS;
  return hookrelay::v1::EVENT_TYPE_UNSPECIFIED;
}

std::variant<NormalizedEvent, FieldError> Normalize(RawEvent raw, absl::Time received_at) {
  if (raw.json_bytes > kMaxEventBytes) {
    return FieldError{"event", absl::StrCat("event is ", raw.json_bytes, " bytes of JSON, at most ",
                                            kMaxEventBytes, " allowed")};
  }
  if (raw.parse_error.has_value()) return *std::move(raw.parse_error);
  const EventType type = raw.type;
  if (type == hookrelay::v1::EVENT_TYPE_UNSPECIFIED) {
    if (raw.unknown_type.empty()) return Missing("type", "type is required");
    return FieldError{"type", absl::StrCat("unknown type \"", raw.unknown_type,
                                           "\"; expected track, identify, page, screen, group "
                                           "or alias")};
  }
  if (NeedsIdentity(type) && raw.user_id.empty() && raw.anonymous_id.empty()) {
    return Missing("userId", "userId or anonymousId is required");
  }
  if (type == hookrelay::v1::TRACK && raw.event.empty()) {
    return Missing("event", "event is required for track");
  }
  if (type == hookrelay::v1::GROUP && raw.group_id.empty()) {
    return Missing("groupId", "groupId is required for group");
  }
  if (type == hookrelay::v1::ALIAS) {
    if (raw.user_id.empty()) return Missing("userId", "userId is required for alias");
    if (raw.previous_id.empty()) return Missing("previousId", "previousId is required for alias");
  }
  // Identifiers end up in storage keys, indexes, headers and logs: checked before anything else
  // looks at them.
  if (raw.message_id.empty()) {
    raw.message_id = common::NewUuidV4();
  } else if (auto error = CheckMessageId(raw.message_id)) {
    return *std::move(error);
  }
  for (const auto& [field, value] :
       {std::pair<std::string_view, const std::string*>{"userId", &raw.user_id},
        {"anonymousId", &raw.anonymous_id},
        {"groupId", &raw.group_id},
        {"previousId", &raw.previous_id}}) {
    if (auto error = CheckIdentifier(field, *value)) return *std::move(error);
  }

  // Skew correction: the caller's clock may be off; sentAt and timestamp were both read from it,
  // so their difference is trustworthy and is applied to our clock.
  absl::Time timestamp = received_at;
  if (raw.timestamp.has_value()) {
    timestamp = raw.sent_at.has_value() ? received_at - (*raw.sent_at - *raw.timestamp)
                                        : *raw.timestamp;
  }

  NormalizedEvent out;
  out.type = type;
  out.received_at = received_at;
  out.flags = raw.flags;
  std::string& json = out.json;
  json.reserve(raw.json_bytes + 160);
  common::JsonObjectWriter w(&json);
  w.String("type", EventTypeName(type));
  w.String("messageId", raw.message_id);
  if (!raw.user_id.empty()) w.String("userId", raw.user_id);
  if (!raw.anonymous_id.empty()) w.String("anonymousId", raw.anonymous_id);
  if (!raw.event.empty()) w.String("event", raw.event);
  if (!raw.name.empty()) w.String("name", raw.name);
  if (!raw.category.empty()) w.String("category", raw.category);
  if (!raw.group_id.empty()) w.String("groupId", raw.group_id);
  if (!raw.previous_id.empty()) w.String("previousId", raw.previous_id);
  if (!raw.properties.empty()) w.Raw("properties", raw.properties);
  if (!raw.traits.empty()) w.Raw("traits", raw.traits);
  w.Raw("context", raw.context.empty() ? std::string_view("{}") : std::string_view(raw.context));
  if (!raw.integrations.empty()) w.Raw("integrations", raw.integrations);
  w.Key("timestamp");
  json.push_back('"');
  common::AppendIso8601Millis(&json, timestamp);
  json.push_back('"');
  if (raw.timestamp.has_value()) {
    w.Key("originalTimestamp");
    json.push_back('"');
    common::AppendIso8601Millis(&json, *raw.timestamp);
    json.push_back('"');
  }
  if (raw.sent_at.has_value()) {
    w.Key("sentAt");
    json.push_back('"');
    common::AppendIso8601Millis(&json, *raw.sent_at);
    json.push_back('"');
  }
  w.Key("receivedAt");
  json.push_back('"');
  common::AppendIso8601Millis(&json, received_at);
  json.push_back('"');
  w.Close();

  out.message_id = std::move(raw.message_id);
  out.user_id = std::move(raw.user_id);
  out.anonymous_id = std::move(raw.anonymous_id);
  return out;
}

}  // namespace hookrelay::collector
