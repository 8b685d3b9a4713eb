#include "deliverer/renderer.h"

#include <simdjson.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "common/time_format.h"
#include "common/json_element.h"

namespace hookrelay::deliverer {
namespace {

namespace dom = simdjson::dom;
using common::ToAbsl;

enum class Type { kTrack, kIdentify, kPage, kScreen, kGroup, kAlias, kDelete };

std::optional<Type> ParseType(std::string_view s) {
  if (s == "track") return Type::kTrack;
  if (s == "identify") return Type::kIdentify;
  if (s == "page") return Type::kPage;
  if (s == "screen") return Type::kScreen;
  if (s == "group") return Type::kGroup;
  if (s == "alias") return Type::kAlias;
  if (s == "delete") return Type::kDelete;
  return std::nullopt;
}

// The fields of event_json the body is made of. Strings are empty when absent; views point into
// the parser's document.
struct EventFields {
  std::string_view type;
  std::string_view message_id;
  std::string_view user_id;
  std::string_view anonymous_id;
  std::string_view event;
  std::string_view name;
  std::string_view category;
  std::string_view group_id;
  std::string_view previous_id;
  std::string_view timestamp;
  std::optional<dom::element> properties;
  std::optional<dom::element> traits;
  std::optional<dom::element> context;
};

absl::Status Invalid(std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("event_json: ", ToAbsl(problem)));
}

absl::Status ReadString(std::string_view key, dom::element v, std::string_view* out) {
  if (v.is_null()) return absl::OkStatus();
  if (!v.is_string()) return Invalid(absl::StrCat("\"", ToAbsl(key), "\" must be a string"));
  *out = v.get_string().value_unsafe();
  return absl::OkStatus();
}

absl::Status ReadObject(std::string_view key, dom::element v, std::optional<dom::element>* out) {
  if (v.is_null()) return absl::OkStatus();
  if (!v.is_object()) return Invalid(absl::StrCat("\"", ToAbsl(key), "\" must be an object"));
  *out = v;
  return absl::OkStatus();
}

// One pass over the top-level keys (cheaper than a lookup per field: dom::object::at_key is a
// linear scan). When a key repeats, the first occurrence wins, as with at_key.
absl::Status ReadFields(dom::object root, EventFields* f) {
  struct Seen {
    bool type = false, message_id = false, user_id = false, anonymous_id = false, event = false,
         name = false, category = false, group_id = false, previous_id = false, timestamp = false,
         properties = false, traits = false, context = false;
  } seen;
  auto first = [](bool* seen_flag) {
    const bool was = *seen_flag;
    *seen_flag = true;
    return !was;
  };
  for (dom::key_value_pair kv : root) {
    const std::string_view k = kv.key;
    absl::Status s;
    if (k == "type") {
      if (first(&seen.type)) s = ReadString(k, kv.value, &f->type);
    } else if (k == "messageId") {
      if (first(&seen.message_id)) s = ReadString(k, kv.value, &f->message_id);
    } else if (k == "userId") {
      if (first(&seen.user_id)) s = ReadString(k, kv.value, &f->user_id);
    } else if (k == "anonymousId") {
      if (first(&seen.anonymous_id)) s = ReadString(k, kv.value, &f->anonymous_id);
    } else if (k == "event") {
      if (first(&seen.event)) s = ReadString(k, kv.value, &f->event);
    } else if (k == "name") {
      if (first(&seen.name)) s = ReadString(k, kv.value, &f->name);
    } else if (k == "category") {
      if (first(&seen.category)) s = ReadString(k, kv.value, &f->category);
    } else if (k == "groupId") {
      if (first(&seen.group_id)) s = ReadString(k, kv.value, &f->group_id);
    } else if (k == "previousId") {
      if (first(&seen.previous_id)) s = ReadString(k, kv.value, &f->previous_id);
    } else if (k == "timestamp") {
      if (first(&seen.timestamp)) s = ReadString(k, kv.value, &f->timestamp);
    } else if (k == "properties") {
      if (first(&seen.properties)) s = ReadObject(k, kv.value, &f->properties);
    } else if (k == "traits") {
      if (first(&seen.traits)) s = ReadObject(k, kv.value, &f->traits);
    } else if (k == "context") {
      if (first(&seen.context)) s = ReadObject(k, kv.value, &f->context);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Require(std::string_view value, std::string_view key, std::string_view type) {
  if (!value.empty()) return absl::OkStatus();
  return Invalid(absl::StrCat("\"", ToAbsl(key), "\" is required for ", ToAbsl(type)));
}

absl::Status Validate(Type type, const EventFields& f) {
  absl::Status s;
  switch (type) {
    case Type::kDelete:
      s = Require(f.user_id, "userId", f.type);
      break;
    case Type::kAlias:
      s = Require(f.user_id, "userId", f.type);
      if (s.ok()) s = Require(f.previous_id, "previousId", f.type);
      break;
    default:
      if (f.user_id.empty() && f.anonymous_id.empty()) {
        s = Invalid(absl::StrCat("\"userId\" or \"anonymousId\" is required for ",
                                 ToAbsl(f.type)));
      }
      break;
  }
  if (s.ok() && type != Type::kDelete) s = Require(f.message_id, "messageId", f.type);
  if (s.ok() && type == Type::kTrack) s = Require(f.event, "event", f.type);
  if (s.ok() && type == Type::kGroup) s = Require(f.group_id, "groupId", f.type);
  if (s.ok()) s = Require(f.timestamp, "timestamp", f.type);
  return s;
}

void OptionalString(common::JsonObjectWriter* w, std::string_view key, std::string_view value) {
  if (!value.empty()) w->String(key, value);
}

void OptionalMap(common::JsonObjectWriter* w, std::string* out, std::string_view key,
                 const std::optional<dom::element>& value) {
  if (!value.has_value()) return;
  w->Key(key);
  common::AppendJsonElement(out, *value);
}

void AppendBody(Type type, const EventFields& f, absl::Time timestamp, std::string* out) {
  common::JsonObjectWriter w(out);
  if (type != Type::kDelete) {
    w.Int("version", 1);
    w.String("type", f.type);
    OptionalString(&w, "userId", f.user_id);
    OptionalString(&w, "anonymousId", f.anonymous_id);
    w.String("messageId", f.message_id);
  } else {
    w.String("type", f.type);
    w.String("userId", f.user_id);
  }
  switch (type) {
    case Type::kTrack:
      w.String("event", f.event);
      OptionalMap(&w, out, "properties", f.properties);
      break;
    case Type::kPage:
      OptionalString(&w, "name", f.name);
      OptionalString(&w, "category", f.category);
      OptionalMap(&w, out, "properties", f.properties);
      break;
    case Type::kScreen:
      OptionalString(&w, "name", f.name);
      OptionalMap(&w, out, "properties", f.properties);
      break;
    case Type::kIdentify:
      OptionalMap(&w, out, "traits", f.traits);
      break;
    case Type::kGroup:
      w.String("groupId", f.group_id);
      OptionalMap(&w, out, "traits", f.traits);
      break;
    case Type::kAlias:
      // The seed's reference sample carries the identities under these spaced keys; the
      // camelCase pair is what Segment-style receivers read.
      w.String("previousId", f.previous_id);
      w.String("Previous ID", f.previous_id);
      w.String("User ID", f.user_id);
      break;
    case Type::kDelete:
      break;
  }
  w.Key("timestamp");
  out->push_back('"');
  common::AppendIso8601Millis(out, timestamp);
  out->push_back('"');
  if (type != Type::kDelete) {
    w.Key("context");
    if (f.context.has_value()) {
      common::AppendJsonElement(out, *f.context);
    } else {
      out->append("{}");
    }
  }
  w.Close();
}

}  // namespace

WebhookRenderer::WebhookRenderer() : parser_(std::make_unique<dom::parser>()) {}

WebhookRenderer::~WebhookRenderer() = default;

absl::Status WebhookRenderer::Render(std::string_view event_json, std::string* body) {
  body->clear();
  dom::element root;
  // realloc_if_needed: the input is copied into the parser's own padded buffer, which is reused
  // from call to call.
  const simdjson::error_code err =
      parser_->parse(event_json.data(), event_json.size(), /*realloc_if_needed=*/true).get(root);
  if (err != simdjson::SUCCESS) {
    return Invalid(absl::StrCat("not valid JSON: ", simdjson::error_message(err)));
  }
  if (!root.is_object()) return Invalid("not a JSON object");

  EventFields fields;
  if (absl::Status s = ReadFields(root.get_object().value_unsafe(), &fields); !s.ok()) return s;
  if (fields.type.empty()) return Invalid("\"type\" is required");
  const std::optional<Type> type = ParseType(fields.type);
  if (!type.has_value()) {
    return Invalid(absl::StrCat("unknown type \"", ToAbsl(fields.type), "\""));
  }
  if (absl::Status s = Validate(*type, fields); !s.ok()) return s;
  const std::optional<absl::Time> timestamp = common::ParseIso8601(fields.timestamp);
  if (!timestamp.has_value()) {
    return Invalid("\"timestamp\" is not an ISO 8601 date-time");
  }

  body->reserve(event_json.size() + 64);
  AppendBody(*type, fields, *timestamp, body);
  return absl::OkStatus();
}

absl::StatusOr<std::string> RenderWebhookBody(std::string_view event_json) {
  WebhookRenderer renderer;
  std::string body;
  if (absl::Status s = renderer.Render(event_json, &body); !s.ok()) return s;
  return body;
}

}  // namespace hookrelay::deliverer
