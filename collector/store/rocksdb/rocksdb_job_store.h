// The embedded job store: Store on RocksDB under --data_dir, for a single collector.
//
// Durability: Append's callback reports OK only after the jobs are in the write-ahead log and the
// log is fsync'd; they survive kill -9. Settlements (Complete/Retry/Bury) are applied to the
// in-memory state at once and written with the next group commit, without waiting for it: a
// crash can lose the last few, which makes those jobs (or their previous attempt counts) come
// back, and delivery is at-least-once anyway. Leases are memory-only: after a restart every
// leased job is ready again, and outcomes carrying a lease from before the restart are refused.
//
// Group commit: Append only enqueues. Two store threads form a pipeline. The preparer takes
// everything pending (up to Options::max_commit_batch jobs), checks the dedup keys (it is the
// only writer of them, so this is race-free; it also catches duplicates inside the group and
// against the group still being written), assigns ids and builds one WriteBatch. The writer
// writes it with one fsync, publishes the jobs and runs the callbacks. While one group is being
// written the next is prepared, so many concurrent Appends share one fsync and the CPU work of
// a group overlaps the previous group's fsync. While no group is being written, a small one may
// first wait for company (Options::commit_linger).
//
// Visibility: appended jobs become leasable once durable. After Complete/Retry/Bury return, Lease,
// Counts and NextDue already reflect them. ListDead and Replay first wait for every write queued
// before them, so they see all earlier calls' effects.
//
// The per-user index (SPEC §6.1), kept so that a deletion never scans the store: the sources a
// user was seen in are keys of the `users` family, written in the append's own batch the first
// time a (user, source) pair is seen (a bounded cache of pairs already written keeps repeats off
// the hot path); the user's dead letters are indexed there when buried; the user's pending jobs
// are indexed in the `users` family too ("p" ++ user hash ++ job id, written with the job and
// deleted when it ends), so nothing about them is held in memory.
// ApplyDeletion runs on the preparer thread between two group commits (a kExclusive op): it waits
// for the group being written, then reads and writes only the user's keys, so appends queue
// behind it for a time proportional to that user's data.
//
// Memory and start-up (issue 14): the order of pending jobs lives on disk: appended jobs are
// *fresh* records, whose order is their id's in the `jobs` family (due = append time, which
// never goes back for them); retried, replayed and other jobs have a key (due time ++ id) in the
// `due` family. The pager merges the two streams. Memory holds a bounded window of the order:
// every queued (not leased) job whose (due, id) is below a cursor, at most
// Options::window_size of them (the ready and scheduled heaps). Jobs at or above the cursor are on disk only; Lease pages the next chunk in, in
// order, when the window has room. Appends of jobs due now join the window only while it is
// caught up (the cursor is at the end of both streams); a window that overflows keeps its lower
// half and moves the cursor down (never below a key ever leased, so no key of a leased or ended
// job is read again). A retried job whose write is still pending and whose key is at or above the
// cursor waits in a small `parked` set until written. The numbers of jobs and dead letters are
// counters in the meta family, updated by merge operands in the same WriteBatch as the change,
// so Open reads a few keys instead of scanning: it costs the same whatever the backlog. Counts:
// totals exact; the ready/scheduled split is exact for the window and attributes the jobs beyond
// it (all due at or after the cursor's time) as ready when the cursor is due, scheduled otherwise.
//
// Audience profiles (SPEC §6.2) are merge operands in the `profiles` family, written in the
// append's batch; the `audiences` family holds the profile change log, memberships, rechecks and
// sync states. Audience commits and change-log marks are kExclusive ops too. The `users` and
// `profiles` families only take appends on the hot path, in random key order: they have vector
// memtables (O(1) inserts) and are flushed before a deletion or a sync reads them.
//
// A full disk or an I/O error: the store never aborts. A failed write fails its appends (with
// UNAVAILABLE and a message without file paths), marks the store unwritable (WriteHealth, the
// on_write_health callback, hookrelay_store_errors_total{kind}, hookrelay_store_writable, one
// log line per change) and starts a recovery thread that calls DB::Resume and a probe write with
// growing pauses until both succeed. Settlements of a failed write are kept and written first
// once the store is writable again; leases and reads keep working meanwhile, so deliveries of
// stored jobs go on. RocksDB's own info log goes to the project's logger, never to a file on the
// data volume.
//
// Thread safety: every method may be called from any thread, except that nothing may be called
// once the destructor has started. Append callbacks run on the writer thread and must not call
// ListDead, Replay, ApplyDeletion, Flush or the test hooks (they wait for that thread). The
// destructor drains pending writes (every Append callback runs) and joins both threads.
#ifndef HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_JOB_STORE_H_
#define HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_JOB_STORE_H_

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "collector/store/ready_signal.h"
#include "collector/store/store.h"
#include "common/clock.h"

