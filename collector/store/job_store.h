// The job store contract: durable delivery jobs, leased to deliverers, retried, dead-lettered.
// Two engines implement it: the embedded one on RocksDB (RocksDbJobStore) and, for scale-out,
// one on NATS JetStream.
//
// States: ready (due now), scheduled (due later), leased (handed to a deliverer until a
// deadline; not durable: a restart or an expired lease makes the job ready again), dead.
//
// A job keeps its id while it is ready, scheduled or leased again after an expired lease; a
// retried, buried or replayed job may be stored anew under another id (JetStream: ids are stream
// sequences), so a job is followed across those by its content (message_id, destination_id).
// tests/store_conformance_test.cc holds both engines to this contract.
#ifndef HOOKRELAY_COLLECTOR_STORE_JOB_STORE_H_
#define HOOKRELAY_COLLECTOR_STORE_JOB_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {

// One accepted event: the key it is de-duplicated by and the jobs it fans out to (possibly none,
// when no destination is enabled for it; the dedup key is still recorded).
struct AppendItem {
  // Unique per (source, messageId); see DedupKey().
  std::string dedup_key;
  // `id`, `due_unix_ms` are assigned by the store; everything else is kept as given.
  std::vector<hookrelay::v1::Job> jobs;
  // The event's user and source, for the per-user index (SPEC §6.1: the sources a user was seen
  // in). Empty user_id: not indexed.
  std::string user_id;
  std::string source_id;
  // A serialized v1::ProfileDelta merged into the (user_id, source_id) profile in the same write
  // (SPEC §6.2); empty when the event changes no profile.
  std::string profile_delta;
  // Whether the change is logged for audience syncs (only while some audience exists: a new
  // audience's first computation reads every profile, not the log).
  bool log_profile_change = false;
};

struct AppendResult {
  // Parallel to the appended items: false when the item's dedup key was already stored within
  // the dedup window (or earlier in the same Append), so its jobs were dropped as duplicates.
  std::vector<bool> stored;
};

struct LeasedJob {
  hookrelay::v1::Job job;
  // Identifies this lease; outcomes carrying an older lease are refused.
  uint64_t lease = 0;
  absl::Time deadline;
};

// A deletion request to apply (SPEC §6.1), prepared by the admin core.
struct DeletionPlan {
  // id, user_id, source_ids (the affected sources, already resolved), sources_from_index,
  // request_id and create_time set; the store fills state and the counts.
  hookrelay::v1::Deletion record;
  // The `delete` jobs, one per (affected source, enabled webhook destination); the store assigns
  // `id` and `due_unix_ms` as for appended jobs.
  std::vector<hookrelay::v1::Job> notifications;
  // Audiences reading any affected source: the user's membership in them is removed (no
  // identify follows).
  std::vector<std::string> audience_ids;
};

// Audience syncs (SPEC §6.2). A sync reads what changed, evaluates outside the store, and commits
// memberships, rechecks and identify jobs in one atomic write.
struct AudienceSyncInput {
  // nullopt before the first computation: `users` is then every user with a profile in the
  // audience's sources.
  std::optional<hookrelay::v1::AudienceState> state;
  // The profile change log position this sync covers (its new cursor).
  uint64_t log_position = 0;
  // Users to evaluate, each once: profile in one of the audience's sources changed since the
  // cursor, or a recheck due by `now`. An engine may also list users whose change was in another
  // source only (the embedded engine's change log holds user ids, not sources); the caller reads
  // them and finds no profile of the audience's sources.
  std::vector<std::string> users;
  // The due rechecks read (opaque keys), removed by the commit.
  std::vector<std::string> rechecks_due;
};

// One user as a sync sees it.
struct AudienceUser {
  std::string user_id;
  bool member = false;  // as last sent
  std::vector<hookrelay::v1::Profile> profiles;  // of the audience's sources that have one
};

struct AudienceSyncPlan {
  std::string audience_id;
  // The audience's sources (a change of a user deleted since the evaluation is dropped at commit:
  // an entry needs a profile in one of them, an exit a membership still recorded).
  std::vector<std::string> sources;
  uint64_t log_position = 0;
  // Membership changes: user → member now. The store adjusts the member count.
  std::vector<std::pair<std::string, bool>> changes;
  // When to evaluate a user again without a new event (a window edge).
  std::vector<std::pair<std::string, absl::Time>> rechecks;
  std::vector<std::string> rechecks_done;
  // The identify calls; ids and due times are assigned as for appended jobs.
  std::vector<hookrelay::v1::Job> jobs;
  // Stats for the state: evaluated users, entered/exited, duration, first computation.
  hookrelay::v1::AudienceState stats;
  // Change log entries at or below this position are no longer needed by any audience.
  uint64_t log_needed_after = 0;
};

