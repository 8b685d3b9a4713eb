#include "collector/admin/admin_core.h"

#include <openssl/rand.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collector/api/admin_errors.h"
#include "collector/model/event.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "common/check.h"
#include "common/config_validate.h"
#include "common/json_writer.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/strings.h"
#include "common/time_format.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Config;
using hookrelay::v1::DeadLetterFilter;
using hookrelay::v1::Destination;
using hookrelay::v1::DestinationResource;
using hookrelay::v1::Job;
using hookrelay::v1::Source;
using hookrelay::v1::SourceResource;

constexpr std::string_view kPageTokenPrefix = "dead-after:";
constexpr std::string_view kIdPageTokenPrefix = "id-after:";
constexpr size_t kWriteKeyLength = 32;
constexpr size_t kIdLength = 12;
// Header names the deliverer sets itself (SPEC §1), shown in the catalog.
constexpr const char* kReservedHeaders[] = {"Content-Type",   "User-Agent", "X-Signature",
                                            "Content-Length", "Host",       "Idempotency-Key"};


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

// A list call's page_size: 0 (the default) up to the limit.
absl::Status CheckPageSize(int32_t page_size) {
  if (page_size >= 0 && page_size <= AdminCore::kMaxPageSize) return absl::OkStatus();
  return InvalidField(
      "pageSize", absl::StrCat(page_size, page_size < 0 ? " is negative" : " is over the limit",
                               "; at most ", AdminCore::kMaxPageSize, " (0 = ",
                               AdminCore::kDefaultPageSize, ")"));
}

// The page of `ids` (sorted) after `token`, at most `page_size`; sets next_page_token.
template <typename T, typename IdOf>
absl::StatusOr<std::vector<const T*>> Page(const std::vector<const T*>& all, IdOf id_of,
                                           int32_t page_size, const std::string& token,
                                           std::string* next_page_token) {
  if (absl::Status st = CheckPageSize(page_size); !st.ok()) return st;
  const size_t size = page_size == 0 ? AdminCore::kDefaultPageSize : page_size;
  std::string after;
  if (!token.empty()) {
    absl::StatusOr<std::string> decoded = internal::DecodeIdPageToken(token);
    if (!decoded.ok()) return decoded.status();
    after = *decoded;
  }
  std::vector<const T*> out;
  for (const T* item : all) {
    if (!after.empty() && id_of(*item) <= after) continue;
    if (out.size() == size) {
      *next_page_token = internal::EncodeIdPageToken(id_of(*out.back()));
      break;
    }
    out.push_back(item);
  }
  return out;
}

absl::Status FileObject(std::string_view what, const std::string& id, const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(
      common::ToAbsl(what), " \"", id, "\" is defined in ", path,
      "; change it there (objects of the config file are read-only through the admin API)"));
}

absl::Status NotFound(std::string_view what, const std::string& id) {
  return absl::NotFoundError(absl::StrCat(common::ToAbsl(what), " \"", absl::CHexEscape(id),
                                          "\" does not exist"));
}

// The API's destination into the config's, for the fields in `fields` (all when empty).
absl::Status ApplyDestinationFields(const DestinationResource& in,
                                    const std::vector<std::string>& fields, Destination* out) {
  for (const std::string& f : fields) {
    if (f == "type") {
      out->set_type(in.type());
    } else if (f == "sources") {
      *out->mutable_sources() = in.sources();
    } else if (f == "enabled") {
      out->set_enabled(in.has_enabled() && in.enabled());
    } else if (f == "shared_secret") {
      out->set_shared_secret(in.shared_secret());
    } else if (f == "urls") {
      out->clear_urls();
      for (const auto& u : in.urls()) {
        hookrelay::v1::WebhookUrl* url = out->add_urls();
        url->set_url(u.url());
        // Sorted by name: the map has no order, and a stable one keeps requests reproducible.
        std::vector<std::pair<std::string, std::string>> headers(u.headers().begin(),
                                                                 u.headers().end());
        std::sort(headers.begin(), headers.end());
        for (auto& [name, value] : headers) {
          hookrelay::v1::Header* h = url->add_headers();
          h->set_name(name);
          h->set_value(value);
        }
      }
    } else if (f == "options") {
      *out->mutable_options() = in.options();
    } else if (f == "id") {
      // Names the object; not changeable.
    } else if (f == "shared_secret_set" || f == "managed_by" || f == "stats") {
      return InvalidField(JsonFieldPath(f), "output only; it cannot be set");
    } else {
      return InvalidField(JsonFieldPath(f), "unknown field");
    }
  }
  return absl::OkStatus();
}

