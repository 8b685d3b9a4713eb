// A destination's filter (SPEC §5.4, hookrelay.v1.DestinationFilter) compiled for the ingest
// path: types as a bit set, exact event names in a hash set, prefixes apart, each condition's path
// split into its root and keys, its op an enum and its value typed. Compiled once when a
// configuration is loaded (Routing), then evaluated once per (event, destination) before jobs are
// made: an event that fails makes no job for that destination.
//
// A CompiledFilter is immutable and thread-safe. A FilterInput belongs to one thread and one
// event at a time.
#ifndef HOOKRELAY_COLLECTOR_ROUTING_DESTINATION_FILTER_H_
#define HOOKRELAY_COLLECTOR_ROUTING_DESTINATION_FILTER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/config_validate.h"
#include "hookrelay/v1/config.pb.h"
#include "hookrelay/v1/event.pb.h"

namespace hookrelay::collector {

// What a filter reads of one event. Strings are borrowed (from a RawEvent) and must outlive the
// FilterInput; free-form maps are JSON object text, empty when absent.
struct FilterEvent {
  hookrelay::v1::EventType type = hookrelay::v1::EVENT_TYPE_UNSPECIFIED;
  std::string_view event;
  std::string_view name;
  std::string_view category;
  std::string_view user_id;
  std::string_view anonymous_id;
  std::string_view group_id;
  std::string_view previous_id;
  std::string_view properties;
  std::string_view traits;
  std::string_view context;
};

// The value at a filter path in one event, decoded once. Strings are unescaped (borrowed from
// the event's text when they hold no escape, else from the FilterInput); arrays and objects keep
// their JSON text, for `contains` and `exists`.
struct FilterValue {
  enum class Kind : uint8_t { kAbsent, kString, kNumber, kBool, kArray, kObject };
  Kind kind;
  bool boolean;
  double number;
  const char* data;  // kString: the string; kArray, kObject: the value's JSON text
  size_t size;
  std::string_view text() const { return {data, size}; }
};

// The configuration's condition paths below the map roots, as one tree per root: an event's map
// is read once, in one pass over its JSON text, for every path any filter reads in it
// (destinations' filters tend to read the same few paths). Built with the filters (Routing),
// read-only afterwards; every filter evaluated on one FilterInput must share one table.
class FilterPathTable {
 public:
  // The id of `path` (root.key.key...), the same for every filter of the table.
  int Intern(const std::string& path);

  // A path's step: a key of the object above, the path id ending there (-1: none) and the
  // keys below it that some path goes on to.
  struct Node {
    std::string key;
    int path_id = -1;
    std::vector<Node> children;
  };
  // The tree of map root `root` (0 properties, 1 traits, 2 context), and the ids of the paths
  // in it.
  const Node& Tree(int root) const { return trees_[root]; }
  const std::vector<int>& PathsIn(int root) const { return paths_in_[root]; }

 private:
  absl::flat_hash_map<std::string, int> ids_;
  Node trees_[3];
  std::vector<int> paths_in_[3];
};

// The event under evaluation. A map is read on its first use, for every path of the table in
// it at once (one pass over its text, skipping what no path reads, stopping once every path is
// found), and the values are kept for the event's other destinations: each path costs one
// decode per event however many conditions name it. Allocates nothing unless a string holds
// escapes. Maps that are not a JSON object read as absent everywhere; a map is read only as far
// as the paths need, so a flaw after the last value read goes unnoticed (the ingest path only
// hands over maps it has parsed).
class FilterInput {
 public:
  explicit FilterInput(const FilterEvent& event) : event_(event) {}
  FilterInput(const FilterInput&) = delete;
  FilterInput& operator=(const FilterInput&) = delete;

  const FilterEvent& event() const { return event_; }
  // The value at `keys` under the map `root`; kAbsent when absent, null, or the map unreadable.
  // `path_id` and `table`: the table the path was interned in (-1 and nullptr for none: the
  // path is then read on its own, each time).
  const FilterValue& Lookup(common::FilterRoot root, const std::vector<std::string>& keys,
                            int path_id, const FilterPathTable* table);

