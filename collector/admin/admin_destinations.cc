// AdminCore's calls on destinations (SPEC §9): list, get, create, update, delete, and the test
// delivery (TestDestination, OnTestOutcome).
#include "collector/admin/admin_core.h"

#include <algorithm>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collector/admin/admin_core_internal.h"
#include "collector/api/admin_errors.h"
#include "collector/model/event.h"
#include "collector/routing/destination_filter.h"
#include "common/config_validate.h"
#include "common/json_writer.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/strings.h"
#include "common/time_format.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Config;
using hookrelay::v1::Destination;
using hookrelay::v1::DestinationResource;
using hookrelay::v1::Job;
using internal::FileObject;
using internal::kIdLength;
using internal::NotFound;
using internal::Page;

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
      // A secret set directly replaces the one in use at once, ending any rotation's overlap.
      out->set_shared_secret(in.shared_secret());
      out->clear_rotation();
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
    } else if (f == "filter") {
      *out->mutable_filter() = in.filter();
    } else if (f == "id") {
      // Names the object; not changeable.
    } else if (f == "shared_secret_set" || f == "managed_by" || f == "stats") {
      return InvalidField(JsonFieldPath(f), "output only; it cannot be set");
    } else if (f == "rotation") {
      return InvalidField("rotation", "output only; rotate with POST /admin/v1/destinations/"
                                      "{id}:rotateSecret (RotateSecret)");
    } else {
      return InvalidField(JsonFieldPath(f), "unknown field");
    }
  }
  return absl::OkStatus();
}

// An ended rotation's previous secret signs nothing more: not kept past the next change.
void DropEndedRotation(absl::Time now, Destination& d) {
  if (!d.has_rotation()) return;
  std::optional<absl::Time> ends = common::FromProtoTime(d.rotation().ends_at());
  if (!ends.has_value() || now >= *ends) d.clear_rotation();
}

std::vector<const Destination*> SortedDestinations(const Config& config) {
  std::vector<const Destination*> out;
  for (const auto& d : config.destinations()) out.push_back(&d);
  std::sort(out.begin(), out.end(),
            [](const Destination* a, const Destination* b) { return a->id() < b->id(); });
  return out;
}

}  // namespace

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
  if (d.has_filter()) *out.mutable_filter() = d.filter();
  if (d.has_rotation() && !d.rotation().previous_secret().empty()) {
    // Shown while the overlap lasts; an ended rotation is history (and is dropped by the next
    // change of the destination).
    std::optional<absl::Time> ends = common::FromProtoTime(d.rotation().ends_at());
    if (ends.has_value() && clock_.Now() < *ends) {
      *out.mutable_rotation()->mutable_ends_at() = d.rotation().ends_at();
    }
  }
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
  if (in.has_rotation()) {
    return InvalidField("rotation", "output only; rotate with POST /admin/v1/destinations/"
                                    "{id}:rotateSecret (RotateSecret)");
  }
  Destination d;
  d.set_id(in.id().empty() ? internal::RandomToken("dst_", kIdLength, false) : in.id());
  if (absl::Status st = ApplyDestinationFields(
          in, {"type", "sources", "enabled", "shared_secret", "urls", "options", "filter"}, &d);
      !st.ok()) {
    return st;
  }
  if (d.type().empty()) d.set_type(common::kWebhooksType);
  if ((*config)->Get()->FindDestination(d.id()) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("destination \"", absl::CHexEscape(d.id()), "\" already exists"));
  }
  std::vector<std::string> fields = {"type", "sources", "enabled", "urls", "options"};
  if (in.has_filter()) fields.push_back("filter");
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
          DropEndedRotation(clock_.Now(), d);
          return ApplyDestinationFields(in, paths, &d);
        }
        return NotFound("destination", in.id());
      });
  if (!snapshot.ok()) return snapshot.status();
  *response = DestinationView(**snapshot, *(*snapshot)->FindDestination(in.id()));
  return absl::OkStatus();
}

absl::Status AdminCore::RotateSecret(const std::string& who,
                                     const hookrelay::v1::RotateSecretRequest& request,
                                     DestinationResource* response) {
  absl::StatusOr<ConfigManager*> config = Manager();
  if (!config.ok()) return config.status();
  std::shared_ptr<const ConfigManager::Snapshot> current = (*config)->Get();
  const Destination* existing = current->FindDestination(request.id());
  if (existing == nullptr) return NotFound("destination", request.id());
  if (current->file_destinations.contains(request.id())) {
    return FileObject("destination", request.id(), current->file_path);
  }
  if (request.shared_secret().empty()) return InvalidField("sharedSecret", "missing");
  absl::Duration overlap = common::kDefaultRotationOverlap;
  if (request.has_overlap()) {
    const google::protobuf::Duration& o = request.overlap();
    overlap = absl::Seconds(o.seconds()) + absl::Nanoseconds(o.nanos());
    if (overlap < absl::ZeroDuration() || overlap > common::kMaxRotationOverlap) {
      return InvalidField("overlap", absl::StrCat(absl::FormatDuration(overlap), " is outside 0s..",
                                                  absl::FormatDuration(common::kMaxRotationOverlap),
                                                  " (30 days)"));
    }
  }
  const absl::Time now = clock_.Now();
  const absl::Time ends = now + overlap;
  absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> snapshot = (*config)->Apply(
      {who, "destination.rotate_secret",
       absl::StrCat("destination ", request.id(), ", overlap until ", common::FormatIso8601Millis(ends)),
       {"sharedSecret", "rotation"}},
      {ConfigManager::Focus::Kind::kDestination, request.id()}, [&](Config& api) {
        for (Destination& d : *api.mutable_destinations()) {
          if (d.id() != request.id()) continue;
          if (d.shared_secret().empty()) {
            return absl::FailedPreconditionError(absl::StrCat(
                "destination ", request.id(),
                " has no shared secret, so there is nothing to overlap with: set sharedSecret "
                "with an update (PATCH) instead"));
          }
          if (d.shared_secret() == request.shared_secret()) {
            return InvalidField("sharedSecret", "the same as the secret in use");
          }
          if (overlap == absl::ZeroDuration()) {
            d.clear_rotation();
          } else {
            d.mutable_rotation()->set_previous_secret(d.shared_secret());
            common::ToProtoTime(ends, d.mutable_rotation()->mutable_ends_at());
          }
          d.set_shared_secret(request.shared_secret());
          return absl::OkStatus();
        }
        return NotFound("destination", request.id());
      });
  if (!snapshot.ok()) return snapshot.status();
  *response = DestinationView(**snapshot, *(*snapshot)->FindDestination(request.id()));
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

  // Whether an event like the sample would pass the destination's filter: compiled here, on
  // this admin call, from the snapshot's destination (ingest uses Routing's compiled copy).
  hookrelay::v1::FilterResult filter_result;
  {
    constexpr std::string_view kSampleProperties = R"({"test":true})";
    constexpr std::string_view kSampleContext =
        R"({"library":{"name":"hookrelay-admin","version":"1.0"}})";
    FilterEvent sample;
    sample.type = hookrelay::v1::TRACK;
    sample.event = "Test Event";
    sample.user_id = "hookrelay-test-user";
    sample.properties = kSampleProperties;
    sample.context = kSampleContext;
    FilterInput input(sample);
    const CompiledFilter::Explanation why = CompiledFilter(d->filter()).Explain(input);
    filter_result.set_passed(why.verdict == FilterVerdict::kPass);
    filter_result.set_failed(why.failed);
    filter_result.set_reason(why.reason);
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
  *response->mutable_filter() = std::move(filter_result);
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

}  // namespace hookrelay::collector
