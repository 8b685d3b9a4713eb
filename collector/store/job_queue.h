// The job queue: durable delivery jobs, leased to deliverers, retried, dead-lettered. One part of
// what an engine provides (collector/store/store.h); the dispatcher and the ingest path use it.
//
// States: ready (due now), scheduled (due later), leased (handed to a deliverer until a
// deadline; not durable: a restart or an expired lease makes the job ready again), dead.
//
// A job keeps its id while it is ready, scheduled or leased again after an expired lease; a
// retried, buried or replayed job may be stored anew under another id (JetStream: ids are stream
// sequences), so a job is followed across those by its content (message_id, destination_id).
// tests/store_conformance_test.cc holds both engines to this contract.
#ifndef HOOKRELAY_COLLECTOR_STORE_JOB_QUEUE_H_
#define HOOKRELAY_COLLECTOR_STORE_JOB_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collector/store/new_job.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {

// One accepted event: the key it is de-duplicated by and the jobs it fans out to (possibly none,
// when no destination is enabled for it; the dedup key is still recorded).
struct AppendItem {
  // Unique per (source, messageId); see DedupKey().
  std::string dedup_key;
  // Serialized once, where they are made; `id` and `due_unix_ms` are assigned by the store,
  // everything else is kept as given.
  std::vector<NewJob> jobs;
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

// The jobs as one collector sees them: the totals, and the part of them that lives in storage
// shared by every collector of a cluster (SPEC §11: the metrics add up across collectors).
struct JobCounts {
  int64_t ready = 0;
  int64_t scheduled = 0;
  int64_t leased = 0;
  int64_t dead = 0;
  // When the oldest ready job became due; InfiniteFuture when nothing is ready.
  absl::Time oldest_ready_due = absl::InfiniteFuture();

  // The part of the totals above held by storage that every collector of a cluster shares and
  // no collector has taken (JetStream: the consumer's pending jobs, schedules not yet fired,
  // dead letters), as its servers count it: every collector of a cluster reads the same values.
  // The rest of the totals is this collector's own (JetStream: the jobs it fetched ahead for its
  // deliverers, holds until their time, or leased). The metrics export the two parts apart
  // (scope="cluster" and scope="collector") so that dashboards add the collectors' own parts
  // and take the cluster's once. `shared` is false on an engine whose storage is the
  // collector's own (the embedded one): everything is its own.
  struct Shared {
    bool shared = false;
    int64_t ready = 0;
    int64_t scheduled = 0;
    int64_t dead = 0;
    // The jobs this collector has leased to its deliverers or is settling. The totals' `leased`
    // is the servers' count (the consumer's unsettled jobs of every collector, less those this
    // one fetched or holds): it falls to 0 only once the servers have the settlements.
    int64_t leased_here = 0;
  };
  Shared cluster;
};

// An outcome for a leased job (JobQueue::Settle).
struct Settlement {
  enum class Kind {
    kComplete,  // delivered: the job is removed
    kRetry,     // records `attempt`; the job is due again at `not_before`
    kBury,      // records `attempt` and `reason`; the job becomes a dead letter
  };
  Kind kind = Kind::kComplete;
  uint64_t job_id = 0;
  uint64_t lease = 0;
  absl::Time not_before = absl::InfinitePast();
  std::string reason;
  hookrelay::v1::Attempt attempt;

  static Settlement Complete(uint64_t job_id, uint64_t lease) {
    return {Kind::kComplete, job_id, lease, absl::InfinitePast(), {}, {}};
  }
  static Settlement Retry(uint64_t job_id, uint64_t lease, absl::Time not_before,
                          hookrelay::v1::Attempt attempt) {
    return {Kind::kRetry, job_id, lease, not_before, {}, std::move(attempt)};
  }
  static Settlement Bury(uint64_t job_id, uint64_t lease, std::string reason,
                         hookrelay::v1::Attempt attempt) {
    return {Kind::kBury, job_id, lease, absl::InfinitePast(), std::move(reason),
            std::move(attempt)};
  }
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
class JobQueue {
 public:
  // Runs exactly once, on a store thread, after the batch is durable (fsync'd / acknowledged by
  // the replicated engine) or has failed. Must not block.
  using AppendCallback = absl::AnyInvocable<void(absl::StatusOr<AppendResult>) &&>;