  // The value of path `path_id` when this event has read it already, else nullptr.
  const FilterValue* Cached(int path_id) const {
    return static_cast<unsigned>(path_id) < kCachedPaths && known_[path_id] != 0
               ? &values_[path_id]
               : nullptr;
  }

  // Paths with an id below this are cached per event; others are looked up each time.
  static constexpr int kCachedPaths = 32;

  // For the scanner: where a decoded value goes, and storage for unescaped strings.
  void Store(int path_id, const FilterValue& value);
  bool Known(int path_id) const;
  std::string_view Keep(std::string text);

 private:
  const FilterEvent& event_;
  uint8_t scanned_[3] = {0, 0, 0};  // per map root: read yet
  uint8_t known_[kCachedPaths] = {};  // per path id: value stored
  FilterValue values_[kCachedPaths];
  FilterValue scratch_;  // an uncached path's value
  bool scratch_known_ = false;
  std::vector<std::unique_ptr<std::string>> unescaped_;
};

// Why an event does not pass; kPass when it does. The names are the metric's reason label.
enum class FilterVerdict : uint8_t { kPass = 0, kType, kEvent, kWhere };
std::string_view FilterVerdictName(FilterVerdict verdict);  // "pass", "type", "event", "where"

class CompiledFilter {
 public:
  // `filter` must be valid (common::ValidateConfig). `paths`, when given, numbers the
  // conditions' paths (shared by every filter of a configuration); it is used only here.
  explicit CompiledFilter(const hookrelay::v1::DestinationFilter& filter,
                          FilterPathTable* paths = nullptr);

  // True when the filter lets every event through (nothing set).
  bool empty() const;

  // The first part that fails, checked in the order types, events, where (in list order).
  // `failed_condition`, when given, receives the index of the failing condition for kWhere.
  FilterVerdict Evaluate(FilterInput& input, int* failed_condition = nullptr) const;

  // Evaluate, in words for people (the admin API's test): "" when the event passes, else the
  // failing part's field ("types", "events", "where[1]") and a sentence about it.
  struct Explanation {
    FilterVerdict verdict = FilterVerdict::kPass;
    std::string failed;
    std::string reason;
  };
  Explanation Explain(FilterInput& input) const;

  // The types and events parts alone: kPass, kType or kEvent.
  FilterVerdict CheckKind(const FilterEvent& event) const;

 private:
  friend class FilterSet;

  // A condition value: a string, a number or a boolean.
  struct Scalar {
    enum class Kind : uint8_t { kString, kNumber, kBool } kind = Kind::kString;
    std::string string;
    double number = 0;
    bool boolean = false;
  };
  struct Condition {
    std::string path;  // as configured, for explanations
    int path_id = -1;  // FilterPathTable id: FilterInput's lookup cache key
    common::FilterRoot root = common::FilterRoot::kProperties;
    bool in_map = true;  // root is properties, traits or context
    std::vector<std::string> keys;  // after the root; empty for the top-level strings
    common::FilterOp op = common::FilterOp::kExists;
    Scalar value;                  // eq neq gt gte lt lte contains
    std::vector<Scalar> in_values;  // in
  };

