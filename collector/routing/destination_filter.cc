#include "collector/routing/destination_filter.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/strings.h"

namespace hookrelay::collector {
namespace {

namespace dom = simdjson::dom;
using common::FilterOp;
using common::FilterRoot;

int MapIndex(FilterRoot root) {
  switch (root) {
    case FilterRoot::kProperties: return 0;
    case FilterRoot::kTraits: return 1;
    default: return 2;
  }
}

std::string_view TopLevel(const FilterEvent& e, FilterRoot root) {
  switch (root) {
    case FilterRoot::kEvent: return e.event;
    case FilterRoot::kName: return e.name;
    case FilterRoot::kCategory: return e.category;
    case FilterRoot::kUserId: return e.user_id;
    case FilterRoot::kAnonymousId: return e.anonymous_id;
    case FilterRoot::kGroupId: return e.group_id;
    case FilterRoot::kPreviousId: return e.previous_id;
    default: return {};
  }
}

// The number in `e`, when it holds one.
std::optional<double> NumberOf(dom::element e) {
  switch (e.type()) {
    case dom::element_type::INT64: return static_cast<double>(int64_t(e));
    case dom::element_type::UINT64: return static_cast<double>(uint64_t(e));
    case dom::element_type::DOUBLE: return double(e);
    default: return std::nullopt;
  }
}

bool Compare(FilterOp op, double x, double y) {
  switch (op) {
    case FilterOp::kGt: return x > y;
    case FilterOp::kGte: return x >= y;
    case FilterOp::kLt: return x < y;
    case FilterOp::kLte: return x <= y;
    default: return false;
  }
}

absl::string_view OpName(FilterOp op) {
  switch (op) {
    case FilterOp::kEq: return "eq";
    case FilterOp::kNeq: return "neq";
    case FilterOp::kIn: return "in";
    case FilterOp::kExists: return "exists";
    case FilterOp::kGt: return "gt";
    case FilterOp::kGte: return "gte";
    case FilterOp::kLt: return "lt";
    case FilterOp::kLte: return "lte";
    case FilterOp::kContains: return "contains";
  }
  return "";
}

}  // namespace

std::optional<dom::element> FilterInput::Map(FilterRoot root) {
  const int i = MapIndex(root);
  if (parsed_[i]) return maps_[i];
  parsed_[i] = true;
  const std::string_view text = i == 0 ? event_.properties : i == 1 ? event_.traits : event_.context;
  if (text.empty()) return std::nullopt;
  // One parser per map root and thread: the three maps of one event stay valid together, and a
  // parser's buffers are reused by the thread's next event.
  thread_local dom::parser parsers[3];
  // The text is copied into a padded buffer of the thread's own (simdjson reads past the end);
  // asking the parser to copy would allocate a new buffer per parse.
  thread_local std::string buffers[3];
  std::string& buffer = buffers[i];
  buffer.assign(text.data(), text.size());
  if (buffer.capacity() < text.size() + simdjson::SIMDJSON_PADDING) {
    buffer.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  }
  dom::element parsed;
  if (parsers[i].parse(buffer.data(), buffer.size(), false).get(parsed) == simdjson::SUCCESS &&
      parsed.is_object()) {
    maps_[i] = parsed;
  }
  return maps_[i];
}

std::optional<dom::element> FilterInput::Lookup(FilterRoot root,
                                                const std::vector<std::string>& keys,
                                                int path_id) {
  const bool cached = path_id >= 0 && path_id < kCachedPaths;
  if (cached && path_state_[path_id] != 0) {
    if (path_state_[path_id] == 1) return std::nullopt;
    return elements_[path_id];
  }
  std::optional<dom::element> found = Map(root);
  if (found.has_value()) {
    dom::element e = *found;
    for (const std::string& key : keys) {
      dom::object object;
      // A missing key, or a key under something that is not an object: absent.
      if (e.get(object) != simdjson::SUCCESS || object.at_key(key).get(e) != simdjson::SUCCESS) {
        found.reset();
        break;
      }
    }
    if (found.has_value()) {
      if (e.is_null()) {
        found.reset();  // null counts as absent, as for audiences
      } else {
        found = e;
      }
    }
  }
  if (cached) {
    path_state_[path_id] = found.has_value() ? 2 : 1;
    if (found.has_value()) elements_[path_id] = *found;
  }
  return found;
}

int FilterPathTable::Intern(const std::string& path) {
  return ids_.try_emplace(path, static_cast<int>(ids_.size())).first->second;
}

std::string_view FilterVerdictName(FilterVerdict verdict) {
  switch (verdict) {
    case FilterVerdict::kPass: return "pass";
    case FilterVerdict::kType: return "type";
    case FilterVerdict::kEvent: return "event";
    case FilterVerdict::kWhere: return "where";
  }
  return "";
}

CompiledFilter::CompiledFilter(const hookrelay::v1::DestinationFilter& filter,
                               FilterPathTable* paths) {
  for (const std::string& type : filter.types()) {
    hookrelay::v1::EventType t = hookrelay::v1::EVENT_TYPE_UNSPECIFIED;
    if (hookrelay::v1::EventType_Parse(absl::AsciiStrToUpper(type), &t)) types_ |= 1u << t;
  }
  has_events_ = filter.events_size() > 0;
  for (const std::string& event : filter.events()) {
    if (absl::EndsWith(event, "*")) {
      event_prefixes_.push_back(event.substr(0, event.size() - 1));
    } else {
      exact_events_.insert(event);
    }
  }
  for (const hookrelay::v1::FilterCondition& given : filter.where()) {
    Condition& c = conditions_.emplace_back();
    c.path = given.path();
    if (paths != nullptr) c.path_id = paths->Intern(given.path());
    std::vector<std::string> segments = absl::StrSplit(given.path(), '.');
    c.root = common::ParseFilterRoot(segments.front()).value_or(FilterRoot::kProperties);
    c.keys.assign(segments.begin() + 1, segments.end());
    c.op = common::ParseFilterOp(given.op()).value_or(FilterOp::kExists);
    auto scalar = [](const google::protobuf::Value& v) {
      Scalar s;
      switch (v.kind_case()) {
        case google::protobuf::Value::kNumberValue:
          s.kind = Scalar::Kind::kNumber;
          s.number = v.number_value();
          break;
        case google::protobuf::Value::kBoolValue:
          s.kind = Scalar::Kind::kBool;
          s.boolean = v.bool_value();
          break;
        default:
          s.kind = Scalar::Kind::kString;
          s.string = v.string_value();
      }
      return s;
    };
    if (c.op == FilterOp::kIn) {
      for (const auto& v : given.value().list_value().values()) c.in_values.push_back(scalar(v));
    } else {
      c.value = scalar(given.value());
    }
  }
}

bool CompiledFilter::empty() const {
  return types_ == 0 && !has_events_ && conditions_.empty();
}

bool CompiledFilter::ElementEquals(dom::element e, const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::kString: {
      std::string_view s;
      return e.get(s) == simdjson::SUCCESS && s == v.string;
    }
    case Scalar::Kind::kNumber: {
      const std::optional<double> n = NumberOf(e);
      return n.has_value() && *n == v.number;
    }
    case Scalar::Kind::kBool: {
      bool b = false;
      return e.get(b) == simdjson::SUCCESS && b == v.boolean;
    }
  }
  return false;
}

