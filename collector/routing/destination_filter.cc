#include "collector/routing/destination_filter.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/strings.h"

namespace hookrelay::collector {
namespace {

using common::FilterOp;
using common::FilterRoot;
using Node = FilterPathTable::Node;
using Kind = FilterValue::Kind;

int MapIndex(FilterRoot root) {
  switch (root) {
    case FilterRoot::kProperties: return 0;
    case FilterRoot::kTraits: return 1;
    default: return 2;
  }
}

std::string_view MapText(const FilterEvent& e, int index) {
  return index == 0 ? e.properties : index == 1 ? e.traits : e.context;
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

constexpr FilterValue kAbsent{Kind::kAbsent, false, 0, nullptr, 0};
// The path id under which an uncached path's value is stored (FilterInput::scratch_).
constexpr int kScratchId = -2;

// Between tokens: JSON's four spaces; other control bytes are no valid token either, so reading
// them as space costs one compare and changes no verdict on valid text.
bool IsSpace(char c) { return static_cast<unsigned char>(c) <= ' '; }
bool IsDelimiter(char c) { return c == ',' || c == '}' || c == ']' || IsSpace(c); }

// Eight bytes at a time (SWAR): the bit 7 of each byte of `x` equal to `c` is set; bytes above
// the first match may be flagged too, so only the first flag (the lowest address on this
// little-endian machine) is exact.
constexpr uint64_t kOnes = 0x0101010101010101ULL;
constexpr uint64_t kHighs = 0x8080808080808080ULL;
inline uint64_t BytesEqual(uint64_t x, unsigned char c) {
  const uint64_t y = x ^ (kOnes * c);
  return (y - kOnes) & ~y & kHighs;
}
inline uint64_t Load8(const char* p) {
  uint64_t x;
  std::memcpy(&x, p, sizeof(x));
  return x;
}
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the SWAR scan reads little-endian words");

// A plain decimal ("-12", "27.5") with at most 15 digits, exactly as std::from_chars reads it:
// the digits make an integer below 2^53 and the fraction a power of ten below 10^22, both exact
// doubles, so their quotient is the one correctly rounded value. False for anything else
// (exponents, more digits, a lone "-", leading zeros), which from_chars then reads.
bool FastNumber(std::string_view token, double* out) {
  const char* p = token.data();
  const char* end = p + token.size();
  const bool negative = p < end && *p == '-';
  if (negative) ++p;
  if (p == end || (*p == '0' && p + 1 < end && p[1] != '.')) return false;
  uint64_t mantissa = 0;
  int digits = 0;
  int fraction = -1;  // digits after the point; -1 before it
  for (; p < end; ++p) {
    const char c = *p;
    if (c >= '0' && c <= '9') {
      if (++digits > 15) return false;
      mantissa = mantissa * 10 + static_cast<uint64_t>(c - '0');
      if (fraction >= 0) ++fraction;
    } else if (c == '.' && fraction < 0 && digits > 0) {
      fraction = 0;
    } else {
      return false;
    }
  }
  if (digits == 0 || fraction == 0) return false;
  static constexpr double kTens[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7,
                                     1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
  double value = static_cast<double>(mantissa);
  if (fraction > 0) value /= kTens[fraction];
  *out = negative ? -value : value;
  return true;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool Hex4(const char* p, const char* end, uint32_t* out) {
  if (end - p < 4) return false;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const int d = HexDigit(p[i]);
    if (d < 0) return false;
    v = v << 4 | static_cast<uint32_t>(d);
  }
  *out = v;
  return true;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | cp >> 6));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | cp >> 12));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | cp >> 18));
    out->push_back(static_cast<char>(0x80 | (cp >> 12 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The JSON string body `raw` (between the quotes) with its escapes resolved; false when an
// escape is not one JSON allows.
bool Unescape(std::string_view raw, std::string* out) {
  out->clear();
  out->reserve(raw.size());
  const char* p = raw.data();
  const char* end = p + raw.size();
  while (p < end) {
    if (*p != '\\') {
      out->push_back(*p++);
      continue;
    }
    if (++p == end) return false;
    switch (*p++) {
      case '"': out->push_back('"'); break;
      case '\\': out->push_back('\\'); break;
      case '/': out->push_back('/'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'u': {
        uint32_t cp = 0;
        if (!Hex4(p, end, &cp)) return false;
        p += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate: its low half must follow
          uint32_t low = 0;
          if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !Hex4(p + 2, end, &low) ||
              low < 0xDC00 || low >= 0xE000) {
            return false;
          }
          p += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          return false;
        }
        AppendUtf8(cp, out);
        break;
      }
      default: return false;
    }
  }
  return true;
}

// A forward reader over JSON text that reads only what the paths need and skips the rest
// without decoding it. Bounds-checked: text that cannot be read makes it return false (or
// kError), never read past the end.
class Reader {
 public:
  enum class Status { kOk, kDone, kError };

  Reader(std::string_view text, FilterInput& input)
      : p_(text.data()), end_(text.data() + text.size()), input_(input) {}

  bool SkipSpace() {
    while (p_ < end_ && IsSpace(*p_)) ++p_;
    return p_ < end_;
  }
  bool AtEnd() { return !SkipSpace(); }
  bool Consume(char c) {
    if (!SkipSpace() || *p_ != c) return false;
    ++p_;
    return true;
  }

  // At '"': the string's bytes between the quotes; `escaped` when they hold a backslash.
  // (Strings here are keys and short values: a byte loop costs less than memchr's set-up.)
  bool RawString(std::string_view* raw, bool* escaped) {
    const char* start = ++p_;
    bool backslash = false;
    for (;;) {
      // The next '"' or '\\', eight bytes at a time while they last.
      while (end_ - p_ >= 8) {
        const uint64_t x = Load8(p_);
        const uint64_t hit = BytesEqual(x, '"') | BytesEqual(x, '\\');
        if (hit != 0) {
          p_ += __builtin_ctzll(hit) / 8;
          break;
        }
        p_ += 8;
      }
      while (p_ < end_ && *p_ != '"' && *p_ != '\\') ++p_;
      if (p_ >= end_) return false;
      if (*p_ == '"') break;
      backslash = true;
      p_ += 2;  // the escaped character cannot end the string
      if (p_ > end_) return false;
    }
    *raw = std::string_view(start, static_cast<size_t>(p_ - start));
    *escaped = backslash;
    ++p_;
    return true;
  }

  // Any value, not decoded.
  bool SkipValue() {
    if (!SkipSpace()) return false;
    const char c = *p_;
    if (c == '"') {
      std::string_view raw;
      bool escaped = false;
      return RawString(&raw, &escaped);
    }
    if (c == '{' || c == '[') {
      int depth = 0;
      while (p_ < end_) {
        // The next '"' or bracket, eight bytes at a time: '[' and ']' are '{' and '}' less 0x20.
        while (end_ - p_ >= 8) {
          const uint64_t x = Load8(p_);
          const uint64_t folded = x | (kOnes * 0x20);
          const uint64_t hit =
              BytesEqual(x, '"') | BytesEqual(folded, '{') | BytesEqual(folded, '}');
          if (hit != 0) {
            p_ += __builtin_ctzll(hit) / 8;
            break;
          }
          p_ += 8;
        }
        if (p_ >= end_) break;
        const char d = *p_;
        if (d == '"') {
          std::string_view raw;
          bool escaped = false;
          if (!RawString(&raw, &escaped)) return false;
          continue;
        }
        if (d == '{' || d == '[') {
          ++depth;
        } else if (d == '}' || d == ']') {
          if (--depth == 0) {
            ++p_;
            return true;
          }
        }
        ++p_;
      }
      return false;
    }
    const char* start = p_;
    while (p_ < end_ && !IsDelimiter(*p_)) ++p_;
    return p_ > start;
  }

  // The value here, decoded (strings unescaped, numbers parsed; null reads as absent).
  bool Value(FilterValue* out) {
    if (!SkipSpace()) return false;
    const char c = *p_;
    const char* start = p_;
    if (c == '"') {
      std::string_view raw;
      bool escaped = false;
      if (!RawString(&raw, &escaped)) return false;
      if (escaped) {
        std::string text;
        if (!Unescape(raw, &text)) return false;
        raw = input_.Keep(std::move(text));
      }
      *out = FilterValue{Kind::kString, false, 0, raw.data(), raw.size()};
      return true;
    }
    if (c == '{' || c == '[') {
      if (!SkipValue()) return false;
      *out = FilterValue{c == '{' ? Kind::kObject : Kind::kArray, false, 0, start,
                         static_cast<size_t>(p_ - start)};
      return true;
    }
    while (p_ < end_ && !IsDelimiter(*p_)) ++p_;
    const std::string_view token(start, static_cast<size_t>(p_ - start));
    if (token == "true" || token == "false") {
      *out = FilterValue{Kind::kBool, token == "true", 0, nullptr, 0};
      return true;
    }
    if (token == "null") {
      *out = kAbsent;
      return true;
    }
    if (token.empty() || !(token[0] == '-' || (token[0] >= '0' && token[0] <= '9'))) return false;
    double number = 0;
    if (!FastNumber(token, &number)) {
      // JSON wants a digit after the point, which from_chars does not ask for.
      const size_t point = token.find('.');
      if (point != std::string_view::npos &&
          (point + 1 == token.size() || token[point + 1] < '0' || token[point + 1] > '9')) {
        return false;
      }
      const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), number);
      if (error != std::errc() || end != token.data() + token.size()) return false;
    }
    *out = FilterValue{Kind::kNumber, false, number, nullptr, 0};
    return true;
  }

  // At an object: stores the values of `node`'s children found in it, descending into the
  // objects some path goes on into. kDone once `*remaining` paths are all found.
  Status Object(const Node& node, int* remaining) {
    if (!Consume('{')) return Status::kError;
    if (Consume('}')) return Status::kOk;
    std::string unescaped_key;
    uint64_t seen = 0;  // children of `node` met so far
    for (;;) {
      if (!SkipSpace() || *p_ != '"') return Status::kError;
      std::string_view key;
      bool escaped = false;
      if (!RawString(&key, &escaped)) return Status::kError;
      if (escaped) {
        if (!Unescape(key, &unescaped_key)) return Status::kError;
        key = unescaped_key;
      }
      if (!Consume(':')) return Status::kError;
      const Node* child = nullptr;
      for (size_t i = 0; i < node.children.size(); ++i) {
        if (node.children[i].key != key) continue;
        // A repeated key: the first one counts (children beyond 64 rely on Known alone).
        const uint64_t bit = i < 64 ? uint64_t{1} << i : 0;
        if ((seen & bit) == 0) child = &node.children[i];
        seen |= bit;
        break;
      }
      if (child == nullptr || input_.Known(child->path_id)) {
        // Not read by any path, or read already.
        if (!SkipValue()) return Status::kError;
      } else if (!child->children.empty() && SkipSpace() && *p_ == '{') {
        if (child->path_id != kNoPath) {
          Reader copy = *this;
          FilterValue whole;
          if (!copy.Value(&whole)) return Status::kError;
          input_.Store(child->path_id, whole);
          if (--*remaining == 0) return Status::kDone;
        }
        const Status inner = Object(*child, remaining);
        if (inner != Status::kOk) return inner;
      } else {
        FilterValue value;
        if (!Value(&value)) return Status::kError;
        if (child->path_id != kNoPath) {
          input_.Store(child->path_id, value);
          if (--*remaining == 0) return Status::kDone;
        }
      }
      if (Consume(',')) continue;
      if (Consume('}')) return Status::kOk;
      return Status::kError;
    }
  }

  static constexpr int kNoPath = -1;

 private:
  const char* p_;
  const char* end_;
  FilterInput& input_;
};

}  // namespace

