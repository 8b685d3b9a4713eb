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

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

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

// The event under evaluation, with its maps parsed on first use and kept for the event's other
// destinations: one parse per map per event however many filters read it, and each path looked up
// once per event however many conditions name it (destinations' filters tend to read the same
// few paths). The parsers and their input buffers are the calling thread's own and are reused
// from event to event, so evaluation allocates nothing once warm. At most one FilterInput per
// thread at a time.
class FilterInput {
 public:
  explicit FilterInput(const FilterEvent& event) : event_(event) {}
  FilterInput(const FilterInput&) = delete;
  FilterInput& operator=(const FilterInput&) = delete;

  const FilterEvent& event() const { return event_; }
  // The parsed object of a map root; nullopt when the map is absent or not a JSON object.
  std::optional<simdjson::dom::element> Map(common::FilterRoot root);
  // The element at `keys` under the map `root`, nullopt when absent (or null). `path_id` (from
  // the FilterPathTable the filters were compiled with; -1 for none) keys the per-event cache.
  std::optional<simdjson::dom::element> Lookup(common::FilterRoot root,
                                               const std::vector<std::string>& keys, int path_id);

  // Paths with an id below this are cached per event; others are looked up each time.
  static constexpr int kCachedPaths = 32;

 private:
  const FilterEvent& event_;
  // Per map root (properties, traits, context): parsed yet, and the object when there is one.
  bool parsed_[3] = {false, false, false};
  std::optional<simdjson::dom::element> maps_[3];
  // Per path id: 0 not looked up yet, 1 absent, 2 present (in elements_).
  uint8_t path_state_[kCachedPaths] = {};
  simdjson::dom::element elements_[kCachedPaths];
};

// Numbers the distinct condition paths of a configuration's filters, so that an event's
// FilterInput looks each one up once for all destinations. Built with the filters (Routing),
// read-only afterwards; every filter evaluated on one FilterInput must share one table.
class FilterPathTable {
 public:
  int Intern(const std::string& path);

 private:
  absl::flat_hash_map<std::string, int> ids_;
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

 private:
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
    std::vector<std::string> keys;  // after the root; empty for the top-level strings
    common::FilterOp op = common::FilterOp::kExists;
    Scalar value;                  // eq neq gt gte lt lte contains
    std::vector<Scalar> in_values;  // in
  };

  bool Holds(const Condition& c, FilterInput& input) const;
  static bool ElementEquals(simdjson::dom::element e, const Scalar& v);

  // Bit (1 << EventType) per allowed type; 0 = every type.
  uint32_t types_ = 0;
  bool has_events_ = false;
  absl::flat_hash_set<std::string> exact_events_;
  std::vector<std::string> event_prefixes_;
  std::vector<Condition> conditions_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_ROUTING_DESTINATION_FILTER_H_
