// AdminCore's calls on sources and their write keys (SPEC §9): list, get, create, update,
// delete, create and revoke write keys.
#include "collector/admin/admin_core.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "collector/admin/admin_core_internal.h"
#include "collector/api/admin_errors.h"
#include "common/log.h"
#include "common/strings.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Config;
using hookrelay::v1::Source;
using hookrelay::v1::SourceResource;
using internal::FileObject;
using internal::kIdLength;
using internal::NotFound;
using internal::Page;

constexpr size_t kWriteKeyLength = 32;

std::string KindName(hookrelay::v1::SourceKind kind) {
  switch (kind) {
    case hookrelay::v1::WEB:
      return "web";
    case hookrelay::v1::MOBILE:
      return "mobile";
    case hookrelay::v1::SERVER:
      return "server";
    default:
      return "";
  }
}

absl::StatusOr<hookrelay::v1::SourceKind> ParseKind(std::string_view kind) {
  const std::string lower = absl::AsciiStrToLower(common::ToAbsl(kind));
  if (lower == "web") return hookrelay::v1::WEB;
  if (lower == "mobile") return hookrelay::v1::MOBILE;
  if (lower == "server") return hookrelay::v1::SERVER;
  return InvalidField("kind", kind.empty() ? "required: web, mobile or server"
                                      : absl::StrCat("\"", absl::CHexEscape(common::ToAbsl(kind)),
                                                     "\" is not web, mobile or server"));
}

std::vector<const Source*> SortedSources(const Config& config) {
  std::vector<const Source*> out;
  for (const auto& s : config.sources()) out.push_back(&s);
  std::sort(out.begin(), out.end(), [](const Source* a, const Source* b) { return a->id() < b->id(); });
  return out;
}

}  // namespace

SourceResource ToSourceResource(const Source& source, std::string managed_by) {
  SourceResource out;
  out.set_id(source.id());
  out.set_name(source.name());
  out.set_kind(KindName(source.kind()));
  *out.mutable_write_keys() = source.write_keys();
  out.set_managed_by(std::move(managed_by));
  return out;
}

absl::Status AdminCore::ListSources(const std::string&, const hookrelay::v1::ListSourcesRequest& request,
                                    hookrelay::v1::ListSourcesResponse* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> snapshot = (*config)->Get();
  std::string next;
  absl::StatusOr<std::vector<const Source*>> page =
      Page(SortedSources(snapshot->merged), [](const Source& s) { return s.id(); },
           request.page_size(), request.page_token(), &next);
  if (!page.ok()) return page.status();
  for (const Source* s : *page) {
    *response->add_sources() = ToSourceResource(*s, snapshot->SourceManagedBy(s->id()));
  }
  response->set_next_page_token(next);
  return absl::OkStatus();
}

absl::Status AdminCore::GetSource(const std::string&, const hookrelay::v1::GetSourceRequest& request,
                                  SourceResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> snapshot = (*config)->Get();
  const Source* s = snapshot->FindSource(request.id());
  if (s == nullptr) return NotFound("source", request.id());
  *response = ToSourceResource(*s, snapshot->SourceManagedBy(s->id()));
  return absl::OkStatus();
}

absl::Status AdminCore::CreateSource(const std::string& who,
                                     const hookrelay::v1::CreateSourceRequest& request,
                                     SourceResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  const SourceResource& in = request.source();
  if (!in.managed_by().empty()) return InvalidField("managedBy", "output only; it cannot be set");
  absl::StatusOr<hookrelay::v1::SourceKind> kind = ParseKind(in.kind());
  if (!kind.ok()) return kind.status();
  Source source;
  source.set_id(in.id().empty() ? internal::RandomToken("src_", kIdLength, false) : in.id());
  source.set_name(in.name().empty() ? source.id() : in.name());
  source.set_kind(*kind);
  *source.mutable_write_keys() = in.write_keys();
  if (source.write_keys().empty()) {
    source.add_write_keys(internal::RandomToken("wk_", kWriteKeyLength, true));
  }
  if ((*config)->Get()->FindSource(source.id()) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("source \"", absl::CHexEscape(source.id()),
                                                 "\" already exists"));
  }
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "source.create", absl::StrCat("source ", source.id()), {"name", "kind", "writeKeys"}},
      {ConfigManager::Focus::Kind::kSource, source.id()}, [&](Config& api) {
        *api.add_sources() = source;
        return absl::OkStatus();
      });
  if (!snapshot.ok()) return snapshot.status();
  *response = ToSourceResource(*(*snapshot)->FindSource(source.id()), "api");
  return absl::OkStatus();
}

