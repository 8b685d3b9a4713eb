#include "collector/ingest/http_event_parser.h"

#include <simdjson.h>

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/json_element.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "common/time_format.h"

namespace hookrelay::collector {
namespace {

namespace dom = simdjson::dom;
using common::ToAbsl;

// Writes object `item` with the fields of `batch` it lacks (item values win), as compact JSON.
void AppendMerged(std::string* out, dom::object item, dom::object batch) {
  common::AppendJsonObject(out, item);
  out->pop_back();  // reopen the object for the batch-level fields
  bool first = item.size() == 0;
  for (dom::key_value_pair field : batch) {
    dom::element ignored;
    if (item.at_key(field.key).get(ignored) == simdjson::SUCCESS) continue;
    if (!first) out->push_back(',');
    first = false;
    common::AppendJsonString(out, field.key);
    out->push_back(':');
    common::AppendJsonElement(out, field.value);
  }
  out->push_back('}');
}

// Reads a destination switch: false turns off; true or an options object turns on; null or
// other values leave it unset.
std::optional<bool> Switch(dom::element e) {
  switch (e.type()) {
    case dom::element_type::BOOL: return bool(e);
    case dom::element_type::OBJECT: return true;
    default: return std::nullopt;
  }
}

void ReadFlags(dom::object integrations, IntegrationsFlags* flags) {
  dom::element v;
  if (integrations.at_key("All").get(v) == simdjson::SUCCESS) flags->all = Switch(v);
  if (integrations.at_key("Webhooks").get(v) == simdjson::SUCCESS) flags->webhooks = Switch(v);
}

// The batch-level fields merged into (or defaulting) each item.
struct BatchDefaults {
  std::optional<dom::object> context;
  std::optional<dom::object> integrations;
  std::optional<absl::Time> sent_at;
};

class ItemReader {
 public:
  explicit ItemReader(RawEvent* raw) : raw_(raw) {}

  void Fail(std::string_view field, std::string reason) {
    if (!raw_->parse_error.has_value()) {
      raw_->parse_error = FieldError{std::string(field), std::move(reason)};
    }
  }

  // A string field; null counts as absent.
  void ReadString(std::string_view field, dom::element v, std::string* out) {
    if (v.is_null()) return;
    if (!v.is_string()) {
      Fail(field, absl::StrCat(ToAbsl(field), " must be a string"));
      return;
    }
    out->assign(std::string_view(v));
  }

  // An identifier: a string, or an integer (which some SDKs send) kept as its decimal text.
  void ReadId(std::string_view field, dom::element v, std::string* out) {
    if (v.is_null()) return;
    if (v.is_string()) {
      out->assign(std::string_view(v));
    } else if (v.type() == dom::element_type::INT64) {
      *out = absl::StrCat(int64_t(v));
    } else if (v.type() == dom::element_type::UINT64) {
      *out = absl::StrCat(uint64_t(v));
    } else {
      Fail(field, absl::StrCat(ToAbsl(field), " must be a string"));
    }
  }

  void ReadTime(std::string_view field, dom::element v, std::optional<absl::Time>* out) {
    if (v.is_null()) return;
    if (!v.is_string()) {
      Fail(field, absl::StrCat(ToAbsl(field), " must be an ISO 8601 date-time string"));
      return;
    }
    *out = common::ParseIso8601(std::string_view(v));
    if (!out->has_value()) {
      Fail(field, absl::StrCat(ToAbsl(field), " is not an ISO 8601 date-time (e.g. 2012-12-02T00:30:08.276Z)"));
    }
  }

  // Returns the object or nullopt (absent/null, or wrong type which is recorded).
  std::optional<dom::object> ReadObject(std::string_view field, dom::element v) {
    if (v.is_null()) return std::nullopt;
    if (!v.is_object()) {
      Fail(field, absl::StrCat(ToAbsl(field), " must be an object"));
      return std::nullopt;
    }
    return dom::object(v);
  }

