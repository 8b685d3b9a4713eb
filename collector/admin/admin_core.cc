// AdminCore's construction and the catalog; each resource's calls are in admin_<resource>.cc
// (sources, destinations, dead_letters, deletions, audiences), shared helpers in
// admin_core_internal.h.
#include "collector/admin/admin_core.h"

#include "common/config_validate.h"

namespace hookrelay::collector {
namespace {

// Header names the deliverer sets itself (SPEC §1), shown in the catalog.
constexpr const char* kReservedHeaders[] = {"Content-Type",   "User-Agent", "X-Signature",
                                            "Content-Length", "Host",       "Idempotency-Key"};

}  // namespace

AdminCore::AdminCore(Store& store, ConfigManager* config, const common::Clock& clock)
    : store_(store), config_(config), clock_(clock) {}

absl::StatusOr<ConfigManager*> AdminCore::Manager() {
  if (config_ == nullptr) {
    return absl::FailedPreconditionError("this server manages no configuration");
  }
  return config_;
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

}  // namespace hookrelay::collector