struct DeletionOutcome {
  hookrelay::v1::Deletion record;
  // False when the request id had been applied already: nothing was done and `record` is the
  // earlier one (whose user may differ: the caller decides what that means).
  bool created = false;
  // Store keys read or written to apply it: proportional to the user's jobs and dead letters,
  // never to the store's size (tests assert it).
  size_t keys_touched = 0;
};

struct JobCounts {
  int64_t ready = 0;
  int64_t scheduled = 0;
  int64_t leased = 0;
  int64_t dead = 0;
  // When the oldest ready job became due; InfiniteFuture when nothing is ready.
  absl::Time oldest_ready_due = absl::InfiniteFuture();
};

// Selects dead letters. Empty destination_id = all destinations; the time range [from, to)
// applies to the time the job died.
struct DeadFilter {
  std::string destination_id;
  absl::Time from = absl::InfinitePast();
  absl::Time to = absl::InfiniteFuture();
  // ListDead: jobs with id > after_id, at most `limit` of them (pagination).
  uint64_t after_id = 0;
  size_t limit = 100;
};

// Thread-safe: every method may be called from any thread.
class JobStore {
 public:
  // Runs exactly once, on a store thread, after the batch is durable (fsync'd / acknowledged by
  // the replicated engine) or has failed. Must not block.
  using AppendCallback = absl::AnyInvocable<void(absl::StatusOr<AppendResult>) &&>;

  virtual ~JobStore() = default;

  // Durably appends jobs; nothing is visible to Lease before it is durable. Concurrent Appends
  // may share one fsync (group commit). Never blocks on I/O.
  virtual void Append(std::vector<AppendItem> items, AppendCallback done) = 0;

  // Leases up to `max` ready jobs (due <= now), oldest due first, until now + `duration` (an
  // engine whose leases are kept by its servers counts its own: JetStream's consumer ack wait,
  // JobStoreOptions::lease_duration, on real time). Never waits: an engine that fetches jobs from
  // elsewhere returns what it has at hand, possibly none while more are ready (SetReadyCallback
  // says when to ask again).
  virtual absl::StatusOr<std::vector<LeasedJob>> Lease(size_t max, absl::Duration duration) = 0;

  // Settles a lease. NOT_FOUND when the job is gone (or, on an engine shared by several
  // collectors, not leased through this store); FAILED_PRECONDITION when `lease` is not the job's
  // current lease (it expired and the job was leased again). OK spends the lease; a replicated
  // engine may store the outcome a moment later (Lease, ListDead and Counts then see it), and an
  // outcome it fails to store hands the job out again without counting the attempt.
  // Delivered: the job is removed.
  virtual absl::Status Complete(uint64_t job_id, uint64_t lease) = 0;
  // Retry later: records the attempt and makes the job due at `not_before`.
  virtual absl::Status Retry(uint64_t job_id, uint64_t lease, absl::Time not_before,
                             const hookrelay::v1::Attempt& attempt) = 0;
  // Dead letter: records the attempt and the reason.
  virtual absl::Status Bury(uint64_t job_id, uint64_t lease, std::string_view reason,
                            const hookrelay::v1::Attempt& attempt) = 0;

  // Dead letters matching `filter`, ordered by id (a dead letter's own id where burying stores
  // the job anew).
  virtual absl::StatusOr<std::vector<hookrelay::v1::Job>> ListDead(const DeadFilter& filter) = 0;
  // Makes every dead letter matching `filter` (ignoring after_id/limit) ready again, with a fresh
  // retry window. Returns how many.
  virtual absl::StatusOr<size_t> Replay(const DeadFilter& filter) = 0;