bool CompiledFilter::Holds(const Condition& c, FilterInput& input) const {
  if (!common::IsFilterMapRoot(c.root)) {
    // A top-level string: absent when empty; compares only with strings.
    const std::string_view s = TopLevel(input.event(), c.root);
    const bool present = !s.empty();
    const bool is_string = c.value.kind == Scalar::Kind::kString;
    switch (c.op) {
      case FilterOp::kExists: return present;
      case FilterOp::kEq: return present && is_string && s == c.value.string;
      case FilterOp::kNeq: return !(present && is_string && s == c.value.string);
      case FilterOp::kContains: return present && absl::StrContains(common::ToAbsl(s), c.value.string);
      case FilterOp::kIn:
        if (!present) return false;
        for (const Scalar& v : c.in_values) {
          if (v.kind == Scalar::Kind::kString && v.string == s) return true;
        }
        return false;
      default: return false;  // gt/gte/lt/lte: a string is no number
    }
  }
  const std::optional<dom::element> found = input.Lookup(c.root, c.keys, c.path_id);
  const bool present = found.has_value();
  const dom::element e = present ? *found : dom::element();
  switch (c.op) {
    case FilterOp::kExists: return present;
    case FilterOp::kEq: return present && ElementEquals(e, c.value);
    case FilterOp::kNeq: return !(present && ElementEquals(e, c.value));
    case FilterOp::kIn:
      if (!present) return false;
      for (const Scalar& v : c.in_values) {
        if (ElementEquals(e, v)) return true;
      }
      return false;
    case FilterOp::kContains: {
      if (!present) return false;
      std::string_view s;
      if (e.get(s) == simdjson::SUCCESS) return absl::StrContains(common::ToAbsl(s), c.value.string);
      dom::array list;
      if (e.get(list) == simdjson::SUCCESS) {
        for (dom::element item : list) {
          if (ElementEquals(item, c.value)) return true;
        }
      }
      return false;
    }
    case FilterOp::kGt:
    case FilterOp::kGte:
    case FilterOp::kLt:
    case FilterOp::kLte: {
      if (!present) return false;
      const std::optional<double> n = NumberOf(e);
      return n.has_value() && Compare(c.op, *n, c.value.number);
    }
  }
  return false;
}