namespace prometheus {
class Counter;
template <typename T>
class Family;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace hookrelay::collector {

class RocksDbJobStore final : public Store {
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
    // whole). Groups only grow this large under a backlog; the cap bounds the latency of one
    // commit (about 3 us per job plus the fsync) while keeping the fsync amortised.
    size_t max_commit_batch = 8192;
    // Group commit linger: when no group is being written and the queue holds fewer than
    // linger_jobs jobs and settlements, the preparer waits up to commit_linger for more before
    // it prepares a group, so that requests arriving a little apart share one write and fsync
    // (each fsync here costs three waits on the disk). The wait ends early once as many appends
    // are queued as were answered since the last group was taken (at least 2): clients that send
    // their next request when answered, all of them back, send nothing more. A linger that
    // gathers nothing makes the next 1, 2, 4 … 256 such groups skip it, so a lone client writing
    // one request at a time pays it rarely; one that gathers something resets that. Barriers,
    // pauses, exclusive ops and the completion of a job with an ordering key (which frees its
    // key) end a linger at once. Real time. Zero: off; at most one second.
    absl::Duration commit_linger = absl::ZeroDuration();
    size_t linger_jobs = 64;
    // Called on a store thread each time the store loses (false) or regains (true) the ability
    // to write. Must not block or call the store. Optional.
    std::function<void(bool writable)> on_write_health;
    // While unwritable, recovery is tried after resume_interval, then at doubling intervals up
    // to resume_max_interval. Real time: the wait is for the disk, not for the clock.
    absl::Duration resume_interval = absl::Milliseconds(500);
    absl::Duration resume_max_interval = absl::Seconds(4);
    // Tests only: called by ApplyDeletion on the preparer thread just before ("before_write")
    // and just after ("after_write") its one write, so a test can kill the process there.
    std::function<void(std::string_view stage)> deletion_hook_for_testing;
    // Most queued jobs held in memory (the window); the rest are paged in from disk in due order.
    // At least 2.
    size_t window_size = 65536;
    // How long a lease lasts (Lease). Positive.
    absl::Duration lease_duration = absl::Seconds(90);
  };

  // Tests only: the sizes of the in-memory structures that could grow with the backlog.
  struct MemoryStats {
    size_t window = 0;  // ready + scheduled jobs held in memory
    size_t parked = 0;
    size_t leased = 0;
    size_t overlay = 0;
    bool caught_up = false;  // No queued job is on disk only.
    size_t detached = 0;  // destinations paged on their own (see Detached)
    uint64_t fresh_floor = 0;  // As last put in a batch, or read at Open.
  };
  MemoryStats MemoryStatsForTesting();
  // Tests only: no group is waiting for the writer or being written.
  bool WriterIdleForTesting();
  // Tests only: holds the preparer until the returned notification is notified (PauseWrites).
  std::shared_ptr<absl::Notification> PauseWritesForTesting() { return PauseWrites(); }

  // Opens (or creates) the store at options.path and rebuilds the in-memory state from disk.
  static absl::StatusOr<std::unique_ptr<RocksDbJobStore>> Open(Options options);

  RocksDbJobStore(const RocksDbJobStore&) = delete;
  RocksDbJobStore& operator=(const RocksDbJobStore&) = delete;
  ~RocksDbJobStore() override;