  // The sources `user_id` was seen in (AppendItem::user_id/source_id), sorted, from the per-user
  // index: cost proportional to the answer.
  virtual absl::StatusOr<std::vector<std::string>> SourcesSeen(std::string_view user_id) = 0;
  // Applies a deletion in one atomic, durable write: enqueues the notifications; removes the
  // user's not-yet-delivered jobs of the record's sources (except `delete` and test jobs; a job
  // leased now finishes its attempt and is dropped instead of retried), their dead letters, their
  // sources-seen entries (and profile, SPEC §6.2); records the deletion. A request id already
  // applied does nothing. Appends keep flowing meanwhile: the cost is proportional to the user's
  // data, never to the store's size.
  virtual absl::StatusOr<DeletionOutcome> ApplyDeletion(DeletionPlan plan) = 0;
  // Audiences (SPEC §6.2); see AudienceSyncInput. Syncs of one audience must not overlap (the
  // caller serialises them).
  virtual absl::StatusOr<AudienceSyncInput> BeginAudienceSync(
      std::string_view audience_id, const std::vector<std::string>& sources, absl::Time now) = 0;
  virtual absl::StatusOr<std::vector<AudienceUser>> ReadAudienceUsers(
      std::string_view audience_id, const std::vector<std::string>& users,
      const std::vector<std::string>& sources) = 0;
  // Durable when it returns: the new state.
  virtual absl::StatusOr<hookrelay::v1::AudienceState> CommitAudienceSync(
      AudienceSyncPlan plan) = 0;
  virtual absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> GetAudienceState(
      std::string_view audience_id) = 0;
  // Forgets an audience's memberships and state (nothing is sent).
  virtual absl::Status DropAudience(std::string_view audience_id) = 0;

  // nullopt when unknown.
  virtual absl::StatusOr<std::optional<hookrelay::v1::Deletion>> GetDeletion(
      std::string_view id) = 0;
  // Newest first: at most `limit` deletions with an id below `before_id` (empty = from the
  // newest).
  virtual absl::StatusOr<std::vector<hookrelay::v1::Deletion>> ListDeletions(
      std::string_view before_id, size_t limit) = 0;

  // OK while the store can write. Otherwise UNAVAILABLE with a generic message (no file paths;
  // safe to show to callers) until the store has recovered by itself: appends fail meanwhile,
  // leases and reads keep working. Cheap; any thread.
  virtual absl::Status WriteHealth() const = 0;

  // The configuration managed at run time (admin API, SPEC §9) lives with the jobs, in the
  // engine in use: the bytes last saved, or nullopt before the first save. SaveConfig is durable
  // when it returns OK (fsync / replicated).
  // An engine shared by several collectors refuses a save with ABORTED when another collector
  // saved since this one last loaded or saw the configuration (the caller reads it again and
  // re-applies its change), so that no change made elsewhere is overwritten unseen.
  virtual absl::StatusOr<std::optional<std::string>> LoadConfig() = 0;
  virtual absl::Status SaveConfig(std::string_view bytes) = 0;
  // Calls `changed` with the stored bytes each time another process sharing the engine saves the
  // configuration (on a store thread; must not block long); it returns whether the caller now
  // holds that configuration (only then do later saves build on it). An engine that belongs to
  // one collector never calls it. Calling again replaces the callback; an empty one stops the
  // calls (it returns once no call is running).
  using ConfigChanged = absl::AnyInvocable<bool(std::string bytes)>;
  virtual void WatchConfig(ConfigChanged changed) { (void)changed; }

  // Called (on a store thread; must not block) when jobs became leasable that an earlier Lease
  // could not return: an engine that fetches jobs from elsewhere (JetStream) uses it so that
  // the dispatcher needs no polling for them. The embedded engine's new jobs are announced by
  // the ingest path, its retries by NextDue: it never calls it. Set before the first Lease.
  virtual void SetReadyCallback(std::function<void()> ready) { (void)ready; }

  // A replicated engine reads them from its servers: they follow appends and outcomes by a
  // moment.
  virtual JobCounts Counts() = 0;
  // The earliest due time of a scheduled job, or InfiniteFuture.
  virtual absl::Time NextDue() = 0;
  // When jobs may become leasable without an append or a ready callback: the next due time or
  // the earliest lease expiry; the dispatcher sleeps until then (or until woken). InfiniteFuture
  // when nothing is pending.
  virtual absl::Time NextWake() { return NextDue(); }
};

// Counts a delivery attempt in a job: attempts + 1, the first attempt's time (the retry window
// counts from it), the attempt appended to the history (the newest kMaxJobHistory kept). Both
// engines record attempts this way. An empty Attempt (no URL, no time) is a deferral instead: the
// dispatcher held the job back without sending it (its destination's circuit breaker, rate or
// concurrency limit); only `deferrals` grows, so Retry(id, lease, not_before, Attempt()) puts a
// job back without spending its retries.
inline constexpr int kMaxJobHistory = 10;
void RecordAttempt(const hookrelay::v1::Attempt& attempt, int64_t now_ms, hookrelay::v1::Job& job);

// The dedup key of an event: unique per (source, messageId).
inline std::string DedupKey(std::string_view source_id, std::string_view message_id) {
  std::string key;
  key.reserve(source_id.size() + 1 + message_id.size());
  key.append(source_id);
  key.push_back('\0');
  key.append(message_id);
  return key;
}

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_JOB_STORE_H_
