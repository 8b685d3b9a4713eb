// AdminCore's calls on audiences (SPEC §6.2): list, get, create, delete, sync.
#include "collector/admin/admin_core.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "collector/admin/admin_core_internal.h"
#include "collector/api/admin_errors.h"
#include "common/config_validate.h"
#include "common/log.h"
#include "common/proto_time.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Config;
using internal::FileObject;
using internal::kIdLength;
using internal::NotFound;
using internal::Page;

}  // namespace

absl::StatusOr<hookrelay::v1::AudienceResource> AdminCore::AudienceView(
    const ConfigManager::Snapshot& snapshot, const hookrelay::v1::Audience& a) {
  hookrelay::v1::AudienceResource r;
  r.set_id(a.id());
  r.set_name(a.name());
  *r.mutable_sources() = a.sources();
  *r.mutable_rule() = a.rule();
  r.set_sync_interval_seconds(a.sync_interval_seconds() == 0 ? common::kDefaultAudienceSyncSeconds
                                                             : a.sync_interval_seconds());
  r.set_trait(common::AudienceTraitName(a.name()));
  r.set_managed_by(snapshot.AudienceManagedBy(a.id()));
  absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> state =
      store_.GetAudienceState(a.id());
  if (!state.ok()) return state.status();
  if (state->has_value()) {
    const hookrelay::v1::AudienceState& s = **state;
    r.set_members(s.members());
    hookrelay::v1::AudienceSync& sync = *r.mutable_last_sync();
    common::ToProtoTime(absl::FromUnixMillis(s.last_sync_ms()), sync.mutable_time());
    sync.set_evaluated(s.last_evaluated());
    sync.set_entered(s.last_entered());
    sync.set_exited(s.last_exited());
    sync.set_duration_ms(s.last_duration_ms());
    sync.set_first(s.last_first());
  }
  return r;
}

absl::Status AdminCore::ListAudiences(const std::string&,
                                      const hookrelay::v1::ListAudiencesRequest& request,
                                      hookrelay::v1::ListAudiencesResponse* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> snapshot = (*config)->Get();
  std::vector<const hookrelay::v1::Audience*> all;
  for (const auto& a : snapshot->merged.audiences()) all.push_back(&a);
  std::sort(all.begin(), all.end(), [](const auto* x, const auto* y) { return x->id() < y->id(); });
  std::string next;
  absl::StatusOr<std::vector<const hookrelay::v1::Audience*>> page =
      Page(all, [](const hookrelay::v1::Audience& a) { return a.id(); }, request.page_size(),
           request.page_token(), &next);
  if (!page.ok()) return page.status();
  for (const hookrelay::v1::Audience* a : *page) {
    absl::StatusOr<hookrelay::v1::AudienceResource> view = AudienceView(*snapshot, *a);
    if (!view.ok()) return view.status();
    *response->add_audiences() = *std::move(view);
  }
  response->set_next_page_token(next);
  return absl::OkStatus();
}

absl::Status AdminCore::GetAudience(const std::string&,
                                    const hookrelay::v1::GetAudienceRequest& request,
                                    hookrelay::v1::AudienceResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> snapshot = (*config)->Get();
  const hookrelay::v1::Audience* a = snapshot->FindAudience(request.id());
  if (a == nullptr) return NotFound("audience", request.id());
  absl::StatusOr<hookrelay::v1::AudienceResource> view = AudienceView(*snapshot, *a);
  if (!view.ok()) return view.status();
  *response = *std::move(view);
  return absl::OkStatus();
}

