// The admin operations (SPEC §9, docs/ADMIN_API.md) over the configuration manager and the job
// store: one implementation behind both adapters, gRPC (AdminService) and JSON over HTTP
// (AdminHttpServer). Requests and answers are the hookrelay.v1 admin messages; errors are
// absl::Status, INVALID_ARGUMENT ones carrying field violations (admin_errors.h).
//
// `who` (from AdminAuth) goes into the audit log line of every change.
//
// Threading: any thread; calls may block on the store (a synced write per change, a group
// commit for dead-letter reads) and TestDestination for up to 10 s. Thread-safe.
#ifndef HOOKRELAY_COLLECTOR_ADMIN_ADMIN_CORE_H_
#define HOOKRELAY_COLLECTOR_ADMIN_ADMIN_CORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/audiences/audience_syncer.h"
#include "collector/config/config_manager.h"
#include "collector/dispatch/dispatcher.h"
#include "collector/store/store.h"
#include "common/clock.h"
#include "hookrelay/v1/admin.pb.h"

namespace prometheus {
class Counter;
class Registry;
}  // namespace prometheus

namespace hookrelay::collector {

class AdminCore {
 public:
  static constexpr int32_t kDefaultPageSize = 100;
  static constexpr int32_t kMaxPageSize = 1000;
  static constexpr absl::Duration kTestTimeout = absl::Seconds(10);

  // `config` may be null (a store-only admin: dead letters; the configuration calls answer
  // FAILED_PRECONDITION). References must outlive the core.
  AdminCore(Store& store, ConfigManager* config, const common::Clock& clock);

  // The dispatcher whose stats the destination reads show and which TestDestination wakes.
  // Wire its Options::on_test_outcome to OnTestOutcome.
  void SetDispatcher(Dispatcher* dispatcher) { dispatcher_.store(dispatcher); }
  void OnTestOutcome(const std::string& message_id, const hookrelay::v1::Outcome& outcome);

  absl::Status GetCatalog(const std::string& who, const hookrelay::v1::GetCatalogRequest& request,
                          hookrelay::v1::Catalog* response);

  absl::Status ListSources(const std::string& who, const hookrelay::v1::ListSourcesRequest& request,
                           hookrelay::v1::ListSourcesResponse* response);
  absl::Status GetSource(const std::string& who, const hookrelay::v1::GetSourceRequest& request,
                         hookrelay::v1::SourceResource* response);
  absl::Status CreateSource(const std::string& who,
                            const hookrelay::v1::CreateSourceRequest& request,
                            hookrelay::v1::SourceResource* response);
  absl::Status UpdateSource(const std::string& who,
                            const hookrelay::v1::UpdateSourceRequest& request,
                            hookrelay::v1::SourceResource* response);
  absl::Status DeleteSource(const std::string& who,
                            const hookrelay::v1::DeleteSourceRequest& request,
                            hookrelay::v1::DeleteResponse* response);
  absl::Status CreateWriteKey(const std::string& who,
                              const hookrelay::v1::CreateWriteKeyRequest& request,
                              hookrelay::v1::CreateWriteKeyResponse* response);
  absl::Status RevokeWriteKey(const std::string& who,
                              const hookrelay::v1::RevokeWriteKeyRequest& request,
                              hookrelay::v1::SourceResource* response);

  absl::Status ListDestinations(const std::string& who,
                                const hookrelay::v1::ListDestinationsRequest& request,
                                hookrelay::v1::ListDestinationsResponse* response);
  absl::Status GetDestination(const std::string& who,
                              const hookrelay::v1::GetDestinationRequest& request,
                              hookrelay::v1::DestinationResource* response);
  absl::Status CreateDestination(const std::string& who,
                                 const hookrelay::v1::CreateDestinationRequest& request,
                                 hookrelay::v1::DestinationResource* response);
  absl::Status UpdateDestination(const std::string& who,
                                 const hookrelay::v1::UpdateDestinationRequest& request,
                                 hookrelay::v1::DestinationResource* response);
  absl::Status DeleteDestination(const std::string& who,
                                 const hookrelay::v1::DeleteDestinationRequest& request,
                                 hookrelay::v1::DeleteResponse* response);
  absl::Status TestDestination(const std::string& who,
                               const hookrelay::v1::TestDestinationRequest& request,
                               hookrelay::v1::TestDestinationResponse* response);
  absl::Status RotateSecret(const std::string& who,
                            const hookrelay::v1::RotateSecretRequest& request,
                            hookrelay::v1::DestinationResource* response);