std::vector<const Source*> SortedSources(const Config& config) {
  std::vector<const Source*> out;
  for (const auto& s : config.sources()) out.push_back(&s);
  std::sort(out.begin(), out.end(), [](const Source* a, const Source* b) { return a->id() < b->id(); });
  return out;
}

std::vector<const Destination*> SortedDestinations(const Config& config) {
  std::vector<const Destination*> out;
  for (const auto& d : config.destinations()) out.push_back(&d);
  std::sort(out.begin(), out.end(),
            [](const Destination* a, const Destination* b) { return a->id() < b->id(); });
  return out;
}

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

namespace internal {

std::string EncodePageToken(uint64_t last_id) {
  return absl::WebSafeBase64Escape(absl::StrCat(common::ToAbsl(kPageTokenPrefix), last_id));
}

absl::StatusOr<uint64_t> DecodePageToken(std::string_view token) {
  std::string decoded;
  uint64_t id = 0;
  if (!absl::WebSafeBase64Unescape(common::ToAbsl(token), &decoded) ||
      !absl::StartsWith(decoded, common::ToAbsl(kPageTokenPrefix)) ||
      !absl::SimpleAtoi(absl::string_view(decoded).substr(kPageTokenPrefix.size()), &id) ||
      EncodePageToken(id) != token) {  // Only the exact spelling we hand out.
    return InvalidField("pageToken", "not a token returned by this list; leave it empty for the first page");
  }
  return id;
}

std::string EncodeIdPageToken(std::string_view last_id) {
  return absl::WebSafeBase64Escape(
      absl::StrCat(common::ToAbsl(kIdPageTokenPrefix), common::ToAbsl(last_id)));
}

absl::StatusOr<std::string> DecodeIdPageToken(std::string_view token) {
  std::string decoded;
  if (!absl::WebSafeBase64Unescape(common::ToAbsl(token), &decoded) ||
      !absl::StartsWith(decoded, common::ToAbsl(kIdPageTokenPrefix)) ||
      EncodeIdPageToken(std::string_view(decoded).substr(kIdPageTokenPrefix.size())) != token) {
    return InvalidField("pageToken", "not a token returned by this list; leave it empty for the first page");
  }
  return decoded.substr(kIdPageTokenPrefix.size());
}

std::string RandomToken(std::string_view prefix, size_t length, bool mixed_case) {
  static constexpr char kLower[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  static constexpr char kMixed[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const std::string_view alphabet = mixed_case ? std::string_view(kMixed, 62)
                                               : std::string_view(kLower, 36);
  std::string out(prefix);
  while (out.size() < prefix.size() + length) {
    unsigned char bytes[64];
    HOOKRELAY_CHECK(RAND_bytes(bytes, sizeof(bytes)) == 1, "RAND_bytes failed");
    for (unsigned char b : bytes) {
      // Rejection sampling: no bias towards the first characters.
      const unsigned limit = 256 - 256 % alphabet.size();
      if (b >= limit) continue;
      out.push_back(alphabet[b % alphabet.size()]);
      if (out.size() == prefix.size() + length) break;
    }
  }
  return out;
}

}  // namespace internal

SourceResource ToSourceResource(const Source& source, std::string managed_by) {
  SourceResource out;
  out.set_id(source.id());
  out.set_name(source.name());
  out.set_kind(KindName(source.kind()));
  *out.mutable_write_keys() = source.write_keys();
  out.set_managed_by(std::move(managed_by));
  return out;
}

AdminCore::AdminCore(JobStore& store, ConfigManager* config, const common::Clock& clock)
    : store_(store), config_(config), clock_(clock) {}

absl::StatusOr<ConfigManager*> AdminCore::Manager() {
  if (config_ == nullptr) {
    return absl::FailedPreconditionError("this server manages no configuration");
  }
  return config_;
}

DestinationResource AdminCore::DestinationView(const ConfigManager::Snapshot& snapshot,
                                               const Destination& d) const {
  DestinationResource out;
  out.set_id(d.id());
  out.set_type(d.type());
  *out.mutable_sources() = d.sources();
  out.set_enabled(d.enabled());
  out.set_shared_secret_set(!d.shared_secret().empty());
  for (const auto& u : d.urls()) {
    hookrelay::v1::WebhookUrlResource* url = out.add_urls();
    url->set_url(u.url());
    for (const auto& h : u.headers()) (*url->mutable_headers())[h.name()] = h.value();
  }
  // The options in effect (defaults filled in), so that readers see what applies.
  *out.mutable_options() = common::EffectiveOptions(d);
  out.set_managed_by(snapshot.DestinationManagedBy(d.id()));
  if (Dispatcher* dispatcher = dispatcher_.load(); dispatcher != nullptr) {
    const Dispatcher::DestinationStats stats = dispatcher->Stats(d.id());
    hookrelay::v1::DestinationStats* s = out.mutable_stats();
    s->set_delivered(stats.delivered);
    s->set_retried(stats.retried);
    s->set_dead(stats.dead);
    s->set_last_error(stats.last_error);
    s->set_concurrency_limit(stats.concurrency_limit);
    s->set_in_flight(stats.in_flight);
    s->set_circuit(stats.circuit);
    if (stats.last_error_at != absl::InfinitePast()) {
      common::ToProtoTime(stats.last_error_at, s->mutable_last_error_at());
    }
  }
  return out;
}

absl::Status AdminCore::GetCatalog(const std::string&, const hookrelay::v1::GetCatalogRequest&,
                                   hookrelay::v1::Catalog* response) {
  hookrelay::v1::DestinationType* t = response->add_destination_types();
  t->set_type(common::kWebhooksType);
  t->set_name("Webhooks");
  t->set_description(
      "POSTs each event as JSON to up to 5 URLs, with up to 5 static headers per URL, signed "
      "with X-Signature (HMAC-SHA1 of the body with the shared secret); retries 5xx and "
      "timeouts for up to 4 hours.");
  t->set_max_urls(common::kMaxUrlsPerDestination);
  t->set_max_headers_per_url(common::kMaxHeadersPerUrl);
  for (const char* h : kReservedHeaders) t->add_reserved_headers(h);
  for (const char* k : {"web", "mobile", "server"}) response->add_source_kinds(k);
  return absl::OkStatus();
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

absl::Status AdminCore::ListDestinations(const std::string&,
                                         const hookrelay::v1::ListDestinationsRequest& request,
                                         hookrelay::v1::ListDestinationsResponse* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> snapshot = (*config)->Get();
  std::string next;
  absl::StatusOr<std::vector<const Destination*>> page =
      Page(SortedDestinations(snapshot->merged), [](const Destination& d) { return d.id(); },
           request.page_size(), request.page_token(), &next);
  if (!page.ok()) return page.status();
  for (const Destination* d : *page) *response->add_destinations() = DestinationView(*snapshot, *d);
  response->set_next_page_token(next);
  return absl::OkStatus();
}

absl::Status AdminCore::GetDestination(const std::string&,
                                       const hookrelay::v1::GetDestinationRequest& request,
                                       DestinationResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> snapshot = (*config)->Get();
  const Destination* d = snapshot->FindDestination(request.id());
  if (d == nullptr) return NotFound("destination", request.id());
  *response = DestinationView(*snapshot, *d);
  return absl::OkStatus();
}

absl::Status AdminCore::CreateDestination(const std::string& who,
                                          const hookrelay::v1::CreateDestinationRequest& request,
                                          DestinationResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  const DestinationResource& in = request.destination();
  if (in.shared_secret_set()) return InvalidField("sharedSecretSet", "output only; set sharedSecret");
  if (!in.managed_by().empty()) return InvalidField("managedBy", "output only; it cannot be set");
  if (in.has_stats()) return InvalidField("stats", "output only; it cannot be set");
  Destination d;
  d.set_id(in.id().empty() ? internal::RandomToken("dst_", kIdLength, false) : in.id());
  if (absl::Status st = ApplyDestinationFields(
          in, {"type", "sources", "enabled", "shared_secret", "urls", "options"}, &d);
      !st.ok()) {
    return st;
  }
  if (d.type().empty()) d.set_type(common::kWebhooksType);
  if ((*config)->Get()->FindDestination(d.id()) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("destination \"", absl::CHexEscape(d.id()), "\" already exists"));
  }
  std::vector<std::string> fields = {"type", "sources", "enabled", "urls", "options"};
  if (!in.shared_secret().empty()) fields.push_back("sharedSecret");
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "destination.create", absl::StrCat("destination ", d.id()), fields},
      {ConfigManager::Focus::Kind::kDestination, d.id()}, [&](Config& api) {
        *api.add_destinations() = d;
        return absl::OkStatus();
      });
  if (!snapshot.ok()) return snapshot.status();
  *response = DestinationView(**snapshot, *(*snapshot)->FindDestination(d.id()));
  return absl::OkStatus();
}