  // An item with an empty dedup_key is never treated as a duplicate (and no key is recorded).
  void Append(std::vector<AppendItem> items, AppendCallback done) override;
  // A lease stays valid until it is noticed to have expired (by Lease or Counts), even if its
  // deadline has passed. Errors: a read error.
  // Per destination: jobs in memory are queued by destination (a tag interned per destination
  // id), so a destination without budget is passed over without reading or writing its jobs.
  // Held jobs may grow the window to HeldWindowLimit(); a window full of them beyond that
  // detaches the destinations holding them (Detached), so the pager reaches other destinations'
  // jobs behind them without leasing a held one.
  using JobQueue::Lease;
  absl::StatusOr<std::vector<LeasedJob>> Lease(size_t max, LeaseBudget budget) override;
  absl::Duration lease_duration() const override { return options_.lease_duration; }
  bool KeepsPerKeyOrder() const override { return true; }
  std::vector<absl::StatusOr<absl::Time>> ExtendLeases(
      const std::vector<std::pair<uint64_t, uint64_t>>& leases) override;
  // Settles each job in turn (CompleteJob, RetryJob, BuryJob) and runs `done` before returning.
  void Settle(std::vector<Settlement> batch, SettleCallback done) override;
  // The time range is half-open: from <= dead_at < to.
  absl::StatusOr<std::vector<hookrelay::v1::Job>> ListDead(const DeadFilter& filter) override;
  // Replayed jobs keep their id, attempts and history; they are due now, and
  // first_attempt_unix_ms is reset (a fresh retry window).
  absl::StatusOr<size_t> Replay(const DeadFilter& filter) override;
  absl::StatusOr<std::vector<std::string>> SourcesSeen(std::string_view user_id) override;
  absl::StatusOr<DeletionOutcome> ApplyDeletion(DeletionPlan plan) override;
  absl::StatusOr<std::optional<hookrelay::v1::Deletion>> GetDeletion(std::string_view id) override;
  absl::StatusOr<std::vector<hookrelay::v1::Deletion>> ListDeletions(std::string_view before_id,
                                                                     size_t limit) override;
  absl::StatusOr<AudienceSyncInput> BeginAudienceSync(std::string_view audience_id,
                                                      const std::vector<std::string>& sources,
                                                      absl::Time now) override;
  absl::StatusOr<std::vector<AudienceUser>> ReadAudienceUsers(
      std::string_view audience_id, const std::vector<std::string>& users,
      const std::vector<std::string>& sources) override;
  absl::StatusOr<hookrelay::v1::AudienceState> CommitAudienceSync(AudienceSyncPlan plan) override;
  absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> GetAudienceState(
      std::string_view audience_id) override;
  absl::Status DropAudience(std::string_view audience_id) override;
  // Jobs whose Retry/Bury is between its lease check and its in-memory update count as leased.
  absl::Status WriteHealth() const override;
  absl::StatusOr<std::optional<std::string>> LoadConfig() override;
  absl::Status SaveConfig(std::string_view bytes) override;
  JobCounts Counts() override;
  absl::Time NextDue() override;
  // Raised when a group or an exclusive op publishes jobs, after Replay, and by a timer on the
  // store's clock at NextWake.
  void SetReadyCallback(std::function<void()> ready) override;

  // Waits until every write queued before the call is committed.
  void Flush();

  // Test hooks. Compacts every column family fully (so the dedup expiry filter runs over all
  // dedup keys), and reports whether a dedup key is still stored, regardless of its age.
  absl::Status CompactForTesting();
  absl::StatusOr<bool> HasDedupKeyForTesting(std::string_view dedup_key);

 private:
  // One settlement each (Settle).
  absl::Status CompleteJob(uint64_t job_id, uint64_t lease);
  absl::Status RetryJob(uint64_t job_id, uint64_t lease, absl::Time not_before,
                        const hookrelay::v1::Attempt& attempt);
  absl::Status BuryJob(uint64_t job_id, uint64_t lease, std::string_view reason,
                       const hookrelay::v1::Attempt& attempt);
  // The members are defined in one file per part of the engine (as LevelDB splits its DBImpl):
  //   rocksdb_job_store.cc     Open, the state rebuilt at start-up, configuration, test hooks
  //   rocksdb_group_commit.cc  the write path: queue, preparer and writer threads, exclusive ops
  //   rocksdb_pending.cc       the order of pending jobs: keys, counts, the window and its pager
  //   rocksdb_leases.cc        Lease, Complete, Retry, Bury
  //   rocksdb_dead_letters.cc  ListDead, Replay
  //   rocksdb_deletions.cc     the per-user index and deletions
  //   rocksdb_audiences.cc     audience data and syncs
  //   rocksdb_write_health.cc  failed writes and the recovery thread
  // The on-disk format is in rocksdb_layout.h, the RocksDB tuning in rocksdb_options.h.

  // One entry of the preparer's queue.
  struct WriteOp {
    enum class Kind { kAppend, kPutJob, kDeleteJob, kBury, kBarrier, kPause, kExclusive };
    Kind kind = Kind::kAppend;
    // kAppend.
    std::vector<AppendItem> items;
    AppendCallback done;
    // kPutJob (a Retry: the record is taken from overlay_ if it still holds `seq`), kDeleteJob
    // (Complete), kBury (`value` is the dead record, `index_key` its key in the user index or
    // empty).
    uint64_t id = 0;
    uint64_t seq = 0;
    std::string value;
    std::string index_key;
    // kPutJob, kDeleteJob, kBury: the due time the job was leased under (its key in `due`), and
    // the user hash of its pending-index key (0: none). `fresh`: it was leased from its fresh
    // record, which has no `due` key to delete.
    int64_t due_ms = 0;
    uint64_t user_hash = 0;
    bool fresh = false;
    // kDeleteJob, kBury of a job with an ordering key: the key, freed once this is written.
    uint64_t order_key = 0;
    // kDeleteJob, kBury: a deletion already removed the job's record and counted it.
    bool purged = false;
    // kDeleteJob, kBury: the due time of the record on disk. kPutJob: set when prepared, the
    // due time it replaces on disk.
    int64_t disk_due_ms = 0;
    // kExclusive: `run` is called by the preparer alone, once every earlier op is written and
    // before any later one is prepared; then `notify` is notified.
    std::function<void()> run;
    // kBarrier: notified once every earlier op is written. kPause: `notify` once every earlier op
    // is written; no write happens until `resume` is notified. (The preparer waits on `resume`,
    // so it shares ownership: the pausing caller may return right after notifying it.)
    absl::Notification* notify = nullptr;
    std::shared_ptr<absl::Notification> resume;
  };
  // One group commit, handed from the preparer to the writer. Defined in rocksdb_group_commit.h.
  struct Group;

