// AdminCore's calls on deletion requests (SPEC §6.1): create, get, list, and their metrics.
#include "collector/admin/admin_core.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collector/admin/admin_core_internal.h"
#include "collector/api/admin_errors.h"
#include "collector/model/event.h"
#include "common/config_validate.h"
#include "common/json_writer.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/strings.h"
#include "common/time_format.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace hookrelay::collector {

namespace {

using hookrelay::v1::Destination;
using hookrelay::v1::Job;
using internal::CheckPageSize;

constexpr size_t kMaxRequestIdChars = 100;
constexpr int kMaxDeletionSources = 100;

bool RequestIdChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' ||
         c == '-';
}

// The body a receiver gets for a deletion (SPEC §5.1): type, userId, timestamp.
std::string DeleteEventJson(const std::string& user_id, absl::Time now) {
  std::string json;
  common::JsonObjectWriter w(&json);
  w.String("type", "delete");
  w.String("userId", user_id);
  w.String("timestamp", common::FormatIso8601Millis(now));
  w.Close();
  return json;
}

}  // namespace

void AdminCore::RegisterMetrics(prometheus::Registry& registry) {
  deletions_total_ = &prometheus::BuildCounter()
                          .Name("hookrelay_deletions_total")
                          .Help("Deletion requests applied (SPEC 6.1); a repeated request id "
                                "is not counted again")
                          .Register(registry)
                          .Add({});
  purged_jobs_total_ = &prometheus::BuildCounter()
                            .Name("hookrelay_purged_jobs_total")
                            .Help("Undelivered jobs and dead letters removed by deletion requests")
                            .Register(registry)
                            .Add({});
}

absl::Status AdminCore::CreateDeletion(const std::string& who,
                                       const hookrelay::v1::CreateDeletionRequest& request,
                                       hookrelay::v1::Deletion* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  const std::string& user = request.user_id();
  if (user.empty()) return InvalidField("userId", "required: the user whose data is deleted");
  if (std::optional<FieldError> error = CheckIdentifier("userId", user)) {
    return InvalidField("userId", error->reason);
  }
  if (request.source_ids_size() > kMaxDeletionSources) {
    return InvalidField("sourceIds", absl::StrCat(request.source_ids_size(), " sources, at most ",
                                                  kMaxDeletionSources));
  }
  const std::string& request_id = request.request_id();
  if (common::Utf8Length(request_id) > kMaxRequestIdChars) {
    return InvalidField("requestId", absl::StrCat(common::Utf8Length(request_id),
                                                  " characters, at most ", kMaxRequestIdChars));
  }
  if (!std::all_of(request_id.begin(), request_id.end(), RequestIdChar)) {
    return InvalidField("requestId", "only letters, digits and . _ : - are allowed");
  }
  std::shared_ptr<const ConfigManager::Snapshot> snapshot = (*config)->Get();
  DeletionPlan plan;
  hookrelay::v1::Deletion& record = plan.record;
  for (int i = 0; i < request.source_ids_size(); ++i) {
    const std::string& id = request.source_ids(i);
    const std::string field = absl::StrCat("sourceIds[", i, "]");
    if (id.empty()) return InvalidField(field, "empty source id");
    if (std::find(request.source_ids().begin(), request.source_ids().begin() + i, id) !=
        request.source_ids().begin() + i) {
      return InvalidField(field, absl::StrCat("source \"", id, "\" is listed twice"));
    }
    if (snapshot->FindSource(id) == nullptr) {
      return absl::NotFoundError(absl::StrCat(field, ": no source \"", id, "\""));
    }
    record.add_source_ids(id);
  }
  if (request.source_ids().empty()) {
    absl::StatusOr<std::vector<std::string>> seen = store_.SourcesSeen(user);
    if (!seen.ok()) return seen.status();
    for (std::string& id : *seen) record.add_source_ids(std::move(id));
    record.set_sources_from_index(true);
  }

  const absl::Time now = clock_.Now();
  record.set_id(absl::StrCat("del_", absl::Hex(absl::ToUnixMillis(now), absl::kZeroPad12),
                             internal::RandomToken("", 8, false)));
  record.set_user_id(user);
  record.set_request_id(request_id);
  common::ToProtoTime(absl::FromUnixMillis(absl::ToUnixMillis(now)), record.mutable_create_time());
  for (const hookrelay::v1::Audience& a : snapshot->merged.audiences()) {
    for (const std::string& source : a.sources()) {
      if (std::find(record.source_ids().begin(), record.source_ids().end(), source) !=
          record.source_ids().end()) {
        plan.audience_ids.push_back(a.id());
        break;
      }
    }
  }
  const std::string body = DeleteEventJson(user, now);
  for (const std::string& source : record.source_ids()) {
    for (const Destination& d : snapshot->merged.destinations()) {
      if (!d.enabled() || std::find(d.sources().begin(), d.sources().end(), source) ==
                              d.sources().end()) {
        continue;
      }
      Job& job = plan.notifications.emplace_back();
      job.set_source_id(source);
      job.set_destination_id(d.id());
      job.set_type(hookrelay::v1::DELETE);
      job.set_message_id(absl::StrCat(record.id(), "/", source));
      job.set_user_id(user);
      // After the user's job in flight, if any (the rest are purged).
      if (d.options().ordering() == common::kOrderingPerUser) job.set_ordering_key(user);
      job.set_received_at_unix_ms(absl::ToUnixMillis(now));
      job.set_event_json(body);
    }
  }

  absl::StatusOr<DeletionOutcome> outcome = store_.ApplyDeletion(std::move(plan));
  if (!outcome.ok()) {
    common::LogWarning("deletion failed", {{"who", who}, {"error", outcome.status().message()}});
    return outcome.status();
  }
  if (!outcome->created && outcome->record.user_id() != user) {
    return WithViolations(
        absl::StatusCode::kAlreadyExists,
        absl::StrCat("requestId \"", request_id, "\" was used for another deletion (",
                     outcome->record.id(), ")"),
        {{"requestId", "already used for another user"}});
  }
  const hookrelay::v1::Deletion& done = outcome->record;
  if (outcome->created) {
    if (deletions_total_ != nullptr) deletions_total_->Increment();
    if (purged_jobs_total_ != nullptr) {
      purged_jobs_total_->Increment(
          static_cast<double>(done.purged_jobs() + done.purged_dead_letters()));
    }
    common::LogInfo("deletion applied",
                    {{"deletion", done.id()},
                     {"sources", absl::StrJoin(done.source_ids(), ",")},
                     {"notifications", done.notifications()},
                     {"purged_jobs", done.purged_jobs()},
                     {"purged_dead_letters", done.purged_dead_letters()},
                     {"keys_touched", outcome->keys_touched},
                     {"who", who}});
    common::LogDebug("deletion user", {{"deletion", done.id()}, {"user_id", user}});
    if (done.notifications() > 0) {
    }
  }
  *response = done;
  return absl::OkStatus();
}