  virtual ~JobQueue() = default;

  // Durably appends jobs; nothing is visible to Lease before it is durable. Concurrent Appends
  // may share one fsync (group commit). Never blocks on I/O.
  virtual void Append(std::vector<AppendItem> items, AppendCallback done) = 0;

  // Leases up to `max` ready jobs (due <= now), each for lease_duration(): the deadline is now +
  // lease_duration() (an engine whose leases are kept by its servers counts on their time:
  // JetStream's consumer ack wait). Never waits: an engine that fetches jobs from elsewhere
  // returns what it has at hand, possibly none while more are ready (SetReadyCallback says when
  // to ask again).
  //
  // The queue is per destination. `budget` says how many jobs of each destination may be leased
  // in this call (the dispatcher's admission: a throttled destination — concurrency, rate limit,
  // open circuit — gets 0 and is simply not asked; its jobs stay queued, unleased and unwritten).
  // The engine asks it at most once per destination with ready jobs per call (so "asked" means
  // "has work"; an engine whose queues are on shared servers asks each queue that may have work:
  // some fetched, or none being fetched), on the calling thread, possibly under the engine's lock: it must not call the
  // store. Within the budgets, jobs go oldest due first across destinations, and in due order
  // within one. An engine that cannot tell a job's destination without reading it (records
  // written before destinations were kept with the queue) treats it as within budget.
  //
  // Per-key order (a later delivery feature) fits the same shape: a queue keeps, per destination,
  // the keys with a job leased; while a key is in that set, its later jobs are passed over like
  // a destination with no budget (they stay queued in order), and the settlement of the leased
  // job (complete, bury, or a retry that keeps its place as the key's next job) clears the key.
  // No other method changes.
  using LeaseBudget = absl::FunctionRef<size_t(std::string_view destination_id)>;
  virtual absl::StatusOr<std::vector<LeasedJob>> Lease(size_t max, LeaseBudget budget) = 0;
  // Every destination within budget (tools, tests, the admin paths).
  absl::StatusOr<std::vector<LeasedJob>> Lease(size_t max) {
    return Lease(max, [](std::string_view) { return ~size_t{0}; });
  }
  // The destinations of the configuration in effect (the dispatcher calls it when the
  // configuration changes): an engine whose queues per destination live on shared servers makes
  // sure each one's queue exists, so that jobs stored for it by a collector that died before
  // making its queue are not left unseen. Must not block; the default does nothing.
  virtual void ExpectDestinations(const std::vector<std::string>& destination_ids) {
    (void)destination_ids;
  }
  // How long a lease lasts; fixed when the store opens (JobStoreOptions::lease_duration).
  virtual absl::Duration lease_duration() const = 0;
  // Whether Lease keeps per-key order (Job.ordering_key): a job with a key is leased only once
  // every job of the same (destination, key) stored before it has ended (completed or buried),
  // one at a time; a retry keeps its place. An engine that cannot refuses configurations that
  // ask for it (ConfigManager).
  virtual bool KeepsPerKeyOrder() const { return false; }

  // Settles leases, a batch at a time (the outcomes of one deliverer message). Each settlement's
  // status, in the batch's order: NOT_FOUND when the job is gone (or, on an engine shared by
  // several collectors, not leased through this store); FAILED_PRECONDITION when `lease` is not
  // the job's current lease (it expired and the job was leased again); OK spends the lease.
  // `done` runs exactly once, when every lease of the batch is checked and its write handed to
  // the engine (possibly before Settle returns, on the caller's thread; must not block): the
  // embedded engine writes the batch with its next group commit (one write batch for all of
  // it), JetStream sends the acks in its next ack burst and pipelines the retry and dead-letter
  // publishes. Lease and Counts see an OK settlement when `done` runs; a replicated engine may
  // store it a moment later (ListDead then sees it), and a settlement it fails to store hands the
  // job out again without counting the attempt.
  using SettleCallback = absl::AnyInvocable<void(std::vector<absl::Status> statuses) &&>;
  virtual void Settle(std::vector<Settlement> batch, SettleCallback done) = 0;

