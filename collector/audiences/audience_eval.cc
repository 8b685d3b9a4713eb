#include "collector/audiences/audience_eval.h"

#include <algorithm>
#include <cmath>

#include "google/protobuf/util/json_util.h"
#include "common/config_validate.h"

namespace hookrelay::collector {
namespace {

using google::protobuf::Value;
using hookrelay::v1::AudienceCondition;
using hookrelay::v1::EventCounts;
using hookrelay::v1::Profile;

bool SameValue(const Value& a, const Value& b) {
  if (a.kind_case() != b.kind_case()) return false;
  switch (a.kind_case()) {
    case Value::kNumberValue:
      return a.number_value() == b.number_value();
    case Value::kStringValue:
      return a.string_value() == b.string_value();
    case Value::kBoolValue:
      return a.bool_value() == b.bool_value();
    case Value::kNullValue:
      return true;
    default:
      return a.SerializeAsString() == b.SerializeAsString();
  }
}

bool TraitMatches(const AudienceCondition& c, const google::protobuf::Struct& traits) {
  auto it = traits.fields().find(c.trait());
  const bool present = it != traits.fields().end() && it->second.kind_case() != Value::kNullValue &&
                       it->second.kind_case() != Value::KIND_NOT_SET;
  if (c.op() == "exists") return present;
  if (c.op() == "neq") return !present || !SameValue(it->second, c.value());
  if (!present) return false;
  const Value& v = it->second;
  if (c.op() == "eq") return SameValue(v, c.value());
  if (c.op() == "contains") {
    if (v.kind_case() == Value::kStringValue) {
      return v.string_value().find(c.value().string_value()) != std::string::npos;
    }
    if (v.kind_case() == Value::kListValue) {
      for (const Value& item : v.list_value().values()) {
        if (SameValue(item, c.value())) return true;
      }
    }
    return false;
  }
  if (v.kind_case() != Value::kNumberValue) return false;
  const double x = v.number_value();
  const double y = c.value().number_value();
  if (c.op() == "gt") return x > y;
  if (c.op() == "gte") return x >= y;
  if (c.op() == "lt") return x < y;
  if (c.op() == "lte") return x <= y;
  return false;
}

// The count of `event` within `window` before `now`, and when it next drops.
struct Count {
  uint64_t n = 0;
  absl::Time drops_at = absl::InfiniteFuture();
};

Count CountWithin(const std::vector<Profile>& profiles, const std::string& event,
                  absl::Duration window, absl::Time now) {
  const int64_t width = BucketSecondsFor(window);
  const int64_t window_s = absl::ToInt64Seconds(window);
  const int64_t now_s = absl::ToUnixSeconds(now);
  Count count;
  for (const Profile& p : profiles) {
    for (const EventCounts& e : p.events()) {
      if (e.event() != event || e.bucket_seconds() != width) continue;
      for (int i = 0; i < e.starts_size() && i < e.counts_size(); ++i) {
        // A bucket counts while it overlaps (now - window, now].
        const int64_t leaves_s = e.starts(i) + width + window_s;
        if (leaves_s <= now_s || e.counts(i) == 0) continue;
        count.n += e.counts(i);
        count.drops_at = std::min(count.drops_at, absl::FromUnixSeconds(leaves_s));
      }
    }
  }
  return count;
}

}  // namespace

Evaluation EvaluateAudience(const hookrelay::v1::Audience& audience,
                            const std::vector<Profile>& profiles, absl::Time now) {
  Evaluation out;
  if (profiles.empty()) return out;  // No profile (never seen, or deleted): not a member.
  // Traits: the newest profile's values win.
  std::vector<const Profile*> by_age;
  for (const Profile& p : profiles) by_age.push_back(&p);
  std::sort(by_age.begin(), by_age.end(),
            [](const Profile* a, const Profile* b) { return a->updated_ms() < b->updated_ms(); });
  google::protobuf::Struct traits;
  for (const Profile* p : by_age) {
    for (const auto& [key, value] : p->traits().fields()) (*traits.mutable_fields())[key] = value;
  }
  const bool all = audience.rule().match() != "any";
  bool result = all;
  for (const AudienceCondition& c : audience.rule().conditions()) {
    bool matched = false;
    if (!c.trait().empty()) {
      matched = TraitMatches(c, traits);
    } else {
      const absl::Duration window = common::ParseAudienceWindow(c.within()).value_or(absl::Hours(1));
      const Count count = CountWithin(profiles, c.event(), window, now);
      matched = (!c.has_count_gte() || count.n >= c.count_gte()) &&
                (!c.has_count_lte() || count.n <= c.count_lte());
      out.recheck_at = std::min(out.recheck_at, count.drops_at);
    }
    result = all ? (result && matched) : (result || matched);
  }
  out.member = result;
  return out;
}

AudienceInputs::AudienceInputs(const hookrelay::v1::Config& config) {
  for (const hookrelay::v1::Audience& a : config.audiences()) {
    for (const std::string& source : a.sources()) {
      SourceInputs& in = sources_[source];
      for (const AudienceCondition& c : a.rule().conditions()) {
        if (!c.trait().empty()) {
          continue;
        }
        absl::StatusOr<absl::Duration> window = common::ParseAudienceWindow(c.within());
        if (!window.ok()) continue;
        std::vector<int64_t>& widths = in.events[c.event()];
        const int64_t width = BucketSecondsFor(*window);
        if (std::find(widths.begin(), widths.end(), width) == widths.end()) widths.push_back(width);
      }
    }
  }
}

bool AudienceInputs::DeltaFor(const std::string& source, hookrelay::v1::EventType type,
                              const std::string& event, const std::string& traits_json,
                              absl::Time at, hookrelay::v1::ProfileDelta* delta) const {
  // Traits are kept for every identify, so an audience defined later sees them; events are
  // counted from the time an audience reads them (counting every event name of every user
  // would make profiles unbounded).
  if (type == hookrelay::v1::IDENTIFY && !traits_json.empty()) {
    if (!google::protobuf::util::JsonStringToMessage(traits_json, delta->mutable_traits()).ok()) {
      return false;
    }
    delta->set_at_ms(absl::ToUnixMillis(at));
    return delta->traits().fields_size() > 0;
  }
  if (type == hookrelay::v1::TRACK) {
    auto it = sources_.find(source);
    if (it == sources_.end()) return false;
    auto e = it->second.events.find(event);
    if (e == it->second.events.end()) return false;
    delta->set_event(event);
    for (int64_t width : e->second) delta->add_bucket_seconds(width);
    delta->set_at_ms(absl::ToUnixMillis(at));
    return true;
  }
  return false;
}

}  // namespace hookrelay::collector