absl::Status AdminCore::UpdateDestination(const std::string& who,
                                          const hookrelay::v1::UpdateDestinationRequest& request,
                                          DestinationResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  const DestinationResource& in = request.destination();
  std::shared_ptr<const ConfigManager::Snapshot> current = (*config)->Get();
  if (current->FindDestination(in.id()) == nullptr) return NotFound("destination", in.id());
  if (current->file_destinations.contains(in.id())) {
    return FileObject("destination", in.id(), current->file_path);
  }
  std::vector<std::string> paths(request.update_mask().paths().begin(),
                                 request.update_mask().paths().end());
  std::vector<std::string> fields;
  for (const std::string& p : paths) {
    if (p != "id") fields.push_back(JsonFieldPath(p));
  }
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "destination.update", absl::StrCat("destination ", in.id()), fields},
      {ConfigManager::Focus::Kind::kDestination, in.id()}, [&](Config& api) {
        for (Destination& d : *api.mutable_destinations()) {
          if (d.id() != in.id()) continue;
          return ApplyDestinationFields(in, paths, &d);
        }
        return NotFound("destination", in.id());
      });
  if (!snapshot.ok()) return snapshot.status();
  *response = DestinationView(**snapshot, *(*snapshot)->FindDestination(in.id()));
  return absl::OkStatus();
}