  // One settlement, waiting for its status (admin paths, tools and tests).
  // Delivered: the job is removed.
  absl::Status Complete(uint64_t job_id, uint64_t lease);
  // Retry later: records the attempt and makes the job due at `not_before`.
  absl::Status Retry(uint64_t job_id, uint64_t lease, absl::Time not_before,
                     const hookrelay::v1::Attempt& attempt);
  // Dead letter: records the attempt and the reason.
  absl::Status Bury(uint64_t job_id, uint64_t lease, std::string_view reason,
                    const hookrelay::v1::Attempt& attempt);

  // Extends leases whose attempt is still running (the dispatcher calls it for jobs in flight at
  // a connected deliverer as their deadline nears): each deadline becomes now + lease_duration()
  // (JetStream: InProgress resets the consumer's ack wait). Per (job id, lease), in order: the
  // new deadline, or NOT_FOUND / FAILED_PRECONDITION as for Settle (the lease already ended).
  virtual std::vector<absl::StatusOr<absl::Time>> ExtendLeases(
      const std::vector<std::pair<uint64_t, uint64_t>>& leases) = 0;

  // Dead letters matching `filter`, ordered by id (a dead letter's own id where burying stores
  // the job anew).
  virtual absl::StatusOr<std::vector<hookrelay::v1::Job>> ListDead(const DeadFilter& filter) = 0;
  // Makes every dead letter matching `filter` (ignoring after_id/limit) ready again, with a fresh
  // retry window. Returns how many.
  virtual absl::StatusOr<size_t> Replay(const DeadFilter& filter) = 0;

  // OK while the store can write. Otherwise UNAVAILABLE with a generic message (no file paths;
  // safe to show to callers) until the store has recovered by itself: appends fail meanwhile,
  // leases and reads keep working. Cheap; any thread.
  virtual absl::Status WriteHealth() const = 0;

  // The one ready signal: `ready` is called (on a store thread; must not block, must not call
  // the store) whenever jobs may have become leasable that an earlier Lease could not return:
  // jobs stored (appends, replays, deletion notifications, audience identify calls), a retry or
  // deferral falling due on the store's clock, a lease running out, or jobs arriving from an
  // engine's servers. Every engine raises it; a caller needs no polling (with a ManualClock,
  // moving the clock raises it for what falls due). Set before the first Lease; an empty
  // function stops the calls (it returns once no call is running).
  virtual void SetReadyCallback(std::function<void()> ready) = 0;

  // A replicated engine reads them from its servers: they follow appends and outcomes by a
  // moment.
  virtual JobCounts Counts() = 0;
  // The earliest due time of a scheduled job, or InfiniteFuture (tests on a ManualClock move it
  // there).
  virtual absl::Time NextDue() = 0;
};

// Counts a delivery attempt in a job: attempts + 1, the first attempt's time (the retry window
// counts from it), the attempt appended to the history (the newest kMaxJobHistory kept). Both
// engines record attempts this way. An empty Attempt (no URL, no time) is a deferral instead: the
// dispatcher held the job back without sending it (its destination's circuit breaker, rate or
// concurrency limit); only `deferrals` grows, so Retry(id, lease, not_before, Attempt()) puts a
// job back without spending its retries.
inline constexpr int kMaxJobHistory = 10;
void RecordAttempt(const hookrelay::v1::Attempt& attempt, int64_t now_ms, hookrelay::v1::Job& job);

// The destination_id of a serialized v1::Job, read from the wire format without parsing the
// rest (engines page queued jobs in by it); nullopt when the bytes are not a Job. A Job written
// by this code holds the field once; an absent field is "".
std::optional<std::string_view> SerializedJobDestination(std::string_view serialized);
// The destination_id and ordering_key of a serialized v1::Job, read the same way in one pass.
struct SerializedQueueFields {
  std::string_view destination;
  std::string_view ordering_key;
};
std::optional<SerializedQueueFields> SerializedJobQueueFields(std::string_view serialized);
// The due_unix_ms of a serialized v1::Job, read the same way (0 when absent).
std::optional<int64_t> SerializedJobDue(std::string_view serialized);

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

#endif  // HOOKRELAY_COLLECTOR_STORE_JOB_QUEUE_H_
