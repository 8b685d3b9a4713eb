// AdminCore's calls on dead letters (SPEC §9): list and replay.
#include "collector/admin/admin_core.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collector/admin/admin_core_internal.h"
#include "collector/api/admin_errors.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/time_format.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::DeadLetterFilter;
using hookrelay::v1::Job;
using internal::CheckPageSize;

absl::StatusOr<absl::Time> ToTime(const google::protobuf::Timestamp& ts, std::string_view field) {
  std::optional<absl::Time> t = common::FromProtoTime(ts);
  if (!t.has_value()) {
    return InvalidField(std::string(field),
                   absl::StrCat("not a valid timestamp (seconds ", ts.seconds(), ", nanos ",
                                ts.nanos(), "); 0001-01-01 .. 9999-12-31 allowed"));
  }
  return *t;
}

bool IsEmptyFilter(const DeadLetterFilter& filter) {
  return filter.destination_id().empty() && !filter.has_from() && !filter.has_to();
}

absl::StatusOr<DeadFilter> ToDeadFilter(const DeadLetterFilter& in) {
  DeadFilter out;
  out.destination_id = in.destination_id();
  if (in.has_from()) {
    absl::StatusOr<absl::Time> from = ToTime(in.from(), "filter.from");
    if (!from.ok()) return from.status();
    out.from = *from;
  }
  if (in.has_to()) {
    absl::StatusOr<absl::Time> to = ToTime(in.to(), "filter.to");
    if (!to.ok()) return to.status();
    out.to = *to;
  }
  if (in.has_from() && in.has_to() && out.to <= out.from) {
    return InvalidField("filter.to", "must be after filter.from (the range is [from, to))");
  }
  return out;
}

std::string Bound(absl::Time t) {
  return t == absl::InfinitePast() || t == absl::InfiniteFuture() ? std::string()
                                                                   : common::FormatIso8601Millis(t);
}

}  // namespace

absl::Status AdminCore::ListDeadLetters(const std::string&,
                                        const hookrelay::v1::ListDeadLettersRequest& request,
                                        hookrelay::v1::ListDeadLettersResponse* response) {
  const int32_t page_size = request.page_size() == 0 ? kDefaultPageSize : request.page_size();
  if (absl::Status st = CheckPageSize(page_size); !st.ok()) return st;
  absl::StatusOr<DeadFilter> filter = ToDeadFilter(request.filter());
  if (!filter.ok()) return filter.status();
  if (!request.page_token().empty()) {
    absl::StatusOr<uint64_t> after = internal::DecodePageToken(request.page_token());
    if (!after.ok()) return after.status();
    filter->after_id = *after;
  }
  // One more than a page: whether it exists decides if there is a next page, so that an empty
  // next_page_token reliably means "no more" (no trailing empty page).
  filter->limit = static_cast<size_t>(page_size) + 1;
  absl::StatusOr<std::vector<Job>> jobs = store_.ListDead(*filter);
  if (!jobs.ok()) {
    common::LogWarning("listing dead letters failed", {{"error", jobs.status().message()}});
    return jobs.status();
  }
  if (jobs->size() > static_cast<size_t>(page_size)) {
    jobs->resize(static_cast<size_t>(page_size));
    response->set_next_page_token(internal::EncodePageToken(jobs->back().id()));
  }
  response->mutable_jobs()->Reserve(static_cast<int>(jobs->size()));
  for (Job& job : *jobs) *response->add_jobs() = std::move(job);
  return absl::OkStatus();
}

absl::Status AdminCore::ReplayDeadLetters(const std::string& who,
                                          const hookrelay::v1::ReplayDeadLettersRequest& request,
                                          hookrelay::v1::ReplayDeadLettersResponse* response) {
  // Replaying everything is easy to ask for by accident (a forgotten flag): it must be explicit,
  // and an explicit "all" next to a filter is ambiguous, so both mistakes are refused.
  const bool empty = IsEmptyFilter(request.filter());
  if (empty && !request.all()) return InvalidField("all", "replaying every dead letter needs all=true");
  if (!empty && request.all()) {
    return InvalidField("all", "all=true replays every dead letter and cannot be combined with a filter");
  }
  absl::StatusOr<DeadFilter> filter = ToDeadFilter(request.filter());
  if (!filter.ok()) return filter.status();
  absl::StatusOr<size_t> replayed = store_.Replay(*filter);
  const std::string from = Bound(filter->from);
  const std::string to = Bound(filter->to);
  if (!replayed.ok()) {
    common::LogWarning("replaying dead letters failed",
                       {{"destination_id", filter->destination_id}, {"from", from}, {"to", to},
                        {"all", request.all()}, {"who", who},
                        {"error", replayed.status().message()}});
    return replayed.status();
  }
  common::LogInfo("dead letters replayed", {{"destination_id", filter->destination_id},
                                            {"from", from},
                                            {"to", to},
                                            {"all", request.all()},
                                            {"replayed", *replayed},
                                            {"who", who}});
  response->set_replayed(*replayed);
  return absl::OkStatus();
}

}  // namespace hookrelay::collector