absl::Status AdminCore::DeleteDestination(const std::string& who,
                                          const hookrelay::v1::DeleteDestinationRequest& request,
                                          hookrelay::v1::DeleteResponse*) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> current = (*config)->Get();
  if (current->FindDestination(request.id()) == nullptr) return NotFound("destination", request.id());
  if (current->file_destinations.contains(request.id())) {
    return FileObject("destination", request.id(), current->file_path);
  }
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "destination.delete", absl::StrCat("destination ", request.id()), {}},
      {ConfigManager::Focus::Kind::kDestination, request.id()}, [&](Config& api) {
        auto* destinations = api.mutable_destinations();
        for (int i = 0; i < destinations->size(); ++i) {
          if (destinations->Get(i).id() == request.id()) {
            destinations->DeleteSubrange(i, 1);
            return absl::OkStatus();
          }
        }
        return NotFound("destination", request.id());
      });
  return snapshot.status();
}

void AdminCore::OnTestOutcome(const std::string& message_id,
                              const hookrelay::v1::Outcome& outcome) {
  absl::MutexLock lock(&tests_mu_);
  auto it = tests_.find(message_id);
  if (it == tests_.end()) return;  // The caller gave up (timeout).
  it->second->done = true;
  it->second->outcome = outcome;
}

absl::Status AdminCore::TestDestination(const std::string& who,
                                        const hookrelay::v1::TestDestinationRequest& request,
                                        hookrelay::v1::TestDestinationResponse* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> snapshot = (*config)->Get();
  const Destination* d = snapshot->FindDestination(request.id());
  if (d == nullptr) return NotFound("destination", request.id());
  Dispatcher* dispatcher = dispatcher_.load();
  if (dispatcher == nullptr) return absl::FailedPreconditionError("no dispatcher to send with");
  if (dispatcher->stream_count() == 0) {
    return absl::UnavailableError(
        "no deliverer is connected to this collector: start one (deliverer --collector=...)");
  }

  const absl::Time now = clock_.Now();
  const std::string message_id = internal::RandomToken("test-", 20, false);
  Job job;
  job.set_source_id(d->sources_size() > 0 ? d->sources(0) : "");
  job.set_destination_id(d->id());
  job.set_type(hookrelay::v1::TRACK);
  job.set_message_id(message_id);
  job.set_user_id("hookrelay-test-user");
  job.set_test(true);
  job.set_received_at_unix_ms(absl::ToUnixMillis(now));
  const std::string ts = common::FormatIso8601Millis(now);
  job.set_event_json(absl::StrCat(
      R"({"type":"track","event":"Test Event","messageId":")", message_id,
      R"(","userId":"hookrelay-test-user","properties":{"test":true},)",
      R"("context":{"library":{"name":"hookrelay-admin","version":"1.0"}},"timestamp":")", ts,
      R"(","sentAt":")", ts, R"(","receivedAt":")", ts, R"("})"));

  auto pending = std::make_shared<PendingTest>();
  {
    absl::MutexLock lock(&tests_mu_);
    tests_[message_id] = pending;
  }
  auto forget = [&] {
    absl::MutexLock lock(&tests_mu_);
    tests_.erase(message_id);
  };

  AppendItem item;
  item.dedup_key = DedupKey("\x01test", message_id);
  item.jobs.push_back(std::move(job));
  std::vector<AppendItem> items;
  items.push_back(std::move(item));
  struct AppendWait {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
  };
  auto wait = std::make_shared<AppendWait>();
  store_.Append(std::move(items), [wait](absl::StatusOr<AppendResult> r) {
    absl::MutexLock lock(&wait->mu);
    wait->status = r.status();
    wait->done = true;
  });
  {
    absl::MutexLock lock(&wait->mu);
    wait->mu.Await(absl::Condition(&wait->done));
    if (!wait->status.ok()) {
      forget();
      return wait->status;
    }
  }
  common::LogInfo("test event sent", {{"who", who}, {"destination", d->id()},
                                      {"message_id", message_id}});
  dispatcher->Notify();

  bool done = false;
  hookrelay::v1::Outcome outcome;
  {
    absl::MutexLock lock(&tests_mu_);
    // Real time: receivers answer in real time whatever clock the collector runs on.
    tests_mu_.AwaitWithTimeout(absl::Condition(&pending->done), kTestTimeout);
    done = pending->done;
    outcome = pending->outcome;
    tests_.erase(message_id);
  }
  if (!done) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no answer within ", absl::FormatDuration(kTestTimeout), " (", dispatcher->stream_count(),
        " deliverers connected); the test job is dropped when its outcome arrives"));
  }
  response->set_message_id(message_id);
  switch (outcome.kind()) {
    case hookrelay::v1::Outcome::DELIVERED:
      response->set_outcome("delivered");
      break;
    case hookrelay::v1::Outcome::RETRY:
      response->set_outcome("retry");
      break;
    default:
      response->set_outcome("dead");
      break;
  }
  response->set_reason(outcome.reason());
  for (const auto& u : outcome.attempt().urls()) {
    hookrelay::v1::TestUrlResult* r = response->add_results();
    r->set_url(u.url());
    r->set_status(u.status());
    r->set_error(u.error());
    r->set_latency_ms(u.latency_ms());
  }
  return absl::OkStatus();
}

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
  if (Dispatcher* dispatcher = dispatcher_.load(); dispatcher != nullptr) dispatcher->Notify();
  return absl::OkStatus();
}


namespace {

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
      if (Dispatcher* dispatcher = dispatcher_.load(); dispatcher != nullptr) dispatcher->Notify();
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