void FilterInput::Store(int path_id, const FilterValue& value) {
  if (path_id == kScratchId) {
    scratch_ = value;
    scratch_known_ = true;
    return;
  }
  if (path_id < 0 || path_id >= kCachedPaths) return;
  values_[path_id] = value;
  known_[path_id] = 1;
}

bool FilterInput::Known(int path_id) const {
  if (path_id == kScratchId) return scratch_known_;
  return path_id >= 0 && path_id < kCachedPaths && known_[path_id] != 0;
}

std::string_view FilterInput::Keep(std::string text) {
  return *unescaped_.emplace_back(std::make_unique<std::string>(std::move(text)));
}

const FilterValue& FilterInput::Lookup(FilterRoot root, const std::vector<std::string>& keys,
                                       int path_id, const FilterPathTable* table) {
  const int index = MapIndex(root);
  const std::string_view text = MapText(event_, index);
  if (keys.empty()) {
    // The map itself: an object when its text reads as one.
    Reader reader(text, *this);
    FilterValue whole;
    scratch_ = reader.SkipSpace() && reader.Value(&whole) && whole.kind == Kind::kObject &&
                       reader.AtEnd()
                   ? whole
                   : kAbsent;
    return scratch_;
  }
  if (table != nullptr && path_id >= 0 && path_id < kCachedPaths) {
    if (!known_[path_id]) {
      if (!scanned_[index]) {
        scanned_[index] = 1;
        const std::vector<int>& ids = table->PathsIn(index);
        int remaining = static_cast<int>(ids.size());
        const Reader::Status status =
            text.empty() ? Reader::Status::kError : Reader(text, *this).Object(table->Tree(index), &remaining);
        // Paths not found are absent; in an unreadable map, every path is.
        for (const int id : ids) {
          if (status == Reader::Status::kError || !known_[id]) Store(id, kAbsent);
        }
      }
      if (!known_[path_id]) Store(path_id, kAbsent);
    }
    return values_[path_id];
  }
  // A path of no table: read on its own.
  Node tree;
  Node* node = &tree;
  for (const std::string& key : keys) {
    node = &node->children.emplace_back();
    node->key = key;
  }
  node->path_id = kScratchId;
  scratch_known_ = false;
  int remaining = 1;
  const Reader::Status status =
      text.empty() ? Reader::Status::kError : Reader(text, *this).Object(tree, &remaining);
  if (status == Reader::Status::kError || !scratch_known_) scratch_ = kAbsent;
  return scratch_;
}