absl::Status AdminCore::CreateAudience(const std::string& who,
                                       const hookrelay::v1::CreateAudienceRequest& request,
                                       hookrelay::v1::AudienceResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  AudienceSyncer* syncer = syncer_.load();
  if (syncer == nullptr) return absl::FailedPreconditionError("audiences are not served here");
  const hookrelay::v1::AudienceResource& in = request.audience();
  if (!in.trait().empty()) return InvalidField("trait", "output only; it follows the name");
  if (!in.managed_by().empty()) return InvalidField("managedBy", "output only; it cannot be set");
  if (in.members() != 0) return InvalidField("members", "output only; it cannot be set");
  if (in.has_last_sync()) return InvalidField("lastSync", "output only; it cannot be set");
  hookrelay::v1::Audience a;
  a.set_id(in.id().empty() ? internal::RandomToken("aud_", kIdLength, false) : in.id());
  a.set_name(in.name());
  *a.mutable_sources() = in.sources();
  *a.mutable_rule() = in.rule();
  a.set_sync_interval_seconds(in.sync_interval_seconds());
  if ((*config)->Get()->FindAudience(a.id()) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("audience \"", absl::CHexEscape(a.id()), "\" already exists"));
  }
  if (request.validate_only()) {
    absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> checked = (*config)->Check(
        {ConfigManager::Focus::Kind::kAudience, a.id()}, [&](Config& api) {
          *api.add_audiences() = a;
          return absl::OkStatus();
        });
    if (!checked.ok()) return checked.status();
    absl::StatusOr<hookrelay::v1::AudienceResource> view =
        AudienceView(**checked, *(*checked)->FindAudience(a.id()));
    if (!view.ok()) return view.status();
    *response = *std::move(view);
    if (in.id().empty()) response->clear_id();  // Not chosen yet: the create picks one.
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "audience.create", absl::StrCat("audience ", a.id()), {"name", "sources", "rule"}},
      {ConfigManager::Focus::Kind::kAudience, a.id()}, [&](Config& api) {
        *api.add_audiences() = a;
        return absl::OkStatus();
      });
  if (!snapshot.ok()) return snapshot.status();
  // The first computation, before answering: its identify calls are enqueued when this returns.
  absl::StatusOr<hookrelay::v1::AudienceState> state = syncer->SyncNow(a.id());
  if (!state.ok()) {
    common::LogWarning("first audience computation failed; the next sync retries",
                       {{"audience", a.id()}, {"error", state.status().message()}});
  }
  absl::StatusOr<hookrelay::v1::AudienceResource> view =
      AudienceView(**snapshot, *(*snapshot)->FindAudience(a.id()));
  if (!view.ok()) return view.status();
  *response = *std::move(view);
  return absl::OkStatus();
}

absl::Status AdminCore::DeleteAudience(const std::string& who,
                                       const hookrelay::v1::DeleteAudienceRequest& request,
                                       hookrelay::v1::DeleteResponse*) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> current = (*config)->Get();
  if (current->FindAudience(request.id()) == nullptr) return NotFound("audience", request.id());
  if (current->file_audiences.contains(request.id())) {
    return FileObject("audience", request.id(), current->file_path);
  }
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "audience.delete", absl::StrCat("audience ", request.id()), {}},
      {ConfigManager::Focus::Kind::kAudience, request.id()}, [&](Config& api) {
        auto* audiences = api.mutable_audiences();
        for (int i = 0; i < audiences->size(); ++i) {
          if (audiences->Get(i).id() == request.id()) {
            audiences->DeleteSubrange(i, 1);
            return absl::OkStatus();
          }
        }
        return NotFound("audience", request.id());
      });
  return snapshot.status();
}

absl::Status AdminCore::SyncAudience(const std::string& who,
                                     const hookrelay::v1::SyncAudienceRequest& request,
                                     hookrelay::v1::AudienceResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  AudienceSyncer* syncer = syncer_.load();
  if (syncer == nullptr) return absl::FailedPreconditionError("audiences are not served here");
  std::shared_ptr<const ConfigManager::Snapshot> snapshot = (*config)->Get();
  const hookrelay::v1::Audience* a = snapshot->FindAudience(request.id());
  if (a == nullptr) return NotFound("audience", request.id());
  absl::StatusOr<hookrelay::v1::AudienceState> state = syncer->SyncNow(request.id());
  if (!state.ok()) return state.status();
  common::LogInfo("audience synced on request", {{"audience", request.id()}, {"who", who}});
  absl::StatusOr<hookrelay::v1::AudienceResource> view = AudienceView(*snapshot, *a);
  if (!view.ok()) return view.status();
  *response = *std::move(view);
  return absl::OkStatus();
}

}  // namespace hookrelay::collector
