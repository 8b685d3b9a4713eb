// The embedded job store: JobStore on RocksDB under --data_dir, for a single collector.
//
// Durability: Append's callback reports OK only after the jobs are in the write-ahead log and the
// log is fsync'd; they survive kill -9. Settlements (Complete/Retry/Bury) are applied to the
// in-memory state at once and written in the next group commit without waiting for it: a crash
// can lose the last few, which makes those jobs (or their previous attempt counts) come back, and
// delivery is at-least-once anyway. Leases are memory-only: after a restart every leased job is
// ready again, and outcomes carrying a lease from before the restart are refused.
//
// Group commit: Append only enqueues. One committer thread takes everything pending (up to
// Options::max_commit_batch jobs), checks dedup keys (it is the only writer, so this is race-free,
// and it catches duplicates inside one group), assigns ids, writes one WriteBatch with one fsync
// and then runs the callbacks, on that thread. Many concurrent Appends share one fsync.
//
// Visibility: appended jobs become leasable once durable. After Complete/Retry/Bury return, Lease,
// Counts and NextDue already reflect them. ListDead, Replay and PurgeUser first wait for every
// write queued before them, so they see all earlier calls' effects.
//
// Thread safety: every method may be called from any thread, except that nothing may be called
// once the destructor has started. The destructor drains pending writes (every Append callback
// runs) and joins the committer.
#ifndef HOOKRELAY_COLLECTOR_ROCKSDB_JOB_STORE_H_
#define HOOKRELAY_COLLECTOR_ROCKSDB_JOB_STORE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "collector/job_store.h"
#include "common/clock.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace prometheus {
class Counter;
class Histogram;
class Registry;
}  // namespace prometheus

namespace hookrelay::collector {

class RocksDbJobStore final : public JobStore {
 public:
  struct Options {
    // The data directory (--data_dir); created when missing. One store per directory: a second
    // Open of a directory in use fails with FAILED_PRECONDITION.
    std::string path;
    // Time for due dates, leases, dedup windows and dead-letter stamps. Not owned; must outlive
    // the store. nullptr = common::Clock::Real().
    common::Clock* clock = nullptr;
    // A dedup key is remembered this long after the event was stored.
    absl::Duration dedup_window = absl::Hours(24);
    // Optional; when set, the store's metric families are registered in it. Must outlive the store.
    prometheus::Registry* registry = nullptr;
    // Most jobs written by one group commit (a single Append larger than this is still written
    // whole). Bounds commit latency and the size of one WriteBatch.
    size_t max_commit_batch = 16384;
  };

  // Opens (or creates) the store at options.path and rebuilds the in-memory state from disk.
  static absl::StatusOr<std::unique_ptr<RocksDbJobStore>> Open(Options options);

  RocksDbJobStore(const RocksDbJobStore&) = delete;
  RocksDbJobStore& operator=(const RocksDbJobStore&) = delete;
  ~RocksDbJobStore() override;

  // An item with an empty dedup_key is never treated as a duplicate (and no key is recorded).
  void Append(std::vector<AppendItem> items, AppendCallback done) override;
  // A lease stays valid until it is noticed to have expired (by Lease or Counts), even if its
  // deadline has passed. Errors: INVALID_ARGUMENT for a non-positive duration, or a read error.
  absl::StatusOr<std::vector<LeasedJob>> Lease(size_t max, absl::Duration duration) override;
  absl::Status Complete(uint64_t job_id, uint64_t lease) override;
  absl::Status Retry(uint64_t job_id, uint64_t lease, absl::Time not_before,
                     const hookrelay::v1::Attempt& attempt) override;
  absl::Status Bury(uint64_t job_id, uint64_t lease, std::string_view reason,
                    const hookrelay::v1::Attempt& attempt) override;
  // The time range is half-open: from <= dead_at < to.
  absl::StatusOr<std::vector<hookrelay::v1::Job>> ListDead(const DeadFilter& filter) override;
  absl::StatusOr<size_t> Replay(const DeadFilter& filter) override;
  absl::StatusOr<size_t> PurgeUser(std::string_view user_id,
                                   const std::vector<std::string>& source_ids) override;
  // Jobs whose Retry/Bury is between its lease check and its in-memory update count as leased.
  JobCounts Counts() override;
  absl::Time NextDue() override;

  // Waits until every write queued before the call is committed.
  void Flush();

  // Test hooks. Compacts every column family fully (so the dedup expiry filter runs over all
  // dedup keys), and reports whether a dedup key is still stored, regardless of its age.
  absl::Status CompactForTesting();
  absl::StatusOr<bool> HasDedupKeyForTesting(std::string_view dedup_key);