  absl::Status ListDeadLetters(const std::string& who,
                               const hookrelay::v1::ListDeadLettersRequest& request,
                               hookrelay::v1::ListDeadLettersResponse* response);
  absl::Status ReplayDeadLetters(const std::string& who,
                                 const hookrelay::v1::ReplayDeadLettersRequest& request,
                                 hookrelay::v1::ReplayDeadLettersResponse* response);

  // Deletion requests (SPEC §6.1). The user id is personal data: it is logged at debug level
  // only.
  absl::Status CreateDeletion(const std::string& who,
                              const hookrelay::v1::CreateDeletionRequest& request,
                              hookrelay::v1::Deletion* response);
  absl::Status GetDeletion(const std::string& who, const hookrelay::v1::GetDeletionRequest& request,
                           hookrelay::v1::Deletion* response);
  absl::Status ListDeletions(const std::string& who,
                             const hookrelay::v1::ListDeletionsRequest& request,
                             hookrelay::v1::ListDeletionsResponse* response);

  // Audiences (SPEC §6.2). Needs SetAudienceSyncer for syncs (otherwise FAILED_PRECONDITION).
  void SetAudienceSyncer(AudienceSyncer* syncer) { syncer_.store(syncer); }
  absl::Status ListAudiences(const std::string& who,
                             const hookrelay::v1::ListAudiencesRequest& request,
                             hookrelay::v1::ListAudiencesResponse* response);
  absl::Status GetAudience(const std::string& who, const hookrelay::v1::GetAudienceRequest& request,
                           hookrelay::v1::AudienceResource* response);
  absl::Status CreateAudience(const std::string& who,
                              const hookrelay::v1::CreateAudienceRequest& request,
                              hookrelay::v1::AudienceResource* response);
  absl::Status DeleteAudience(const std::string& who,
                              const hookrelay::v1::DeleteAudienceRequest& request,
                              hookrelay::v1::DeleteResponse* response);
  absl::Status SyncAudience(const std::string& who,
                            const hookrelay::v1::SyncAudienceRequest& request,
                            hookrelay::v1::AudienceResource* response);

  // Registers hookrelay_deletions_total and hookrelay_purged_jobs_total. Optional; call before
  // serving.
  void RegisterMetrics(prometheus::Registry& registry);

 private:
  absl::StatusOr<ConfigManager*> Manager();
  absl::StatusOr<hookrelay::v1::AudienceResource> AudienceView(
      const ConfigManager::Snapshot& snapshot, const hookrelay::v1::Audience& a);
  hookrelay::v1::DestinationResource DestinationView(const ConfigManager::Snapshot& snapshot,
                                                     const hookrelay::v1::Destination& d) const;

  Store& store_;
  ConfigManager* const config_;
  const common::Clock& clock_;
  std::atomic<Dispatcher*> dispatcher_{nullptr};
  std::atomic<AudienceSyncer*> syncer_{nullptr};
  prometheus::Counter* deletions_total_ = nullptr;
  prometheus::Counter* purged_jobs_total_ = nullptr;

  struct PendingTest {
    bool done = false;
    hookrelay::v1::Outcome outcome;
  };
  absl::Mutex tests_mu_;
  // By message id.
  absl::flat_hash_map<std::string, std::shared_ptr<PendingTest>> tests_ ABSL_GUARDED_BY(tests_mu_);
};

// Converting between the config's objects and the API's resources.
hookrelay::v1::SourceResource ToSourceResource(const hookrelay::v1::Source& source,
                                               std::string managed_by);

namespace internal {

// Page tokens of the list calls: the last id of the page, opaque to callers.
std::string EncodePageToken(uint64_t last_id);
absl::StatusOr<uint64_t> DecodePageToken(std::string_view token);
std::string EncodeIdPageToken(std::string_view last_id);
absl::StatusOr<std::string> DecodeIdPageToken(std::string_view token);

// `prefix` + `length` random characters of [a-z0-9] (ids) / [A-Za-z0-9] (write keys), from the
// system's CSPRNG.
std::string RandomToken(std::string_view prefix, size_t length, bool mixed_case);

}  // namespace internal

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_ADMIN_ADMIN_CORE_H_