absl::Status AdminCore::GetDeletion(const std::string&,
                                    const hookrelay::v1::GetDeletionRequest& request,
                                    hookrelay::v1::Deletion* response) {
  if (request.id().empty()) return InvalidField("id", "required");
  absl::StatusOr<std::optional<hookrelay::v1::Deletion>> found = store_.GetDeletion(request.id());
  if (!found.ok()) return found.status();
  if (!found->has_value()) {
    return absl::NotFoundError(absl::StrCat("no deletion \"", request.id(), "\""));
  }
  *response = **std::move(found);
  return absl::OkStatus();
}

absl::Status AdminCore::ListDeletions(const std::string&,
                                      const hookrelay::v1::ListDeletionsRequest& request,
                                      hookrelay::v1::ListDeletionsResponse* response) {
  const int32_t page_size = request.page_size() == 0 ? kDefaultPageSize : request.page_size();
  if (absl::Status st = CheckPageSize(page_size); !st.ok()) return st;
  std::string before;
  if (!request.page_token().empty()) {
    absl::StatusOr<std::string> decoded = internal::DecodeIdPageToken(request.page_token());
    if (!decoded.ok()) return decoded.status();
    before = *std::move(decoded);
  }
  absl::StatusOr<std::vector<hookrelay::v1::Deletion>> page =
      store_.ListDeletions(before, static_cast<size_t>(page_size) + 1);
  if (!page.ok()) return page.status();
  if (page->size() > static_cast<size_t>(page_size)) {
    page->resize(static_cast<size_t>(page_size));
    response->set_next_page_token(internal::EncodeIdPageToken(page->back().id()));
  }
  for (hookrelay::v1::Deletion& d : *page) *response->add_deletions() = std::move(d);
  return absl::OkStatus();
}

}  // namespace hookrelay::collector
