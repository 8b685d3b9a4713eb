#include "collector/store/profile_delta.h"

#include <algorithm>

#include "common/config_validate.h"

namespace hookrelay::collector {

using hookrelay::v1::EventCounts;
using hookrelay::v1::Profile;

int64_t BucketSecondsFor(absl::Duration window) {
  if (window <= absl::Hours(1)) return 60;
  if (window <= absl::Hours(48)) return 3600;
  return 86400;
}

int64_t RetentionSeconds(int64_t bucket_seconds) {
  if (bucket_seconds <= 60) return 3600 + 60;
  if (bucket_seconds <= 3600) return 48 * 3600 + 3600;
  return absl::ToInt64Seconds(common::kMaxAudienceWindow) + 86400;
}

void ApplyProfileDelta(const hookrelay::v1::ProfileDelta& delta, Profile& profile) {
  for (const auto& [key, value] : delta.traits().fields()) {
    (*profile.mutable_traits()->mutable_fields())[key] = value;
  }
  const int64_t at_s = delta.at_ms() / 1000;
  for (int64_t width : delta.bucket_seconds()) {
    if (width <= 0) continue;
    EventCounts* counts = nullptr;
    for (EventCounts& e : *profile.mutable_events()) {
      if (e.event() == delta.event() && e.bucket_seconds() == width) counts = &e;
    }
    if (counts == nullptr) {
      counts = profile.add_events();
      counts->set_event(delta.event());
      counts->set_bucket_seconds(width);
    }
    const int64_t start = at_s - ((at_s % width) + width) % width;
    // Buckets are ascending; events mostly arrive in order, so the last one is the usual match.
    int i = counts->starts_size();
    while (i > 0 && counts->starts(i - 1) > start) --i;
    if (i > 0 && counts->starts(i - 1) == start) {
      counts->set_counts(i - 1, counts->counts(i - 1) + 1);
    } else {
      counts->mutable_starts()->Add(start);
      counts->mutable_counts()->Add(1);
      for (int j = counts->starts_size() - 1; j > i; --j) {
        counts->mutable_starts()->SwapElements(j, j - 1);
        counts->mutable_counts()->SwapElements(j, j - 1);
      }
    }
    // Drop what no window can read any more.
    const int64_t newest = counts->starts(counts->starts_size() - 1);
    const int64_t keep_from = newest - RetentionSeconds(width);
    int drop = 0;
    while (drop < counts->starts_size() && counts->starts(drop) < keep_from) ++drop;
    if (drop > 0) {
      counts->mutable_starts()->erase(counts->mutable_starts()->begin(),
                                      counts->mutable_starts()->begin() + drop);
      counts->mutable_counts()->erase(counts->mutable_counts()->begin(),
                                      counts->mutable_counts()->begin() + drop);
    }
  }
  profile.set_updated_ms(std::max(profile.updated_ms(), delta.at_ms()));
}

}  // namespace hookrelay::collector