  bool Holds(const Condition& c, FilterInput& input) const {
    if (!c.in_map) return HoldsTopLevel(c, input.event());
    const FilterValue* cached = paths_ != nullptr ? input.Cached(c.path_id) : nullptr;
    return HoldsFor(c, cached != nullptr ? *cached : input.Lookup(c.root, c.keys, c.path_id, paths_),
                    input);
  }
  static bool HoldsTopLevel(const Condition& c, const FilterEvent& event);
  static bool HoldsFor(const Condition& c, const FilterValue& e, FilterInput& input) {
    const bool present = e.kind != FilterValue::Kind::kAbsent;
    switch (c.op) {
      case common::FilterOp::kExists: return present;
      case common::FilterOp::kEq: return present && ValueEquals(e, c.value);
      case common::FilterOp::kNeq: return !(present && ValueEquals(e, c.value));
      case common::FilterOp::kIn:
        for (const Scalar& v : c.in_values) {
          if (ValueEquals(e, v)) return true;
        }
        return false;
      case common::FilterOp::kContains:
        if (e.kind == FilterValue::Kind::kString) {
          return e.text().find(c.value.string) != std::string_view::npos;
        }
        return e.kind == FilterValue::Kind::kArray && ArrayContains(e, c.value, input);
      case common::FilterOp::kGt: return e.kind == FilterValue::Kind::kNumber && e.number > c.value.number;
      case common::FilterOp::kGte: return e.kind == FilterValue::Kind::kNumber && e.number >= c.value.number;
      case common::FilterOp::kLt: return e.kind == FilterValue::Kind::kNumber && e.number < c.value.number;
      case common::FilterOp::kLte: return e.kind == FilterValue::Kind::kNumber && e.number <= c.value.number;
    }
    return false;
  }
  static bool ArrayContains(const FilterValue& e, const Scalar& v, FilterInput& input);
  static bool ValueEquals(const FilterValue& e, const Scalar& v) {
    switch (v.kind) {
      case Scalar::Kind::kString:
        return e.kind == FilterValue::Kind::kString && e.text() == v.string;
      case Scalar::Kind::kNumber:
        return e.kind == FilterValue::Kind::kNumber && e.number == v.number;
      case Scalar::Kind::kBool:
        return e.kind == FilterValue::Kind::kBool && e.boolean == v.boolean;
    }
    return false;
  }

  const FilterPathTable* paths_ = nullptr;

  // Bit (1 << EventType) per allowed type; 0 = every type.
  uint32_t types_ = 0;
  bool has_events_ = false;
  absl::flat_hash_set<std::string> exact_events_;
  std::vector<std::string> event_prefixes_;
  std::vector<Condition> conditions_;
};

// The filters of one source's destinations, evaluated together for each event (the ingest
// path). Conditions on a path of the shared FilterPathTable are grouped by path: `exists` is one
// mask per path; `eq` and `in` against strings are indexed by value, so one hash lookup per path
// and event answers every destination's; the others (numbers, neq, contains, ...) are evaluated
// one by one on the path's decoded value. Each destination then passes when all its conditions'
// bits are set. Conditions on top-level strings, or of filters compiled without the table, are
// evaluated as CompiledFilter::Evaluate does; so is everything when a source has more than
// kMaxSlots grouped conditions. The verdicts are exactly those of each filter's Evaluate.
class FilterSet {
 public:
  // `filters[d]` nullptr: destination d has no filter (passes).
  explicit FilterSet(std::vector<const CompiledFilter*> filters);

  // verdicts[d] for filters[d]; `verdicts` has room for one per filter.
  void Evaluate(FilterInput& input, FilterVerdict* verdicts) const;

  static constexpr size_t kMaxSlots = 256;

 private:
  using Condition = CompiledFilter::Condition;
  static constexpr size_t kWords = kMaxSlots / 64;
  using Bits = std::array<uint64_t, kWords>;

  struct PerCondition {
    size_t slot;
    const Condition* condition;
  };
  struct PathGroup {
    int path_id = -1;
    common::FilterRoot root = common::FilterRoot::kProperties;
    const std::vector<std::string>* keys = nullptr;
    Bits exists{};  // slots of `exists` conditions
    absl::flat_hash_map<std::string, Bits> equal;  // string value -> slots it satisfies
    std::vector<PerCondition> each;
  };
  struct Member {
    const CompiledFilter* filter = nullptr;
    bool kinds = false;  // it names types or events (CheckKind has something to check)
    Bits required{};  // its grouped conditions' slots
    std::vector<const Condition*> others;  // evaluated one by one
  };

  std::vector<Member> members_;
  std::vector<PathGroup> groups_;
  const FilterPathTable* paths_ = nullptr;
  size_t words_ = 0;      // words of Bits in use
  bool grouped_ = false;  // false: every filter evaluated on its own
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_ROUTING_DESTINATION_FILTER_H_
