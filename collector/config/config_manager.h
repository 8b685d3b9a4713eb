// The collector's configuration at run time (SPEC §9): the objects of the --config file (a
// declarative bootstrap, read-only here) plus the objects managed through the admin API, which
// are stored durably in the job store's engine. Every change is validated over the whole merged
// config (common::ValidateConfig, the same rules as the YAML loader), persisted, then published
// as a new immutable snapshot (routing for ingest, destination ids for Subscribe streams) — or
// refused with nothing changed.
//
// Merging: file objects win over API objects with the same id (logged at start and reload).
// Thread-safe: changes are serialised; Get() is cheap.
#ifndef HOOKRELAY_COLLECTOR_CONFIG_CONFIG_MANAGER_H_
#define HOOKRELAY_COLLECTOR_CONFIG_CONFIG_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collector/store/config_store.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::collector {

class ConfigManager {
 public:
  struct Snapshot {
    // Grows with every change made through the API (0: never changed).
    uint64_t version = 0;
    // What ingest and dispatch use: file objects and API objects.
    hookrelay::v1::Config merged;
    // The objects managed through the API (what is stored).
    hookrelay::v1::Config api;
    // --config ("" when none), and the ids its objects have.
    std::string file_path;
    absl::flat_hash_set<std::string> file_sources;
    absl::flat_hash_set<std::string> file_destinations;
    absl::flat_hash_set<std::string> file_audiences;

    const hookrelay::v1::Source* FindSource(const std::string& id) const;
    const hookrelay::v1::Destination* FindDestination(const std::string& id) const;
    // "api" or "file:<path>".
    std::string SourceManagedBy(const std::string& id) const;
    std::string DestinationManagedBy(const std::string& id) const;
    const hookrelay::v1::Audience* FindAudience(const std::string& id) const;
    std::string AudienceManagedBy(const std::string& id) const;
  };
  using Publish = std::function<void(const std::shared_ptr<const Snapshot>&)>;

  // `store` must outlive the manager. `publish` runs after each successful change (under the
  // manager's lock, so snapshots arrive in order). `lease`: the job queue's lease duration; every
  // destination's timeout must fit inside it with LeaseMargin(lease) to spare (the job's wait in
  // the deliverer and its outcome's way back), or the change is refused naming both values.
  // `per_key_order`: whether the engine keeps per-user order (JobQueue::KeepsPerKeyOrder; both
  // engines of this tree do); when it does not, a destination with options.ordering is refused.
  ConfigManager(ConfigStore& store, std::string file_path, Publish publish,
                absl::Duration lease = absl::InfiniteDuration(), bool per_key_order = true);

  // Loads the stored API objects and the file, validates the merge, publishes. An invalid file
  // or a merge that does not validate is an error (the collector does not start).
  absl::Status Start();
  // Re-reads the file (SIGHUP). On error the running config stays.
  absl::Status ReloadFile();

  std::shared_ptr<const Snapshot> Get() const;

  // For the audit log line written after a successful change.
  struct Audit {
    std::string who;
    std::string action;  // e.g. "destination.update"
    std::string object;  // e.g. "destination orders-hook"
    std::vector<std::string> fields;
  };
  // The object a change is about: validation errors on it are reported relative to it, with the
  // API's JSON field names (`urls[1].url`, `sharedSecret`).
  struct Focus {
    enum class Kind { kSource, kDestination, kAudience } kind;
    std::string id;
  };

  // Applies `mutate` to a copy of the API objects (it may refuse with NOT_FOUND,
  // FAILED_PRECONDITION, ...), validates the merged result (INVALID_ARGUMENT with field
  // violations), stores it durably and publishes it. Nothing changes on any error.
  absl::StatusOr<std::shared_ptr<const Snapshot>> Apply(
      const Audit& audit, const Focus& focus,
      absl::FunctionRef<absl::Status(hookrelay::v1::Config& api)> mutate);

  // What Apply would publish, without storing or publishing it: `mutate` on a copy of the API
  // objects, then the same validation (validate-only requests).
  absl::StatusOr<std::shared_ptr<const Snapshot>> Check(
      const Focus& focus, absl::FunctionRef<absl::Status(hookrelay::v1::Config& api)> mutate) const;

  // A configuration saved by another collector sharing the engine (ConfigStore::WatchConfig):
  // published when newer than the running one. An error (it does not validate with this
  // collector's file objects) is logged and the running config stays.
  absl::Status AdoptStored(const std::string& bytes);

 private:
  // Builds a snapshot from API objects and the current file objects; validates it.
  absl::StatusOr<std::shared_ptr<Snapshot>> Build(hookrelay::v1::Config api, uint64_t version,
                                                  const Focus* focus) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Reads the stored API objects again (after a save refused as ABORTED).
  absl::Status ReloadStoredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AdoptStoredLocked(const std::string& bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ConfigStore& store_;
  const absl::Duration lease_;
  const bool per_key_order_;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
  const std::string file_path_;
  const Publish publish_;

  mutable absl::Mutex mu_;
  hookrelay::v1::Config file_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Snapshot> current_ ABSL_GUARDED_BY(mu_);
};

// What a destination's timeout must leave of a job's lease: a quarter of it, at least 1 s.
absl::Duration LeaseMargin(absl::Duration lease);
// A destination whose timeout does not fit inside `lease` with LeaseMargin to spare: errors in
// the validator's form ("destinations[i].options.timeout_ms: ...").
absl::Status CheckTimeoutsFitLease(const hookrelay::v1::Config& config, absl::Duration lease);
// Destinations asking for per-user order, in the validator's form, for an engine without it.
absl::Status CheckNoOrdering(const hookrelay::v1::Config& config);

// "destinations[2].urls[1].shared_secret" → "urls[1].sharedSecret" when the focus is
// destinations[2]: the field paths of the validator relative to one object, in JSON names.
std::vector<std::pair<std::string, std::string>> ParseValidationErrors(absl::string_view message);
std::string JsonFieldPath(absl::string_view path);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_CONFIG_CONFIG_MANAGER_H_