absl::Status AdminCore::UpdateSource(const std::string& who,
                                     const hookrelay::v1::UpdateSourceRequest& request,
                                     SourceResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  const SourceResource& in = request.source();
  std::shared_ptr<const ConfigManager::Snapshot> current = (*config)->Get();
  if (current->FindSource(in.id()) == nullptr) return NotFound("source", in.id());
  if (current->file_sources.contains(in.id())) return FileObject("source", in.id(), current->file_path);
  std::vector<std::string> fields;
  std::optional<hookrelay::v1::SourceKind> kind;
  for (const std::string& f : request.update_mask().paths()) {
    if (f == "name" || f == "id") {
      if (f == "name") fields.push_back("name");
    } else if (f == "kind") {
      absl::StatusOr<hookrelay::v1::SourceKind> k = ParseKind(in.kind());
      if (!k.ok()) return k.status();
      kind = *k;
      fields.push_back("kind");
    } else if (f == "write_keys") {
      return InvalidField("writeKeys", "write keys change through POST .../write-keys and DELETE "
                                  ".../write-keys/{key}");
    } else {
      return InvalidField(JsonFieldPath(f), "not a field that can be changed (name, kind)");
    }
  }
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "source.update", absl::StrCat("source ", in.id()), fields},
      {ConfigManager::Focus::Kind::kSource, in.id()}, [&](Config& api) {
        for (Source& s : *api.mutable_sources()) {
          if (s.id() != in.id()) continue;
          for (const std::string& f : fields) {
            if (f == "name") s.set_name(in.name());
          }
          if (kind.has_value()) s.set_kind(*kind);
          return absl::OkStatus();
        }
        return NotFound("source", in.id());
      });
  if (!snapshot.ok()) return snapshot.status();
  *response = ToSourceResource(*(*snapshot)->FindSource(in.id()), "api");
  return absl::OkStatus();
}

absl::Status AdminCore::DeleteSource(const std::string& who,
                                     const hookrelay::v1::DeleteSourceRequest& request,
                                     hookrelay::v1::DeleteResponse*) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> current = (*config)->Get();
  if (current->FindSource(request.id()) == nullptr) return NotFound("source", request.id());
  if (current->file_sources.contains(request.id())) {
    return FileObject("source", request.id(), current->file_path);
  }
  std::vector<std::string> users;
  for (const auto& d : current->merged.destinations()) {
    if (std::find(d.sources().begin(), d.sources().end(), request.id()) != d.sources().end()) {
      users.push_back(absl::StrCat("\"", d.id(), "\""));
    }
  }
  if (!users.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "source \"", request.id(), "\" is used by destination", users.size() > 1 ? "s " : " ",
        absl::StrJoin(users, ", "), "; remove it from them first"));
  }
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "source.delete", absl::StrCat("source ", request.id()), {}},
      {ConfigManager::Focus::Kind::kSource, request.id()}, [&](Config& api) {
        auto* sources = api.mutable_sources();
        for (int i = 0; i < sources->size(); ++i) {
          if (sources->Get(i).id() == request.id()) {
            sources->DeleteSubrange(i, 1);
            return absl::OkStatus();
          }
        }
        return NotFound("source", request.id());
      });
  return snapshot.status();
}

absl::Status AdminCore::CreateWriteKey(const std::string& who,
                                       const hookrelay::v1::CreateWriteKeyRequest& request,
                                       hookrelay::v1::CreateWriteKeyResponse* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> current = (*config)->Get();
  if (current->FindSource(request.source_id()) == nullptr) {
    return NotFound("source", request.source_id());
  }
  if (current->file_sources.contains(request.source_id())) {
    return FileObject("source", request.source_id(), current->file_path);
  }
  const std::string key = internal::RandomToken("wk_", kWriteKeyLength, true);
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "source.write_key.create", absl::StrCat("source ", request.source_id()), {"writeKeys"}},
      {ConfigManager::Focus::Kind::kSource, request.source_id()}, [&](Config& api) {
        for (Source& s : *api.mutable_sources()) {
          if (s.id() != request.source_id()) continue;
          s.add_write_keys(key);
          return absl::OkStatus();
        }
        return NotFound("source", request.source_id());
      });
  if (!snapshot.ok()) return snapshot.status();
  response->set_write_key(key);
  *response->mutable_source() =
      ToSourceResource(*(*snapshot)->FindSource(request.source_id()), "api");
  return absl::OkStatus();
}

absl::Status AdminCore::RevokeWriteKey(const std::string& who,
                                       const hookrelay::v1::RevokeWriteKeyRequest& request,
                                       SourceResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> current = (*config)->Get();
  const Source* source = current->FindSource(request.source_id());
  if (source == nullptr) return NotFound("source", request.source_id());
  if (current->file_sources.contains(request.source_id())) {
    return FileObject("source", request.source_id(), current->file_path);
  }
  if (std::find(source->write_keys().begin(), source->write_keys().end(), request.write_key()) ==
      source->write_keys().end()) {
    return absl::NotFoundError(
        absl::StrCat("source \"", request.source_id(), "\" has no such write key"));
  }
  if (source->write_keys_size() == 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("source \"", request.source_id(),
                     "\" keeps at least one write key: create a new one before revoking this one"));
  }
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "source.write_key.revoke", absl::StrCat("source ", request.source_id()), {"writeKeys"}},
      {ConfigManager::Focus::Kind::kSource, request.source_id()}, [&](Config& api) {
        for (Source& s : *api.mutable_sources()) {
          if (s.id() != request.source_id()) continue;
          auto* keys = s.mutable_write_keys();
          keys->erase(std::remove(keys->begin(), keys->end(), request.write_key()), keys->end());
          return absl::OkStatus();
        }
        return NotFound("source", request.source_id());
      });
  if (!snapshot.ok()) return snapshot.status();
  *response = ToSourceResource(*(*snapshot)->FindSource(request.source_id()), "api");
  return absl::OkStatus();
}

}  // namespace hookrelay::collector