FilterVerdict CompiledFilter::Evaluate(FilterInput& input, int* failed_condition) const {
  const FilterEvent& event = input.event();
  if (types_ != 0 && (types_ & (1u << event.type)) == 0) return FilterVerdict::kType;
  if (has_events_) {
    if (event.type != hookrelay::v1::TRACK) return FilterVerdict::kEvent;
    bool matched = exact_events_.contains(common::ToAbsl(event.event));
    for (size_t i = 0; !matched && i < event_prefixes_.size(); ++i) {
      matched = absl::StartsWith(common::ToAbsl(event.event), event_prefixes_[i]);
    }
    if (!matched) return FilterVerdict::kEvent;
  }
  for (size_t i = 0; i < conditions_.size(); ++i) {
    if (!Holds(conditions_[i], input)) {
      if (failed_condition != nullptr) *failed_condition = static_cast<int>(i);
      return FilterVerdict::kWhere;
    }
  }
  return FilterVerdict::kPass;
}

CompiledFilter::Explanation CompiledFilter::Explain(FilterInput& input) const {
  Explanation out;
  int failed = -1;
  out.verdict = Evaluate(input, &failed);
  const std::string type = absl::AsciiStrToLower(hookrelay::v1::EventType_Name(input.event().type));
  switch (out.verdict) {
    case FilterVerdict::kPass:
      break;
    case FilterVerdict::kType:
      out.failed = "types";
      out.reason = absl::StrCat("type ", type, " is not one of the filter's types");
      break;
    case FilterVerdict::kEvent:
      out.failed = "events";
      out.reason = input.event().type == hookrelay::v1::TRACK
                       ? absl::StrCat("event \"", common::ToAbsl(input.event().event),
                                      "\" matches none of the filter's names and prefixes")
                       : absl::StrCat("the filter names track events; this is a ", type);
      break;
    case FilterVerdict::kWhere: {
      const Condition& c = conditions_[static_cast<size_t>(failed)];
      out.failed = absl::StrCat("where[", failed, "]");
      out.reason = absl::StrCat(c.path, " does not satisfy ", OpName(c.op),
                                c.op == FilterOp::kExists ? " (absent or null)" : "");
      break;
    }
  }
  return out;
}

}  // namespace hookrelay::collector