  // A ready or scheduled job, ordered by (due, id): also its key in the `due` family, or, for a
  // `fresh` one (its record as appended, no `due` key), its place in the id order of `jobs`.
  struct QueuedJob {
    int64_t due_ms;
    uint64_t id;
    bool fresh = false;  // Not part of the order.
    // The job's destination (DestinationTag); 0 when unknown (always within budget). Not part
    // of the order.
    uint32_t dest = 0;
    // Its ordering key (OrderKey): 0 when the job keeps no order. Not part of the order.
    uint64_t key = 0;
    bool operator<(const QueuedJob& o) const {
      return due_ms != o.due_ms ? due_ms < o.due_ms : id < o.id;
    }
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
    uint64_t user_hash;  // Of the record read by Lease, for its pending-index key.
    bool fresh;  // Leased from its fresh record (no `due` key).
    uint32_t dest;  // Its destination's tag, for the ready queues.
    uint64_t key;  // Its ordering key (OrderKey), 0 for none.
  };
  // The ready jobs of the window, one min-heap by (due, id) per destination tag.
  //
  // Per-key order (DeliveryOptions.ordering): a job with an ordering key goes out only while its
  // key is free: no job of the key leased or settling (`busy`, kept until the settlement is
  // written, so that a crash never makes an earlier job come back after a later one went) and
  // no retry holding the key (`hold_until`). A retried job of a key keeps its place in the
  // (due, id) order and holds its key instead of moving, so it stays the key's first job. The
  // jobs of a key that is not free wait aside (`held`) and go back to their destination's heap
  // when it frees: each job moves once per wait, whatever the length of the wait.
  class ReadyQueues {
   public:
    static constexpr size_t kUnasked = ~size_t{0};
    void Push(const QueuedJob& job);
    // Every ready job, those waiting for their key included.
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    // The oldest ready job (waiting ones included); requires !empty().
    QueuedJob Oldest() const;
    // Pops the oldest job of the destinations whose `allowance` (indexed by tag; grown and
    // filled by `ask` for a tag seen first) is above 0, and spends one of it. False when no
    // destination with jobs has any left. A job whose key is not free is set aside on the way.
    bool PopWithin(std::vector<size_t>& allowance, absl::FunctionRef<size_t(uint32_t)> ask,
                   QueuedJob* out);
    // Pops the oldest job whatever its destination (not one waiting for its key); false when
    // every ready job waits for its key.
    bool PopOldest(QueuedJob* out);
    // Removes the jobs `drop` selects.
    void RemoveIf(absl::FunctionRef<bool(const QueuedJob&)> drop);
    void ForEach(absl::FunctionRef<void(const QueuedJob&)> f) const;
    // The ready jobs of destination `tag` in its heap (not those waiting for their key).
    size_t SizeOf(uint32_t tag) const { return tag < heaps_.size() ? heaps_[tag].size() : 0; }
    const std::vector<QueuedJob>* HeapOf(uint32_t tag) const {
      return tag < heaps_.size() ? &heaps_[tag] : nullptr;
    }
    // Gives back the memory of destination `tag`'s heap beyond its jobs.
    void ShrinkHeap(uint32_t tag);

    // The key's job `id` is leased (the caller popped it). Its key must be free.
    void Acquire(uint64_t key, uint64_t id);
    // The key's job `id` is no longer leased or settling (a no-op if another job holds it).
    void Release(uint64_t key, uint64_t id);
    // A retry holds the key until `until_ms`.
    void Hold(uint64_t key, int64_t until_ms);
    // Ends the holds due by `now_ms`; whether any ended.
    bool EndHolds(int64_t now_ms);
    // The earliest hold's end, INT64_MAX when none.
    int64_t NextHoldEnd() const;
    // Jobs waiting for their key (tests, metrics).
    size_t waiting() const { return waiting_; }