int FilterPathTable::Intern(const std::string& path) {
  const auto [it, inserted] = ids_.try_emplace(path, static_cast<int>(ids_.size()));
  const int id = it->second;
  if (!inserted || id >= FilterInput::kCachedPaths) return id;
  std::vector<std::string> segments = absl::StrSplit(path, '.');
  const std::optional<FilterRoot> root = common::ParseFilterRoot(segments.front());
  if (!root.has_value() || !common::IsFilterMapRoot(*root) || segments.size() < 2) return id;
  Node* node = &trees_[MapIndex(*root)];
  for (size_t i = 1; i < segments.size(); ++i) {
    Node* next = nullptr;
    for (Node& c : node->children) {
      if (c.key == segments[i]) next = &c;
    }
    if (next == nullptr) {
      next = &node->children.emplace_back();
      next->key = segments[i];
    }
    node = next;
  }
  node->path_id = id;
  paths_in_[MapIndex(*root)].push_back(id);
  return id;
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
                               FilterPathTable* paths)
    : paths_(paths) {
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
    c.in_map = common::IsFilterMapRoot(c.root);
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

bool CompiledFilter::HoldsTopLevel(const Condition& c, const FilterEvent& event) {
  // A top-level string: absent when empty; compares only with strings.
  const std::string_view s = TopLevel(event, c.root);
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

bool CompiledFilter::ArrayContains(const FilterValue& e, const Scalar& v, FilterInput& input) {
  // An array holds the value when one of its items equals it.
  Reader items(e.text(), input);
  if (!items.Consume('[') || items.Consume(']')) return false;
  for (;;) {
    FilterValue item;
    if (!items.Value(&item)) return false;
    if (ValueEquals(item, v)) return true;
    if (!items.Consume(',')) return false;
  }
}

FilterVerdict CompiledFilter::CheckKind(const FilterEvent& event) const {
  if (types_ != 0 && (types_ & (1u << event.type)) == 0) return FilterVerdict::kType;
  if (has_events_) {
    if (event.type != hookrelay::v1::TRACK) return FilterVerdict::kEvent;
    bool matched = exact_events_.contains(common::ToAbsl(event.event));
    for (size_t i = 0; !matched && i < event_prefixes_.size(); ++i) {
      matched = absl::StartsWith(common::ToAbsl(event.event), event_prefixes_[i]);
    }
    if (!matched) return FilterVerdict::kEvent;
  }
  return FilterVerdict::kPass;
}

FilterVerdict CompiledFilter::Evaluate(FilterInput& input, int* failed_condition) const {
  if (const FilterVerdict kind = CheckKind(input.event()); kind != FilterVerdict::kPass) return kind;
  for (size_t i = 0; i < conditions_.size(); ++i) {
    if (!Holds(conditions_[i], input)) {
      if (failed_condition != nullptr) *failed_condition = static_cast<int>(i);
      return FilterVerdict::kWhere;
    }
  }
  return FilterVerdict::kPass;
}

FilterSet::FilterSet(std::vector<const CompiledFilter*> filters) {
  members_.resize(filters.size());
  for (size_t d = 0; d < filters.size(); ++d) {
    members_[d].filter = filters[d];
    members_[d].kinds = filters[d] != nullptr && (filters[d]->types_ != 0 || filters[d]->has_events_);
  }
  // Grouping needs one table for all, and room for the slots.
  size_t slots = 0;
  for (const CompiledFilter* f : filters) {
    if (f == nullptr) continue;
    if (f->paths_ == nullptr || (paths_ != nullptr && f->paths_ != paths_)) return;
    paths_ = f->paths_;
    for (const Condition& c : f->conditions_) {
      if (c.in_map && c.path_id >= 0 && c.path_id < FilterInput::kCachedPaths) ++slots;
    }
  }
  if (slots > kMaxSlots) return;
  grouped_ = true;
  words_ = (slots + 63) / 64;
  absl::flat_hash_map<int, size_t> group_of;  // path id -> index in groups_
  size_t slot = 0;
  for (Member& m : members_) {
    if (m.filter == nullptr) continue;
    for (const Condition& c : m.filter->conditions_) {
      if (!c.in_map || c.path_id < 0 || c.path_id >= FilterInput::kCachedPaths) {
        m.others.push_back(&c);
        continue;
      }
      const auto [it, inserted] = group_of.try_emplace(c.path_id, groups_.size());
      if (inserted) {
        PathGroup& g = groups_.emplace_back();
        g.path_id = c.path_id;
        g.root = c.root;
        g.keys = &c.keys;
      }
      PathGroup& g = groups_[it->second];
      const size_t s = slot++;
      const uint64_t bit = uint64_t{1} << (s % 64);
      m.required[s / 64] |= bit;
      using Scalar = CompiledFilter::Scalar;
      const bool all_strings =
          c.op == FilterOp::kIn &&
          std::all_of(c.in_values.begin(), c.in_values.end(),
                      [](const Scalar& v) { return v.kind == Scalar::Kind::kString; });
      if (c.op == FilterOp::kExists) {
        g.exists[s / 64] |= bit;
      } else if (c.op == FilterOp::kEq && c.value.kind == Scalar::Kind::kString) {
        g.equal[c.value.string][s / 64] |= bit;
      } else if (all_strings) {
        for (const Scalar& v : c.in_values) g.equal[v.string][s / 64] |= bit;
      } else {
        g.each.push_back({s, &c});
      }
    }
  }
}

void FilterSet::Evaluate(FilterInput& input, FilterVerdict* verdicts) const {
  if (!grouped_) {
    for (size_t d = 0; d < members_.size(); ++d) {
      const CompiledFilter* f = members_[d].filter;
      verdicts[d] = f == nullptr ? FilterVerdict::kPass : f->Evaluate(input);
    }
    return;
  }
  // The slots whose condition holds for this event.
  Bits holds{};
  for (const PathGroup& g : groups_) {
    const FilterValue* cached = input.Cached(g.path_id);
    const FilterValue& e = cached != nullptr ? *cached : input.Lookup(g.root, *g.keys, g.path_id, paths_);
    if (e.kind != Kind::kAbsent) {
      for (size_t w = 0; w < words_; ++w) holds[w] |= g.exists[w];
    }
    if (e.kind == Kind::kString && !g.equal.empty()) {
      if (auto it = g.equal.find(absl::string_view(e.data, e.size)); it != g.equal.end()) {
        for (size_t w = 0; w < words_; ++w) holds[w] |= it->second[w];
      }
    }
    for (const PerCondition& c : g.each) {
      if (CompiledFilter::HoldsFor(*c.condition, e, input)) holds[c.slot / 64] |= uint64_t{1} << (c.slot % 64);
    }
  }
  for (size_t d = 0; d < members_.size(); ++d) {
    const Member& m = members_[d];
    if (m.filter == nullptr) {
      verdicts[d] = FilterVerdict::kPass;
      continue;
    }
    FilterVerdict v = m.kinds ? m.filter->CheckKind(input.event()) : FilterVerdict::kPass;
    if (v == FilterVerdict::kPass) {
      for (size_t w = 0; w < words_; ++w) {
        if ((m.required[w] & ~holds[w]) != 0) v = FilterVerdict::kWhere;
      }
      for (size_t i = 0; v == FilterVerdict::kPass && i < m.others.size(); ++i) {
        if (!m.filter->Holds(*m.others[i], input)) v = FilterVerdict::kWhere;
      }
    }
    verdicts[d] = v;
  }
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