 private:
  // One entry of the committer's queue.
  struct WriteOp {
    enum class Kind { kAppend, kPutJob, kDeleteJob, kBury, kBarrier };
    Kind kind = Kind::kAppend;
    // kAppend.
    std::vector<AppendItem> items;
    AppendCallback done;
    // kPutJob (a Retry: the record is taken from overlay_ if it still holds `seq`), kDeleteJob
    // (Complete), kBury (`value` is the dead record).
    uint64_t id = 0;
    uint64_t seq = 0;
    std::string value;
    // kBarrier.
    absl::Notification* barrier = nullptr;
  };

  // A ready or scheduled job, ordered by (due, id).
  struct QueuedJob {
    int64_t due_ms;
    uint64_t id;
  };
  struct LaterFirst {
    bool operator()(const QueuedJob& a, const QueuedJob& b) const {
      return a.due_ms != b.due_ms ? a.due_ms > b.due_ms : a.id > b.id;
    }
  };
  struct LeaseInfo {
    uint64_t lease;
    absl::Time deadline;
    int64_t due_ms;  // Where the job goes back in the ready order if the lease expires.
  };
  // A record rewritten by Retry whose write is not yet committed: Lease and Retry read it from
  // here so they never see the older record on disk.
  struct PendingRecord {
    uint64_t seq;
    std::string value;
  };
  struct Metrics {
    prometheus::Histogram* commit_duration = nullptr;
    prometheus::Histogram* commit_batch_items = nullptr;
    prometheus::Counter* duplicates = nullptr;
  };

  RocksDbJobStore(Options options, common::Clock& clock);

  absl::Status OpenDb();
  absl::Status Recover();
  absl::Status RegisterMetrics();

  void Enqueue(WriteOp op);
  void CommitLoop();
  // Processes one group of queued ops: one WriteBatch, one write.
  void CommitGroup(std::vector<WriteOp>& ops);

  // Checks `lease` and ends it. On success the job is owned by the caller (gone from leased_).
  absl::Status EndLeaseLocked(uint64_t job_id, uint64_t lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The status for an outcome whose lease is not current: FAILED_PRECONDITION if the job still
  // exists, NOT_FOUND otherwise.
  absl::Status StaleLeaseStatus(uint64_t job_id, uint64_t lease);
  // Retry and Bury: ends the lease, loads the record, applies `update` to it.
  template <typename Update>
  absl::StatusOr<hookrelay::v1::Job> TakeLeasedJob(uint64_t job_id, uint64_t lease,
                                                   Update update);
  void ExpireLeasesLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PromoteDueLocked(int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushQueuedLocked(int64_t due_ms, uint64_t id, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t NextLeaseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after Open.
  const Options options_;
  common::Clock& clock_;
  Metrics metrics_;
  // Handles are owned by db_ (destroyed before it in the destructor).
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* jobs_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* dedup_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* dead_cf_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::thread committer_;

  // Serialises writers: the committer holds it for a whole group, admin operations (Replay,
  // PurgeUser) for their scan and write. Acquired before mu_.
  absl::Mutex writer_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(writer_mu_) = 1;
  // Ids below this are reserved on disk (meta "id_limit"); ids stay unique across restarts even
  // when the highest jobs were completed.
  uint64_t id_limit_ ABSL_GUARDED_BY(writer_mu_) = 0;
  rocksdb::WriteBatch batch_ ABSL_GUARDED_BY(writer_mu_);

  // The committer's queue. Never held together with another of the store's mutexes, except
  // taken after mu_ by settlements so that their ops are queued in the order they happened.
  absl::Mutex queue_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::deque<WriteOp> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;

  // The in-memory state of jobs.
  absl::Mutex mu_;
  std::vector<QueuedJob> ready_ ABSL_GUARDED_BY(mu_);      // min-heap by (due, id)
  std::vector<QueuedJob> scheduled_ ABSL_GUARDED_BY(mu_);  // min-heap by (due, id)
  absl::flat_hash_map<uint64_t, LeaseInfo> leased_ ABSL_GUARDED_BY(mu_);
  absl::btree_set<std::pair<absl::Time, uint64_t>> lease_deadlines_ ABSL_GUARDED_BY(mu_);
  // Jobs between their lease check and their in-memory update in Retry/Bury. PurgeUser erases
  // purged ids, which makes the settlement drop the job.
  absl::flat_hash_map<uint64_t, bool> settling_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, PendingRecord> overlay_ ABSL_GUARDED_BY(mu_);
  uint64_t overlay_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dead_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Leases are (epoch << kLeaseEpochShift) + counter; the epoch is persisted and bumped on
  // every Open, so leases never repeat across restarts.
  uint64_t lease_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lease_counter_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_ROCKSDB_JOB_STORE_H_