   private:
    struct Key {
      uint64_t busy = 0;  // The job id leased or settling, 0 for none.
      int64_t hold_until_ms = 0;  // 0 for none.
      std::vector<QueuedJob> held;  // Min-heap by (due, id).
    };
    bool Free(const QueuedJob& job) const;
    // Back to the heaps once the key is free; forgets a key with nothing left.
    void MaybeFree(uint64_t key);
    void PushHeap(const QueuedJob& job);
    // The tag whose heap has the oldest top among those `eligible` selects; -1 for none.
    int OldestHeap(absl::FunctionRef<bool(uint32_t)> eligible) const;
    std::vector<std::vector<QueuedJob>> heaps_;
    size_t size_ = 0;
    absl::flat_hash_map<uint64_t, Key> keys_;
    absl::btree_set<std::pair<int64_t, uint64_t>> holds_;  // (until, key)
    size_t waiting_ = 0;
  };
  // A job's ordering key in the ready queues: 0 for a job without one. Its destination's tag is
  // part of it (the order is per destination).
  static uint64_t OrderKey(uint32_t dest, std::string_view ordering_key);
  // A record rewritten by Retry whose write is not yet committed: Lease and Retry read it from
  // here so they never see the older record on disk.
  struct PendingRecord {
    uint64_t seq;
    std::string value;
    // The due time of the record on disk (the persisted due-time counts follow it).
    int64_t disk_due_ms;
  };
  // Changes to the persisted due-time counts of one write: (second, delta).
  using DueCountDeltas = absl::flat_hash_map<int64_t, int64_t>;
  struct Metrics {
    prometheus::Histogram* commit_duration = nullptr;
    prometheus::Histogram* commit_batch_items = nullptr;
    prometheus::Counter* duplicates = nullptr;
    // hookrelay_store_commit_lingers_total{result="joined"|"alone"}
    prometheus::Counter* lingers_joined = nullptr;
    prometheus::Counter* lingers_alone = nullptr;
    prometheus::Family<prometheus::Counter>* store_errors = nullptr;
    prometheus::Gauge* writable = nullptr;
  };

  RocksDbJobStore(Options options, common::Clock& clock);

  absl::Status OpenDb();
  absl::Status Recover();
  absl::Status RegisterMetrics();