 private:
  RawEvent* raw_;
};

void ReadItem(dom::object item, hookrelay::v1::EventType endpoint_type,
              const BatchDefaults& defaults, std::string* scratch, RawEvent* raw) {
  ItemReader r(raw);
  raw->type = endpoint_type;
  std::optional<dom::object> properties, traits, context, integrations;
  // How often each object key occurs (a duplicated key keeps its last value).
  struct {
    int properties = 0, traits = 0, context = 0, integrations = 0;
  } seen;
  for (dom::key_value_pair field : item) {
    const std::string_view k = field.key;
    const dom::element v = field.value;
    if (k == "type") {
      if (endpoint_type != hookrelay::v1::EVENT_TYPE_UNSPECIFIED) continue;
      if (!v.is_string()) {
        r.Fail("type", "type must be a string");
        continue;
      }
      raw->type = ParseIngestType(std::string_view(v));
      if (raw->type == hookrelay::v1::EVENT_TYPE_UNSPECIFIED) {
        raw->unknown_type = std::string(std::string_view(v).substr(0, 64));
        if (raw->unknown_type.empty()) raw->unknown_type = "\"\"";
      }
    } else if (k == "messageId") {
      r.ReadString(k, v, &raw->message_id);
    } else if (k == "userId") {
      r.ReadId(k, v, &raw->user_id);
    } else if (k == "anonymousId") {
      r.ReadId(k, v, &raw->anonymous_id);
    } else if (k == "event") {
      r.ReadString(k, v, &raw->event);
    } else if (k == "name") {
      r.ReadString(k, v, &raw->name);
    } else if (k == "category") {
      r.ReadString(k, v, &raw->category);
    } else if (k == "groupId") {
      r.ReadId(k, v, &raw->group_id);
    } else if (k == "previousId") {
      r.ReadId(k, v, &raw->previous_id);
    } else if (k == "timestamp") {
      r.ReadTime(k, v, &raw->timestamp);
    } else if (k == "sentAt") {
      r.ReadTime(k, v, &raw->sent_at);
    } else if (k == "properties") {
      properties = r.ReadObject(k, v);
      ++seen.properties;
    } else if (k == "traits") {
      traits = r.ReadObject(k, v);
      ++seen.traits;
    } else if (k == "context") {
      context = r.ReadObject(k, v);
      ++seen.context;
    } else if (k == "integrations") {
      integrations = r.ReadObject(k, v);
      ++seen.integrations;
    }
    // Other keys (writeKey, channel, version, client-set receivedAt...) are not part of the
    // normalised event.
  }
  if (!raw->sent_at.has_value()) raw->sent_at = defaults.sent_at;

  auto object = [](dom::object o) {
    return [o](std::string* out) { common::AppendJsonObject(out, o); };
  };
  auto merged = [](dom::object item, dom::object batch) {
    return [item, batch](std::string* out) { AppendMerged(out, item, batch); };
  };
  if (properties) common::AssignWritten(&raw->properties, object(*properties));
  if (traits) common::AssignWritten(&raw->traits, object(*traits));
  if (context && defaults.context) {
    common::AssignWritten(&raw->context, merged(*context, *defaults.context));
  } else if (context || defaults.context) {
    common::AssignWritten(&raw->context, object(context ? *context : *defaults.context));
  }
  if (integrations && defaults.integrations) {
    common::AssignWritten(&raw->integrations, merged(*integrations, *defaults.integrations));
    ReadFlags(*defaults.integrations, &raw->flags);
    ReadFlags(*integrations, &raw->flags);  // item values win
  } else if (integrations || defaults.integrations) {
    const dom::object obj = integrations ? *integrations : *defaults.integrations;
    common::AssignWritten(&raw->integrations, object(obj));
    ReadFlags(obj, &raw->flags);
  }

  // The item's size as compact JSON (the event size limit), without writing it all again: the
  // objects written above unchanged (no defaults merged in) count by their written size; keys and
  // the other values are written one at a time into `scratch`.
  // (Only for a key that occurs once: with duplicates, what was written is the last one's.)
  const bool own_properties = properties && seen.properties == 1;
  const bool own_traits = traits && seen.traits == 1;
  const bool own_context = context && !defaults.context && seen.context == 1;
  const bool own_integrations = integrations && !defaults.integrations && seen.integrations == 1;
  size_t bytes = 2;  // {}
  size_t fields = 0;
  for (dom::key_value_pair field : item) {
    scratch->clear();
    common::AppendJsonString(scratch, field.key);
    bytes += scratch->size() + 1;  // "key":
    const std::string_view k = field.key;
    if (k == "properties" && own_properties && field.value.is_object()) {
      bytes += raw->properties.size();
    } else if (k == "traits" && own_traits && field.value.is_object()) {
      bytes += raw->traits.size();
    } else if (k == "context" && own_context && field.value.is_object()) {
      bytes += raw->context.size();
    } else if (k == "integrations" && own_integrations && field.value.is_object()) {
      bytes += raw->integrations.size();
    } else {
      scratch->clear();
      common::AppendJsonElement(scratch, field.value);
      bytes += scratch->size();
    }
    ++fields;
  }
  if (fields > 1) bytes += fields - 1;  // commas
  raw->json_bytes = bytes;
}

}  // namespace

struct HttpEventParser::Impl {
  dom::parser parser;
  std::string scratch;
};

HttpEventParser::HttpEventParser() : impl_(std::make_unique<Impl>()) {}
HttpEventParser::~HttpEventParser() = default;

absl::StatusOr<ParsedBody> HttpEventParser::Parse(std::string_view endpoint,
                                                  const std::string& body) {
  if (impl_->parser.capacity() < body.size() || impl_->parser.max_depth() != kMaxJsonDepth) {
    if (impl_->parser.allocate(std::max(body.size(), size_t{4096}), kMaxJsonDepth) !=
        simdjson::SUCCESS) {
      return absl::ResourceExhaustedError("cannot allocate parser memory for the request body");
    }
  }
  const bool padded = body.capacity() - body.size() >= simdjson::SIMDJSON_PADDING;
  dom::element root;
  const simdjson::error_code err = impl_->parser.parse(body.data(), body.size(), !padded).get(root);
  if (err == simdjson::DEPTH_ERROR) {
    return absl::InvalidArgumentError(
        absl::StrCat("body: JSON nested deeper than ", kMaxJsonDepth, " levels"));
  }
  if (err == simdjson::UTF8_ERROR) {
    return absl::InvalidArgumentError("body: not valid UTF-8");
  }
  if (err == simdjson::NUMBER_ERROR) {
    return absl::InvalidArgumentError(
        "body: a number is out of range (integers must fit in 64 bits, decimals in a double)");
  }
  if (err != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("body: not valid JSON (", simdjson::error_message(err), ")"));
  }
  if (!root.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  const dom::object obj(root);

  ParsedBody out;
  dom::element v;
  if (obj.at_key("writeKey").get(v) == simdjson::SUCCESS && v.is_string()) {
    out.write_key = std::string(std::string_view(v));
  }

  if (endpoint != "batch") {
    const hookrelay::v1::EventType type = ParseIngestType(endpoint);
    if (type == hookrelay::v1::EVENT_TYPE_UNSPECIFIED) {
      return absl::NotFoundError(absl::StrCat("no endpoint /v1/", ToAbsl(endpoint)));
    }
    RawEvent& raw = out.events.emplace_back();
    ReadItem(obj, type, BatchDefaults{}, &impl_->scratch, &raw);
    if (raw.json_bytes > kMaxEventBytes) {
      return absl::ResourceExhaustedError(absl::StrCat("event is ", raw.json_bytes,
                                                       " bytes of JSON, at most ", kMaxEventBytes,
                                                       " allowed"));
    }
    return out;
  }

  if (obj.at_key("batch").get(v) != simdjson::SUCCESS || !v.is_array()) {
    return absl::InvalidArgumentError("batch: required, must be an array of events");
  }
  const dom::array batch(v);
  const size_t n = batch.size();
  if (n > kMaxBatchEvents) {
    return absl::ResourceExhaustedError(
        absl::StrCat("batch: ", n, " events, at most ", kMaxBatchEvents, " allowed"));
  }
  BatchDefaults defaults;
  {
    RawEvent batch_level;
    ItemReader r(&batch_level);
    if (obj.at_key("context").get(v) == simdjson::SUCCESS) defaults.context = r.ReadObject("context", v);
    if (obj.at_key("integrations").get(v) == simdjson::SUCCESS) {
      defaults.integrations = r.ReadObject("integrations", v);
    }
    if (obj.at_key("sentAt").get(v) == simdjson::SUCCESS) r.ReadTime("sentAt", v, &defaults.sent_at);
    if (batch_level.parse_error.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch-level ", batch_level.parse_error->reason));
    }
  }
  out.events.resize(n);
  size_t i = 0;
  for (dom::element item : batch) {
    RawEvent& raw = out.events[i];
    if (!item.is_object()) {
      raw.parse_error = FieldError{"event", "each batch item must be a JSON object"};
    } else {
      ReadItem(dom::object(item), hookrelay::v1::EVENT_TYPE_UNSPECIFIED, defaults,
               &impl_->scratch, &raw);
      if (raw.json_bytes > kMaxEventBytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("batch[", i, "]: event is ", raw.json_bytes, " bytes of JSON, at most ",
                         kMaxEventBytes, " allowed"));
      }
    }
    ++i;
  }
  return out;
}

}  // namespace hookrelay::collector