  void Enqueue(WriteOp op);
  // The two store threads.
  void PrepareLoop();
  void WriteLoop();
  // The queue holds enough to write at once (Options::commit_linger): `appends_expected`
  // appends, linger_jobs jobs and settlements, or an op that must not wait.
  bool LingerDoneLocked(size_t appends_expected) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // The preparer's back-off: small groups still to skip the linger, and the next skip count.
  struct LingerState {
    int skips = 0;
    int backoff = 0;
  };
  // On the preparer thread, with work queued: waits for company when the linger applies.
  void MaybeLingerLocked(LingerState& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Dedup check, ids, WriteBatch. `inflight` is the group still being written, if any.
  void PrepareGroup(Group& group, const Group* inflight);
  // The write, then the in-memory publication and the callbacks.
  void WriteGroup(Group& group);
  // Runs `fn` as a kExclusive op and waits for it: deletions, audience commits and change-log
  // marks, which must see every earlier write and come before every later one.
  void RunExclusive(std::function<void()> fn);
  absl::StatusOr<DeletionOutcome> ApplyDeletionNow(DeletionPlan& plan);
  absl::Status FlushAppendOnly(rocksdb::ColumnFamilyHandle* family, std::string_view what);
  absl::StatusOr<hookrelay::v1::AudienceState> CommitAudienceSyncNow(AudienceSyncPlan& plan);
  // Gives `jobs` ids and due time `now_ms`, and puts them (and the id high-water mark) in
  // `batch`; returns the ids. Preparer thread (exclusive ops) only.
  std::vector<uint64_t> PutNewJobs(std::vector<hookrelay::v1::Job>& jobs, int64_t now_ms,
                                   rocksdb::WriteBatch& batch);
  // Writes `batch` (synced) with `jobs` appended to it, then publishes the jobs. Exclusive ops
  // only.
  absl::Status WriteWithJobs(rocksdb::WriteBatch& batch, std::vector<hookrelay::v1::Job>& jobs,
                             std::string_view what);
  // One-time conversion of a data dir written before the `due` family and the counters: one
  // scan of jobs and dead letters. Open only.
  absl::Status MigrateLayout();
  // Puts the `due` key and pending-index key of a new or replayed job in `batch`.
  // The `due` key's value is the job's destination id and ordering key (the pager queues the job
  // by them; rocksdb_layout.h, DueValue).
  void PutJobKeys(int64_t due_ms, uint64_t id, uint64_t user_hash, std::string_view destination,
                  std::string_view ordering_key, rocksdb::WriteBatch& batch);
  // Deletes them (a fresh record has no `due` key).
  void DeleteJobKeys(int64_t due_ms, uint64_t id, uint64_t user_hash, bool fresh,
                     rocksdb::WriteBatch& batch);
  // At most once a second: puts in the group's batch the lowest id a fresh record on disk may
  // have once the batch is written (Open's pager starts there, so records rewritten by retries
  // or deleted below it are not stepped over at every start).
  void MaybePutFreshFloorLocked(Group& group, const Group* inflight)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds to the persisted job / dead-letter counters in `batch`.
  void CountInBatch(int64_t jobs, int64_t dead, rocksdb::WriteBatch& batch);
  // Adds `deltas` to the persisted due-time counts in `batch` (a count that reaches zero is
  // deleted, so the keys stay as few as the seconds with jobs). RevertDueCountsLocked undoes
  // the bookkeeping of a batch that failed.
  void DueCountsInBatchLocked(const DueCountDeltas& deltas, rocksdb::WriteBatch& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RevertDueCountsLocked(const DueCountDeltas& deltas) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A job with a record appears (+1) or ends (-1) at due time `due_ms`: live_jobs_ and the
  // in-memory due-time counts.
  void CountJobLocked(int64_t due_ms, int64_t delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Jobs due in seconds after `second`.
  int64_t DueAfterLocked(int64_t second) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A queued job (not leased) with key (due_ms, id): into the window when below the cursor,
  // else (`dirty`: its `due` key is not written yet) into parked_, else nothing (on disk).
  // `fresh`: a just-published fresh record (no `due` key; the pager finds it by id).
  void QueueLocked(int64_t due_ms, uint64_t id, uint32_t dest, uint64_t key, int64_t now_ms,
                   bool dirty, bool fresh = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A small number per destination id, for the ready queues (0: unknown). Interned for the
  // store's life (destinations are few). Any thread, with or without mu_.
  uint32_t DestinationTag(std::string_view destination_id) ABSL_LOCKS_EXCLUDED(tags_mu_);
  std::string DestinationOfTag(uint32_t tag) ABSL_LOCKS_EXCLUDED(tags_mu_);
  // Keeps the lower half of an overfull window and moves the cursor down.
  void ShrinkWindowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the next chunk of `due` keys at the cursor into the window when it has room: below
  // `limit` jobs (0: Options::window_size; Lease passes HeldWindowLimit() when every ready job
  // in memory is held back).
  absl::Status MaybePageLocked(int64_t now_ms, size_t limit = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One chunk of the pending order from `*cursor` (and the fresh records from `*fresh_cursor`):
  // the jobs whose destination `take` accepts go into the window, the others are passed over;
  // both places move past what was read.
  absl::Status PageLocked(QueuedJob* cursor, uint64_t* fresh_cursor,
                          absl::FunctionRef<bool(uint32_t)> take, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A destination whose held-back jobs filled the window is detached: its jobs beyond the
  // oldest page_chunk_ leave memory, the pager passes over its jobs from then on, and its own
  // cursor pages them in a chunk at a time when it has few left in memory (PageDetachedLocked),
  // so a throttled destination's backlog is read past once instead of being leased and written
  // back job by job. Memory-only: after a restart every destination is paged in the one order
  // again. Invariant: the destination's queued jobs below `from` are in the window (or leased,
  // settling, ended); those at or above it are on disk only, or in parked_ until their key is
  // written.
  struct Detached {
    QueuedJob from{0, 0};
    uint64_t fresh_id = 0;  // its place in the fresh records (as fresh_cursor_id_ for cursor_)
  };
  // Detaches the destinations holding more than page_chunk_ ready jobs and no allowance left
  // (`allowance` as Lease filled it); true when jobs left the window.
  bool DetachHeldLocked(const std::vector<size_t>& allowance) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether detached destination `tag` should page in its next chunk: fewer than half a chunk
  // of its jobs in memory, more on disk, and room in the window.
  bool DetachedWantsPageLocked(uint32_t tag, const Detached& d) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pages the next chunk of each detached destination that wants one (and, given `allowance`
  // from a Lease, is not out of budget); `moved`: some destination's cursor moved.
  absl::Status PageDetachedLocked(int64_t now_ms, const std::vector<size_t>* allowance = nullptr,
                                  bool* moved = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Jobs held back by their destination's budget may fill the window up to this many, so that
  // the jobs behind them on disk are paged in: kHeldWindowFactor × Options::window_size (24 bytes
  // a job: 24 MB at the default 65,536).
  static constexpr size_t kHeldWindowFactor = 16;
  size_t HeldWindowLimit() const {
    return std::max<size_t>(options_.window_size, 2) * kHeldWindowFactor;
  }
  // Removes the given jobs from the window heaps.
  void EraseFromWindowLocked(const absl::flat_hash_set<uint64_t>& ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t WindowSizeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ready_.size() + scheduled_.size();
  }
  // Stops the store's writes until the returned notification is notified: for Replay, which
  // scans and writes itself. Returns once every write queued before the call
  // is done.
  std::shared_ptr<absl::Notification> PauseWrites();

  // A write failed: counts it, and on the first failure marks the store unwritable, logs once and
  // wakes the recovery thread. Returns the status for callers: UNAVAILABLE, no file paths.
  absl::Status WriteFailed(const rocksdb::Status& s, std::string_view what);
  // The recovery thread: Resume + a probe write until both succeed, then writable again.
  void RecoverLoop();

  enum class LeaseCheck { kOk, kOtherLease, kNotLeased };
  // Ends the job's lease if `lease` is current; the caller then owns the job (it is in no
  // in-memory set). `info` receives the lease's record (due time, user hash).
  LeaseCheck EndLeaseLocked(uint64_t job_id, uint64_t lease, LeaseInfo* info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The error for an outcome whose lease was not current: FAILED_PRECONDITION if the job still
  // exists, NOT_FOUND otherwise.
  absl::Status RefusedLease(uint64_t job_id, uint64_t lease, LeaseCheck check)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Retry and Bury: ends the lease, marks the job settling and loads its current record.
  absl::StatusOr<hookrelay::v1::Job> BeginSettle(uint64_t job_id, uint64_t lease, LeaseInfo* info)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Both return whether jobs became ready (leases ran out; due times or key holds passed).
  bool ExpireLeasesLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PromoteDueLocked(int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Into ready_ when due_ms <= now_ms, else scheduled_.
  void PushQueuedLocked(const QueuedJob& job, int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t NextLeaseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // When jobs may become leasable without a write: the next due time or the earliest lease
  // expiry (InfiniteFuture when nothing is pending). The ready signal's timer waits for it.
  absl::Time NextWake();
  absl::Time NextWakeLocked(int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time NextDueLocked(int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

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
  rocksdb::ColumnFamilyHandle* users_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* deletions_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* profiles_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* audiences_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* due_cf_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::thread preparer_;
  std::thread writer_;
  std::thread recoverer_;
  // The ready signal (SetReadyCallback); created by Open, stopped first by the destructor.
  std::unique_ptr<ReadySignal> ready_signal_;

  // Owned by the preparer thread (and by Open before it starts): ids are assigned there only.
  uint64_t next_id_ = 1;
  // The due time of the newest fresh record ever written (persisted as "fresh_due"): appended
  // jobs are fresh (no `due` key) only while the clock has not gone back below it, so that fresh
  // records are in (due, id) order by id.
  int64_t fresh_due_ms_ = 0;
  // Constant after Open: how many `due` keys one page reads.
  size_t page_chunk_ = 4096;
  std::string key_scratch_;
  // (user, source) pairs whose sources-seen key is known to be written: a direct-mapped cache of
  // pair hashes (0 = empty). Filled by the writer after a successful write, read by the preparer,
  // cleared by a deletion; a miss only costs a redundant Put.
  static constexpr size_t kSeenCacheSlots = size_t{1} << 20;  // 8 MB
  std::unique_ptr<std::atomic<uint64_t>[]> seen_cache_;
  // The profile change log: the next position, and the users logged since the last mark (a
  // user changed twice between two syncs is logged once).
  uint64_t next_log_seq_ = 1;
  absl::flat_hash_set<uint64_t> logged_users_;

  // The preparer's queue. Settlements take it after mu_, so that their ops are queued in the
  // order they happened.
  absl::Mutex queue_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::deque<WriteOp> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;

  // The pipeline between preparer and writer. Groups are written in the order prepared; at most
  // one is being written while the next is prepared.
  absl::Mutex pipe_mu_ ABSL_ACQUIRED_AFTER(queue_mu_);
  // Appends answered (callbacks run) since the preparer last took a group: the commit linger's
  // guess at how many clients may send again (Options::commit_linger).
  std::atomic<size_t> acked_appends_{0};
  std::deque<std::unique_ptr<Group>> to_write_ ABSL_GUARDED_BY(pipe_mu_);
  // Written groups, recycled by the preparer (which may still read the last one's dedup keys).
  std::vector<std::unique_ptr<Group>> written_ ABSL_GUARDED_BY(pipe_mu_);
  // Handed to the writer and not yet written.
  int unwritten_ ABSL_GUARDED_BY(pipe_mu_) = 0;
  bool preparer_done_ ABSL_GUARDED_BY(pipe_mu_) = false;

  // Destination tags (DestinationTag): a leaf lock.
  absl::Mutex tags_mu_;
  absl::flat_hash_map<std::string, uint32_t> tags_ ABSL_GUARDED_BY(tags_mu_);
  std::vector<std::string> tag_names_ ABSL_GUARDED_BY(tags_mu_) = {""};

  // The in-memory state of jobs.
  absl::Mutex mu_;
  // The window: every queued job with (due, id) below cursor_: the ready ones by destination,
  // the scheduled ones in one min-heap by (due, id).
  ReadyQueues ready_ ABSL_GUARDED_BY(mu_);
  std::vector<QueuedJob> scheduled_ ABSL_GUARDED_BY(mu_);
  QueuedJob cursor_ ABSL_GUARDED_BY(mu_) = {0, 0};
  // The last Lease found every ready job in memory held back by its destination's budget and
  // paged past Options::window_size (up to HeldWindowLimit()); cleared by a Lease that leased
  // within budget with the window back under window_size.
  bool window_held_ ABSL_GUARDED_BY(mu_) = false;
  // The pager's place in the fresh records (the `jobs` family by id): the published fresh
  // records at or above it are exactly those with keys at or above cursor_ (fresh records are
  // in (due, id) order by id).
  uint64_t fresh_cursor_id_ ABSL_GUARDED_BY(mu_) = 0;
  // The fresh floor last put in a batch (or read at Open), and when the next one may be computed.
  uint64_t fresh_floor_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_floor_ms_ ABSL_GUARDED_BY(mu_) = 0;
  // Retried jobs at or above the cursor whose `due` key is not written yet.
  absl::btree_set<QueuedJob> parked_ ABSL_GUARDED_BY(mu_);
  // Destinations paged on their own (Detached), by tag.
  absl::flat_hash_map<uint32_t, Detached> detached_ ABSL_GUARDED_BY(mu_);
  // By destination tag: above every key of that destination ever leased in this process (a
  // detached destination's jobs leave memory only above it, as the window's do above
  // lease_floor_).
  std::vector<QueuedJob> dest_lease_floor_ ABSL_GUARDED_BY(mu_);
  // Above every key ever leased in this process: the cursor never goes below it, so the `due`
  // key of a leased job (deleted only when its settlement is written) is never paged in again.
  QueuedJob lease_floor_ ABSL_GUARDED_BY(mu_) = {0, 0};
  // Jobs with ids up to this one are published; the pager skips higher ones (written, not yet
  // published: their publication queues them) and the replayed ones in unpublished_.
  uint64_t published_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<uint64_t> unpublished_ ABSL_GUARDED_BY(mu_);
  // Jobs with a record (ready, scheduled, leased, settling), for Counts, and how many are due in
  // each second (bounded by the seconds with jobs due, not by their number); the sum after
  // due_after_second_ is cached for Counts.
  int64_t live_jobs_ ABSL_GUARDED_BY(mu_) = 0;
  absl::btree_map<int64_t, int64_t> due_counts_ ABSL_GUARDED_BY(mu_);
  int64_t due_after_second_ ABSL_GUARDED_BY(mu_) = INT64_MIN;
  int64_t due_after_ ABSL_GUARDED_BY(mu_) = 0;
  // The persisted due-time counts as written (or being written), non-zero ones only.
  absl::flat_hash_map<int64_t, int64_t> disk_due_counts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, LeaseInfo> leased_ ABSL_GUARDED_BY(mu_);
  absl::btree_set<std::pair<absl::Time, uint64_t>> lease_deadlines_ ABSL_GUARDED_BY(mu_);
  // Jobs between their lease check and their in-memory update in Retry/Bury. A deletion erases
  // purged ids, which makes the settlement drop the job.
  absl::flat_hash_set<uint64_t> settling_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, PendingRecord> overlay_ ABSL_GUARDED_BY(mu_);
  // Purged jobs leased at the deletion: their Complete writes and counts nothing.
  absl::flat_hash_set<uint64_t> purged_leased_ ABSL_GUARDED_BY(mu_);
  uint64_t overlay_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dead_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Leases are (epoch << kLeaseEpochShift) + counter; the epoch is persisted and bumped on
  // every Open, so leases never repeat across restarts.
  uint64_t lease_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lease_counter_ ABSL_GUARDED_BY(mu_) = 0;

  // Write health. `writable_` is read without the lock on hot paths.
  std::atomic<bool> writable_{true};
  mutable absl::Mutex health_mu_;
  // Why the store cannot write ("no_space", "io_error", ...), empty while writable.
  std::string error_kind_ ABSL_GUARDED_BY(health_mu_);
  bool health_stopping_ ABSL_GUARDED_BY(health_mu_) = false;
  // Settlements whose write failed; queued again, first, once the store is writable.
  std::vector<WriteOp> deferred_ ABSL_GUARDED_BY(health_mu_);
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_JOB_STORE_H_
