#include "collector/store/rocksdb/rocksdb_job_store.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <system_error>

#include "absl/cleanup/cleanup.h"
#include "absl/memory/memory.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rocksdb/cache.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "collector/store/rocksdb/rocksdb_layout.h"
#include "collector/store/rocksdb/rocksdb_options.h"
#include "collector/store/rocksdb/rocksdb_status.h"
#include "common/check.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;
using rocksdb_internal::AudienceKey;
using rocksdb_internal::DeadIndexKey;
using rocksdb_internal::DeadIndexPrefix;
using rocksdb_internal::DecodeU64;
using rocksdb_internal::DeletionKey;
using rocksdb_internal::DueCountKey;
using rocksdb_internal::DueKeyBytes;
using rocksdb_internal::DueOf;
using rocksdb_internal::EncodeJobValue;
using rocksdb_internal::ErrorKind;
using rocksdb_internal::FromRocks;
using rocksdb_internal::HeaderSize;
using rocksdb_internal::Int64Add;
using rocksdb_internal::IsFresh;
using rocksdb_internal::LogKey;
using rocksdb_internal::MakeDbOptions;
using rocksdb_internal::MakeDedupOptions;
using rocksdb_internal::MakeDueOptions;
using rocksdb_internal::MakeJobsOptions;
using rocksdb_internal::MakeProfileOptions;
using rocksdb_internal::MakeSmallOptions;
using rocksdb_internal::MakeUsersOptions;
using rocksdb_internal::Malformed;
using rocksdb_internal::MemberKey;
using rocksdb_internal::ParseJobValue;
using rocksdb_internal::PendingKeyBytes;
using rocksdb_internal::PrefixEnd;
using rocksdb_internal::ProfileKey;
using rocksdb_internal::ReadLengthPrefixed;
using rocksdb_internal::RecheckKey;
using rocksdb_internal::RequestKey;
using rocksdb_internal::SecondOf;
using rocksdb_internal::SeenHash;
using rocksdb_internal::SeenKey;
using rocksdb_internal::SeenPrefix;
using rocksdb_internal::ToMillis;
using rocksdb_internal::U64Bytes;
using rocksdb_internal::Unshared;
using rocksdb_internal::UserHash;
using rocksdb_internal::UserHashOf;
using rocksdb_internal::kAdminChunk;
using rocksdb_internal::kAudiencesCf;
using rocksdb_internal::kConfigKey;
using rocksdb_internal::kDeadCf;
using rocksdb_internal::kDeadCountKey;
using rocksdb_internal::kDedupCf;
using rocksdb_internal::kDeletionsCf;
using rocksdb_internal::kDueCf;
using rocksdb_internal::kFreshDueKey;
using rocksdb_internal::kFreshFloorKey;
using rocksdb_internal::kJobCountKey;
using rocksdb_internal::kJobsCf;
using rocksdb_internal::kLayoutKey;
using rocksdb_internal::kLayoutVersion;
using rocksdb_internal::kLeaseEpochKey;
using rocksdb_internal::kNextIdKey;
using rocksdb_internal::kProbeKey;
using rocksdb_internal::kProfilesCf;
using rocksdb_internal::kUserHeaderSize;
using rocksdb_internal::kUsersCf;

// 2^40 leases per epoch: over 60 days at 200k leases/s before the epoch has to move on.
constexpr int kLeaseEpochShift = 40;
constexpr uint64_t kLeaseCounterLimit = uint64_t{1} << kLeaseEpochShift;

// What callers are told when the store cannot write: the kind, never a file path.
const char* ErrorText(std::string_view kind) {
  if (kind == "no_space") return "no space left on the collector's disk";
  if (kind == "corruption") return "the collector's store reports corruption";
  if (kind == "io_error") return "the collector's disk reports I/O errors";
  return "the collector's store cannot write";
}

bool MatchesDead(const Job& job, const DeadFilter& filter) {
  if (!filter.destination_id.empty() && job.destination_id() != filter.destination_id) {
    return false;
  }
  const absl::Time dead_at = absl::FromUnixMillis(job.dead_at_unix_ms());
  return dead_at >= filter.from && dead_at < filter.to;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RocksDbJobStore>> RocksDbJobStore::Open(Options options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("job store: the data dir path is empty");
  }
  if (options.dedup_window <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job store: dedup_window must be positive, got ",
                     absl::FormatDuration(options.dedup_window)));
  }
  options.max_commit_batch = std::max<size_t>(options.max_commit_batch, 1);
  std::error_code error;
  std::filesystem::create_directories(options.path, error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job store: cannot create data dir ", options.path, ": ", error.message()));
  }
  common::Clock& clock = options.clock != nullptr ? *options.clock : common::Clock::Real();
  auto store = absl::WrapUnique(new RocksDbJobStore(std::move(options), clock));
  RETURN_IF_ERROR(store->RegisterMetrics());
  RETURN_IF_ERROR(store->OpenDb());
  RETURN_IF_ERROR(store->Recover());
  store->preparer_ = std::thread([s = store.get()] { s->PrepareLoop(); });
  store->writer_ = std::thread([s = store.get()] { s->WriteLoop(); });
  store->recoverer_ = std::thread([s = store.get()] { s->RecoverLoop(); });
  return store;
}

RocksDbJobStore::RocksDbJobStore(Options options, common::Clock& clock)
    : options_(std::move(options)),
      clock_(clock),
      seen_cache_(new std::atomic<uint64_t>[kSeenCacheSlots]) {
  for (size_t i = 0; i < kSeenCacheSlots; ++i) seen_cache_[i].store(0, std::memory_order_relaxed);
}

RocksDbJobStore::~RocksDbJobStore() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  // The preparer hands everything queued to the writer, which writes it and runs the callbacks.
  if (preparer_.joinable()) preparer_.join();
  if (writer_.joinable()) writer_.join();
  {
    absl::MutexLock lock(&health_mu_);
    health_stopping_ = true;
  }
  if (recoverer_.joinable()) recoverer_.join();
  if (db_ != nullptr) {
    for (rocksdb::ColumnFamilyHandle* handle : handles_) {
      db_->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
    }
    db_->Close().PermitUncheckedError();
  }
}

absl::Status RocksDbJobStore::RegisterMetrics() {
  if (options_.registry == nullptr) return absl::OkStatus();
  // prometheus-cpp reports a name clash with another metric type by throwing.
  try {
    prometheus::Registry& registry = *options_.registry;
    metrics_.commit_duration =
        &prometheus::BuildHistogram()
             .Name("hookrelay_store_commit_duration_seconds")
             .Help("Time to write and fsync one group commit of the embedded job store")
             .Register(registry)
             .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.002, 0.005, 0.01,
                                                              0.02, 0.05, 0.1, 0.2, 0.5, 1});
    metrics_.commit_batch_items =
        &prometheus::BuildHistogram()
             .Name("hookrelay_store_commit_batch_items")
             .Help("Jobs appended and settled by one group commit of the embedded job store")
             .Register(registry)
             .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 5, 10, 20, 50, 100, 200, 500,
                                                              1000, 2000, 5000, 10000, 20000});
    metrics_.store_errors = &prometheus::BuildCounter()
                                 .Name("hookrelay_store_errors_total")
                                 .Help("Failed writes of the job store, by kind (no_space, "
                                       "io_error, corruption, other)")
                                 .Register(registry);
    for (const char* kind : {"no_space", "io_error", "corruption", "other"}) {
      metrics_.store_errors->Add({{"kind", kind}});  // Exported at 0 from the start.
    }
    metrics_.writable = &prometheus::BuildGauge()
                             .Name("hookrelay_store_writable")
                             .Help("1 while the job store can write, 0 while it cannot (a full "
                                   "disk, an I/O error) and ingest is refused")
                             .Register(registry)
                             .Add({});
    metrics_.writable->Set(1);
    metrics_.duplicates = &prometheus::BuildCounter()
                               .Name("hookrelay_ingest_duplicates_total")
                               .Help("Events dropped because their (source, messageId) was seen "
                                     "within the dedup window")
                               .Register(registry)
                               .Add({});
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("job store: registering metrics: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status RocksDbJobStore::OpenDb() {
  // One cache for all column families; reads are dominated by Lease (recent jobs, mostly still
  // in the memtable) and dedup lookups (answered by bloom filters), so it can stay small.
  std::shared_ptr<rocksdb::Cache> cache = rocksdb::NewLRUCache(size_t{32} << 20);
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, MakeSmallOptions(cache)},
      {kJobsCf, MakeJobsOptions(cache)},
      {kDedupCf, MakeDedupOptions(cache, clock_, options_.dedup_window)},
      {kDeadCf, MakeSmallOptions(cache)},
      {kUsersCf, MakeUsersOptions(cache)},
      {kDeletionsCf, MakeSmallOptions(cache)},
      {kProfilesCf, MakeProfileOptions(cache)},
      {kAudiencesCf, MakeSmallOptions(cache)},
      {kDueCf, MakeDueOptions(cache)},
  };
  families[0].options.merge_operator = std::make_shared<Int64Add>();
  rocksdb::DB* db = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(MakeDbOptions(), options_.path, families, &handles_, &db);
  if (!s.ok()) {
    if (s.IsIOError() && absl::StrContains(absl::AsciiStrToLower(s.ToString()), "lock")) {
      return absl::FailedPreconditionError(
          absl::StrCat("job store: data dir ", options_.path,
                       " is in use by another job store (its LOCK file is held): ", s.ToString()));
    }
    return FromRocks(s, absl::StrCat("opening data dir ", options_.path));
  }
  db_.reset(db);
  HOOKRELAY_CHECK(handles_.size() == families.size(), "RocksDB opened a different set of families");
  meta_cf_ = handles_[0];
  jobs_cf_ = handles_[1];
  dedup_cf_ = handles_[2];
  dead_cf_ = handles_[3];
  users_cf_ = handles_[4];
  deletions_cf_ = handles_[5];
  profiles_cf_ = handles_[6];
  audiences_cf_ = handles_[7];
  due_cf_ = handles_[8];
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> RocksDbJobStore::LoadConfig() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kConfigKey, &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  RETURN_IF_ERROR(FromRocks(s, "reading the stored configuration"));
  return std::optional<std::string>(std::move(value));
}

absl::Status RocksDbJobStore::SaveConfig(std::string_view bytes) {
  rocksdb::WriteOptions sync;
  sync.sync = true;
  const rocksdb::Status s =
      db_->Put(sync, meta_cf_, kConfigKey, rocksdb::Slice(bytes.data(), bytes.size()));
  if (!s.ok()) {
    if (metrics_.store_errors != nullptr) {
      metrics_.store_errors->Add({{"kind", std::string(ErrorKind(s))}}).Increment();
    }
    return Unshared(FromRocks(s, "writing the configuration"));
  }
  return absl::OkStatus();
}

absl::Status RocksDbJobStore::Recover() {
  auto read_meta = [this](const char* key, uint64_t* out) -> absl::Status {
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_cf_, key, &value);
    if (s.IsNotFound()) return absl::OkStatus();
    RETURN_IF_ERROR(FromRocks(s, absl::StrCat("reading ", key)));
    if (value.size() != 8) {
      return absl::DataLossError(absl::StrCat("job store: malformed meta record ", key));
    }
    *out = DecodeU64(value.data());
    return absl::OkStatus();
  };
  uint64_t layout = 0;
  RETURN_IF_ERROR(read_meta(kLayoutKey, &layout));
  if (layout != kLayoutVersion) RETURN_IF_ERROR(MigrateLayout());

  absl::MutexLock lock(&mu_);
  uint64_t stored_next_id = 0;
  RETURN_IF_ERROR(read_meta(kNextIdKey, &stored_next_id));
  uint64_t stored_epoch = 0;
  RETURN_IF_ERROR(read_meta(kLeaseEpochKey, &stored_epoch));
  uint64_t jobs = 0;
  RETURN_IF_ERROR(read_meta(kJobCountKey, &jobs));
  uint64_t dead = 0;
  RETURN_IF_ERROR(read_meta(kDeadCountKey, &dead));
  uint64_t fresh_due = 0;
  RETURN_IF_ERROR(read_meta(kFreshDueKey, &fresh_due));
  uint64_t fresh_floor = UINT64_MAX;
  RETURN_IF_ERROR(read_meta(kFreshFloorKey, &fresh_floor));
  live_jobs_ = std::max<int64_t>(static_cast<int64_t>(jobs), 0);
  dead_count_ = std::max<int64_t>(static_cast<int64_t>(dead), 0);
  // The due-time counts: one key per second with jobs due (zero ones are deleted as they
  // occur, and here if any is left).
  rocksdb::WriteBatch cleanup;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf_));
    for (it->Seek("h"); it->Valid() && it->key().starts_with("h"); it->Next()) {
      if (it->key().size() != 9 || it->value().size() != 8) continue;
      const auto second = static_cast<int64_t>(DecodeU64(it->key().data() + 1));
      const auto count = static_cast<int64_t>(DecodeU64(it->value().data()));
      if (count == 0) {
        cleanup.Delete(meta_cf_, it->key());
        continue;
      }
      due_counts_[second] = count;
      disk_due_counts_[second] = count;
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "reading the due-time counts"));
  }

  // The highest id in use: the last key of `jobs` and of `dead` (no scan).
  uint64_t max_id = 0;
  for (rocksdb::ColumnFamilyHandle* family : {jobs_cf_, dead_cf_}) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), family));
    it->SeekToLast();
    if (it->Valid() && it->key().size() == 8) max_id = std::max(max_id, DecodeU64(it->key().data()));
    RETURN_IF_ERROR(FromRocks(it->status(), "reading the highest job id"));
  }
  next_id_ = std::max({stored_next_id, max_id + 1, uint64_t{1}});
  published_id_ = next_id_ - 1;
  fresh_due_ms_ = static_cast<int64_t>(fresh_due);
  // No floor yet: a data dir from before fresh records (none exist), or a new one; written below,
  // before any append.
  if (fresh_floor == UINT64_MAX) {
    fresh_floor = next_id_;
    cleanup.Put(meta_cf_, kFreshFloorKey, U64Bytes(fresh_floor).slice());
  }
  fresh_floor_ = fresh_floor;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), audiences_cf_));
    it->SeekForPrev(LogKey(UINT64_MAX));
    if (it->Valid() && it->key().size() == 9 && it->key()[0] == 'c') {
      next_log_seq_ = DecodeU64(it->key().data() + 1) + 1;
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "reading the profile change log"));
  }
  // The window starts empty, its cursor at the first key; the first chunk is read now. Leases
  // are memory-only: every job leased before the restart is on disk under its key, so it comes
  // back in order like any other.
  const size_t window = std::max<size_t>(options_.window_size, 2);
  page_chunk_ = std::clamp<size_t>(window / 4, 1, 4096);
  cursor_ = {0, 0};
  fresh_cursor_id_ = fresh_floor;
  lease_floor_ = {0, 0};
  RETURN_IF_ERROR(MaybePageLocked(ToMillis(clock_.Now())));

  lease_epoch_ = stored_epoch + 1;
  lease_counter_ = 0;
  rocksdb::WriteOptions sync;
  sync.sync = true;
  cleanup.Put(meta_cf_, kLeaseEpochKey, U64Bytes(lease_epoch_).slice());
  return FromRocks(db_->Write(sync, &cleanup), "writing the lease epoch");
}

absl::Status RocksDbJobStore::MigrateLayout() {
  // A data dir of an earlier version (or a new one): the `due` keys, the pending index and the
  // counters are built by one scan, once. Everything is rewritten, so a conversion interrupted
  // half-way is simply done again.
  rocksdb::ReadOptions scan;
  scan.fill_cache = false;
  rocksdb::WriteOptions sync;
  sync.sync = true;
  rocksdb::WriteBatch batch;
  int64_t jobs = 0;
  int64_t dead = 0;
  size_t pending = 0;
  absl::btree_map<int64_t, int64_t> due_counts;
  Job job;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(scan, jobs_cf_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().size() != 8 || HeaderSize(it->value()) == 0) {
        return Malformed(kJobsCf, it->key().size() == 8 ? DecodeU64(it->key().data()) : 0);
      }
      const uint64_t id = DecodeU64(it->key().data());
      uint64_t user_hash = 0;
      if (!UserHashOf(it->value(), &job, &user_hash)) return Malformed(kJobsCf, id);
      PutJobKeys(DueOf(it->value()), id, user_hash, batch);
      ++due_counts[SecondOf(DueOf(it->value()))];
      ++jobs;
      if (++pending >= kAdminChunk) {
        RETURN_IF_ERROR(FromRocks(db_->Write(sync, &batch), "converting the data dir"));
        batch.Clear();
        pending = 0;
      }
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "scanning jobs"));
  }
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(scan, dead_cf_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) ++dead;
    RETURN_IF_ERROR(FromRocks(it->status(), "scanning dead letters"));
  }
  batch.Put(meta_cf_, kJobCountKey, U64Bytes(static_cast<uint64_t>(jobs)).slice());
  batch.Put(meta_cf_, kDeadCountKey, U64Bytes(static_cast<uint64_t>(dead)).slice());
  // Earlier counts (an interrupted conversion) are replaced.
  batch.DeleteRange(meta_cf_, "h", "i");
  for (const auto& [second, count] : due_counts) {
    batch.Put(meta_cf_, DueCountKey(second), U64Bytes(static_cast<uint64_t>(count)).slice());
  }
  batch.Put(meta_cf_, kLayoutKey, U64Bytes(kLayoutVersion).slice());
  RETURN_IF_ERROR(FromRocks(db_->Write(sync, &batch), "converting the data dir"));
  if (jobs > 0 || dead > 0) {
    common::LogInfo("job store converted to the paged layout",
                    {{"jobs", jobs}, {"dead_letters", dead}});
  }
  return absl::OkStatus();
}

void RocksDbJobStore::PutJobKeys(int64_t due_ms, uint64_t id, uint64_t user_hash,
                                 rocksdb::WriteBatch& batch) {
  batch.Put(due_cf_, DueKeyBytes(due_ms, id).slice(), rocksdb::Slice());
  if (user_hash != 0) batch.Put(users_cf_, PendingKeyBytes(user_hash, id).slice(), rocksdb::Slice());
}

void RocksDbJobStore::DeleteJobKeys(int64_t due_ms, uint64_t id, uint64_t user_hash, bool fresh,
                                    rocksdb::WriteBatch& batch) {
  if (!fresh) batch.Delete(due_cf_, DueKeyBytes(due_ms, id).slice());
  if (user_hash != 0) batch.Delete(users_cf_, PendingKeyBytes(user_hash, id).slice());
}

void RocksDbJobStore::DueCountsInBatchLocked(const DueCountDeltas& deltas,
                                             rocksdb::WriteBatch& batch) {
  for (const auto& [second, delta] : deltas) {
    if (delta == 0) continue;
    auto [it, inserted] = disk_due_counts_.try_emplace(second, 0);
    it->second += delta;
    if (it->second == 0) {
      disk_due_counts_.erase(it);
      batch.Delete(meta_cf_, DueCountKey(second));
    } else {
      batch.Merge(meta_cf_, DueCountKey(second), U64Bytes(static_cast<uint64_t>(delta)).slice());
    }
  }
}

void RocksDbJobStore::RevertDueCountsLocked(const DueCountDeltas& deltas) {
  for (const auto& [second, delta] : deltas) {
    auto [it, inserted] = disk_due_counts_.try_emplace(second, 0);
    it->second -= delta;
    if (it->second == 0) disk_due_counts_.erase(it);
  }
}

void RocksDbJobStore::CountJobLocked(int64_t due_ms, int64_t delta) {
  live_jobs_ += delta;
  const int64_t second = SecondOf(due_ms);
  auto [it, inserted] = due_counts_.try_emplace(second, 0);
  it->second += delta;
  if (it->second == 0) due_counts_.erase(it);
  if (due_after_second_ != INT64_MIN && second > due_after_second_) due_after_ += delta;
}

int64_t RocksDbJobStore::DueAfterLocked(int64_t second) {
  if (due_after_second_ != INT64_MIN && second >= due_after_second_) {
    // Time moved on: the seconds it passed leave the sum.
    for (auto it = due_counts_.upper_bound(due_after_second_);
         it != due_counts_.end() && it->first <= second; ++it) {
      due_after_ -= it->second;
    }
  } else {
    due_after_ = 0;
    for (auto it = due_counts_.upper_bound(second); it != due_counts_.end(); ++it) {
      due_after_ += it->second;
    }
  }
  due_after_second_ = second;
  return due_after_;
}

void RocksDbJobStore::CountInBatch(int64_t jobs, int64_t dead, rocksdb::WriteBatch& batch) {
  if (jobs != 0) batch.Merge(meta_cf_, kJobCountKey, U64Bytes(static_cast<uint64_t>(jobs)).slice());
  if (dead != 0) batch.Merge(meta_cf_, kDeadCountKey, U64Bytes(static_cast<uint64_t>(dead)).slice());
}

// One group commit. Built by the preparer, then owned by the writer until written, then recycled
// by the preparer (its vectors and WriteBatch keep their capacity).
struct RocksDbJobStore::Group {
  std::vector<WriteOp> ops;
  // Parallel to ops; only the kAppend entries are used.
  std::vector<AppendResult> results;
  std::vector<uint64_t> new_ids;
  // SeenHash of the sources-seen keys this group writes (cached once written).
  std::vector<uint64_t> seen_hashes;
  // What the group adds to the persisted due-time counts (reverted if the write fails).
  RocksDbJobStore::DueCountDeltas due_deltas;
  // The dedup keys this group writes, sorted; views into `ops`.
  std::vector<std::string_view> stored_keys;
  rocksdb::WriteBatch batch;
  int64_t now_ms = 0;
  // Appends need the fsync; settlements alone do not.
  bool sync = false;
  // The group's appended jobs are fresh records (no `due` keys).
  bool fresh = false;
  // The lowest id of a settlement (kPutJob, kDeleteJob, kBury) in the group: its record may
  // still be fresh on disk until the group is written (set by the preparer, read by the next).
  uint64_t min_settled_id = UINT64_MAX;
  // Some item was dropped as a duplicate of a key in the group written just before this one; if
  // that write fails, this group must fail too.
  bool depends_on_previous = false;
  size_t duplicates = 0;
  size_t settlements = 0;
  absl::Status status;

  void Clear() {
    ops.clear();
    results.clear();
    new_ids.clear();
    seen_hashes.clear();
    due_deltas.clear();
    stored_keys.clear();
    batch.Clear();
    sync = false;
    fresh = false;
    min_settled_id = UINT64_MAX;
    depends_on_previous = false;
    duplicates = 0;
    settlements = 0;
    status = absl::OkStatus();
  }
};

void RocksDbJobStore::Enqueue(WriteOp op) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back(std::move(op));
}

void RocksDbJobStore::Append(std::vector<AppendItem> items, AppendCallback done) {
  WriteOp op;
  op.kind = WriteOp::Kind::kAppend;
  op.items = std::move(items);
  op.done = std::move(done);
  Enqueue(std::move(op));
}

void RocksDbJobStore::Flush() {
  absl::Notification done;
  WriteOp op;
  op.kind = WriteOp::Kind::kBarrier;
  op.notify = &done;
  Enqueue(std::move(op));
  done.WaitForNotification();
}

std::shared_ptr<absl::Notification> RocksDbJobStore::PauseWrites() {
  absl::Notification paused;
  auto resume = std::make_shared<absl::Notification>();
  WriteOp op;
  op.kind = WriteOp::Kind::kPause;
  op.notify = &paused;
  op.resume = resume;
  Enqueue(std::move(op));
  paused.WaitForNotification();
  return resume;
}

void RocksDbJobStore::PrepareLoop() {
  pthread_setname_np(pthread_self(), "jobstore-prep");  // For top -H, perf and debuggers.
  using Kind = WriteOp::Kind;
  std::unique_ptr<Group> spare;
  const Group* last = nullptr;  // The group handed to the writer most recently.
  for (;;) {
    // At most one group may be unwritten while the next is prepared: its dedup keys are the only
    // ones not yet visible to MultiGet. Written groups come back here for reuse; none of them is
    // read again once `inflight` is chosen.
    const Group* inflight = nullptr;
    std::vector<std::unique_ptr<Group>> written;
    {
      absl::MutexLock lock(&pipe_mu_);
      auto can_prepare = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_) {
        return unwritten_ <= 1;
      };
      pipe_mu_.Await(absl::Condition(&can_prepare));
      if (unwritten_ == 1) inflight = last;
      written.swap(written_);
    }
    for (std::unique_ptr<Group>& group : written) {
      if (spare == nullptr) spare = std::move(group);
    }
    written.clear();  // Frees the rest, and the ops (with their jobs) of all of them.
    std::unique_ptr<Group> group = spare != nullptr ? std::move(spare) : std::make_unique<Group>();
    group->Clear();

    WriteOp pause;
    {
      absl::MutexLock lock(&queue_mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
        return !queue_.empty() || stopping_;
      };
      queue_mu_.Await(absl::Condition(&has_work));
      if (queue_.empty()) break;  // Stopping, and everything is handed to the writer.
      size_t jobs = 0;
      while (!queue_.empty()) {
        WriteOp& op = queue_.front();
        if (op.kind == Kind::kPause || op.kind == Kind::kExclusive) {
          // A pause or a deletion ends the group; it is taken alone, once the ops before it are
          // written.
          if (group->ops.empty()) {
            pause = std::move(op);
            queue_.pop_front();
          }
          break;
        }
        size_t n = 1;
        if (op.kind == Kind::kAppend) {
          n = 0;
          for (const AppendItem& item : op.items) n += item.jobs.size();
        }
        if (!group->ops.empty() && jobs + n > options_.max_commit_batch) break;
        jobs += n;
        group->ops.push_back(std::move(op));
        queue_.pop_front();
      }
    }
    if (pause.kind == Kind::kPause || pause.kind == Kind::kExclusive) {
      {
        absl::MutexLock lock(&pipe_mu_);
        auto all_written = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_) {
          return unwritten_ == 0;
        };
        pipe_mu_.Await(absl::Condition(&all_written));
      }
      if (pause.kind == Kind::kExclusive) {
        pause.run();
        pause.notify->Notify();
      } else {
        pause.notify->Notify();
        pause.resume->WaitForNotification();
      }
      spare = std::move(group);
      continue;
    }

    PrepareGroup(*group, inflight);
    last = group.get();
    absl::MutexLock lock(&pipe_mu_);
    ++unwritten_;
    to_write_.push_back(std::move(group));
  }
  absl::MutexLock lock(&pipe_mu_);
  preparer_done_ = true;
}

void RocksDbJobStore::PrepareGroup(Group& group, const Group* inflight) {
  using Kind = WriteOp::Kind;
  std::vector<WriteOp>& ops = group.ops;
  group.now_ms = ToMillis(clock_.Now());
  const int64_t now_ms = group.now_ms;
  const int64_t window_ms = absl::ToInt64Milliseconds(options_.dedup_window);
  group.results.resize(ops.size());

  // 1. Dedup: one MultiGet for the group's distinct keys. The keys are sorted once: equal keys
  // become neighbours (the first in queue order wins), MultiGet skips its own sort, the check
  // against the unwritten group is a merge, and the dedup Puts below reach the memtable's skip
  // list in order, each one starting its search where the previous one ended.
  struct KeyRef {
    std::string_view key;
    uint32_t op;
    uint32_t item;
  };
  std::vector<KeyRef> refs;
  for (size_t o = 0; o < ops.size(); ++o) {
    if (ops[o].kind != Kind::kAppend) continue;
    group.results[o].stored.assign(ops[o].items.size(), true);
    for (size_t i = 0; i < ops[o].items.size(); ++i) {
      const std::string& key = ops[o].items[i].dedup_key;
      if (!key.empty()) refs.push_back({key, static_cast<uint32_t>(o), static_cast<uint32_t>(i)});
    }
  }
  std::sort(refs.begin(), refs.end(), [](const KeyRef& a, const KeyRef& b) {
    if (int c = a.key.compare(b.key); c != 0) return c < 0;
    return a.op != b.op ? a.op < b.op : a.item < b.item;
  });
  std::vector<rocksdb::Slice> keys;  // Distinct, sorted.
  std::vector<const KeyRef*> key_owner;
  keys.reserve(refs.size());
  key_owner.reserve(refs.size());
  for (const KeyRef& ref : refs) {
    if (!keys.empty() && key_owner.back()->key == ref.key) {
      group.results[ref.op].stored[ref.item] = false;  // Earlier in this group.
      ++group.duplicates;
      continue;
    }
    keys.emplace_back(ref.key.data(), ref.key.size());
    key_owner.push_back(&ref);
  }
  if (!keys.empty()) {
    std::vector<rocksdb::PinnableSlice> values(keys.size());
    std::vector<rocksdb::Status> statuses(keys.size());
    db_->MultiGet(rocksdb::ReadOptions(), dedup_cf_, keys.size(), keys.data(), values.data(),
                  statuses.data(), /*sorted_input=*/true);
    size_t next_inflight = 0;
    for (size_t k = 0; k < keys.size(); ++k) {
      bool duplicate = false;
      if (statuses[k].ok()) {
        duplicate = values[k].size() == 8 &&
                    static_cast<int64_t>(DecodeU64(values[k].data())) > now_ms - window_ms;
      } else if (!statuses[k].IsNotFound()) {
        group.status = FromRocks(statuses[k], "reading dedup keys");
        return;
      }
      if (!duplicate && inflight != nullptr) {
        const std::vector<std::string_view>& written = inflight->stored_keys;
        const std::string_view key = key_owner[k]->key;
        while (next_inflight < written.size() && written[next_inflight] < key) ++next_inflight;
        if (next_inflight < written.size() && written[next_inflight] == key) {
          duplicate = true;
          group.depends_on_previous = true;
        }
      }
      if (duplicate) {
        group.results[key_owner[k]->op].stored[key_owner[k]->item] = false;
        ++group.duplicates;
      } else {
        group.stored_keys.push_back(key_owner[k]->key);
      }
    }
  }

  // 2. The batch: dedup keys and appended jobs, then settlements in the order they happened.
  const U64Bytes now_value(static_cast<uint64_t>(now_ms));
  for (std::string_view key : group.stored_keys) {
    group.batch.Put(dedup_cf_, rocksdb::Slice(key.data(), key.size()), now_value.slice());
  }
  std::vector<std::pair<std::string, const std::string*>> profile_merges;
  // Appended jobs are fresh unless the clock went back below the newest fresh record's due time
  // (then they get `due` keys like retries, so that fresh records stay in due order by id).
  group.fresh = now_ms >= fresh_due_ms_;
  for (size_t o = 0; o < ops.size(); ++o) {
    if (ops[o].kind != Kind::kAppend) continue;
    for (size_t i = 0; i < ops[o].items.size(); ++i) {
      if (!group.results[o].stored[i]) continue;
      AppendItem& item = ops[o].items[i];
      uint64_t user_hash = 0;
      if (!item.user_id.empty()) {
        user_hash = UserHash(item.user_id);
        if (!item.profile_delta.empty()) {
          profile_merges.emplace_back(ProfileKey(item.user_id, item.source_id),
                                      &item.profile_delta);
          if (item.log_profile_change && logged_users_.insert(user_hash).second) {
            group.batch.Put(audiences_cf_, LogKey(next_log_seq_++), item.user_id);
          }
        }
        const uint64_t seen = SeenHash(item.user_id, item.source_id);
        if (seen_cache_[seen & (kSeenCacheSlots - 1)].load(std::memory_order_relaxed) != seen) {
          SeenKey(item.user_id, item.source_id, &key_scratch_);
          group.batch.Put(users_cf_, key_scratch_, rocksdb::Slice());
          group.seen_hashes.push_back(seen);
        }
      }
      for (Job& job : item.jobs) {
        const uint64_t id = next_id_++;
        job.set_id(id);
        job.set_due_unix_ms(now_ms);
        EncodeJobValue(job, &scratch_, group.fresh);
        group.batch.Put(jobs_cf_, U64Bytes(id).slice(), scratch_);
        const uint64_t job_user =
            job.user_id() == item.user_id ? user_hash : UserHash(job.user_id());
        if (group.fresh) {
          // No `due` key: the pager finds a fresh record by its id.
          if (job_user != 0) {
            group.batch.Put(users_cf_, PendingKeyBytes(job_user, id).slice(), rocksdb::Slice());
          }
        } else {
          PutJobKeys(now_ms, id, job_user, group.batch);
        }
        group.new_ids.push_back(id);
      }
    }
  }
  // Profile merges in key order: each insert into the memtable's skip list starts where the
  // previous one ended (random order costs a search from the top per key).
  std::sort(profile_merges.begin(), profile_merges.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [key, delta] : profile_merges) group.batch.Merge(profiles_cf_, key, *delta);
  // The id high-water mark, so ids stay unique across restarts even when the newest jobs were
  // completed (and deleted) before it.
  if (!group.new_ids.empty()) {
    group.batch.Put(meta_cf_, kNextIdKey, U64Bytes(next_id_).slice());
    if (group.fresh && now_ms != fresh_due_ms_) {
      fresh_due_ms_ = now_ms;
      group.batch.Put(meta_cf_, kFreshDueKey, U64Bytes(static_cast<uint64_t>(now_ms)).slice());
    }
  }
  group.sync = group.batch.Count() > 0;  // Appends (and dedup keys) need the fsync.
  int64_t jobs_delta = static_cast<int64_t>(group.new_ids.size());
  int64_t dead_delta = 0;
  DueCountDeltas& due_deltas = group.due_deltas;
  if (!group.new_ids.empty()) due_deltas[SecondOf(now_ms)] += jobs_delta;

  absl::MutexLock lock(&mu_);
  for (WriteOp& op : ops) {
    if (op.kind == Kind::kPutJob || op.kind == Kind::kDeleteJob || op.kind == Kind::kBury) {
      group.min_settled_id = std::min(group.min_settled_id, op.id);
    }
    switch (op.kind) {
      case Kind::kPutJob: {
        // The key the job was leased under goes in any case (a superseded rewrite's successor
        // deletes only its own old key). The record and its new key are skipped when a later
        // settlement or a deletion has superseded this one.
        if (!op.fresh) group.batch.Delete(due_cf_, DueKeyBytes(op.due_ms, op.id).slice());
        auto it = overlay_.find(op.id);
        if (it != overlay_.end() && it->second.seq == op.seq) {
          const int64_t new_due = DueOf(it->second.value);
          group.batch.Put(jobs_cf_, U64Bytes(op.id).slice(), it->second.value);
          group.batch.Put(due_cf_, DueKeyBytes(new_due, op.id).slice(), rocksdb::Slice());
          // The record on disk moves from its due time to the new one.
          op.disk_due_ms = it->second.disk_due_ms;
          --due_deltas[SecondOf(op.disk_due_ms)];
          ++due_deltas[SecondOf(new_due)];
          it->second.disk_due_ms = new_due;
        } else {
          op.seq = 0;
        }
        ++group.settlements;
        break;
      }
      case Kind::kDeleteJob:
        group.batch.Delete(jobs_cf_, U64Bytes(op.id).slice());
        DeleteJobKeys(op.due_ms, op.id, op.user_hash, op.fresh, group.batch);
        if (!op.purged) {
          --jobs_delta;
          --due_deltas[SecondOf(op.disk_due_ms)];
        }
        ++group.settlements;
        break;
      case Kind::kBury:
        // A job purged while it was being buried leaves no dead letter.
        if (op.purged) {
          --dead_count_;
        } else {
          group.batch.Put(dead_cf_, U64Bytes(op.id).slice(), op.value);
          if (!op.index_key.empty()) group.batch.Put(users_cf_, op.index_key, rocksdb::Slice());
          --jobs_delta;
          ++dead_delta;
          --due_deltas[SecondOf(op.disk_due_ms)];
        }
        group.batch.Delete(jobs_cf_, U64Bytes(op.id).slice());
        DeleteJobKeys(op.due_ms, op.id, op.user_hash, op.fresh, group.batch);
        ++group.settlements;
        break;
      case Kind::kAppend:
      case Kind::kBarrier:
      case Kind::kPause:
      case Kind::kExclusive:
        break;
    }
  }
  CountInBatch(jobs_delta, dead_delta, group.batch);
  DueCountsInBatchLocked(due_deltas, group.batch);
  MaybePutFreshFloorLocked(group, inflight);
}

void RocksDbJobStore::MaybePutFreshFloorLocked(Group& group, const Group* inflight) {
  // Written in this group's batch, the floor must be below every fresh record still on disk once
  // the batch is: those of jobs queued (window, or beyond the cursor), leased, settling, with a
  // retry not yet written, or with a settlement not yet written: in the group being written
  // (which could fail and be queued again) or queued for a later group. Settlements in this
  // group are written with the floor.
  if (group.now_ms < next_floor_ms_ || !writable_.load(std::memory_order_relaxed)) return;
  next_floor_ms_ = group.now_ms + 1000;
  uint64_t floor = std::min(published_id_ + 1, fresh_cursor_id_);
  if (inflight != nullptr) floor = std::min(floor, inflight->min_settled_id);
  {
    absl::MutexLock lock(&queue_mu_);
    for (const WriteOp& op : queue_) {
      if (op.kind == WriteOp::Kind::kPutJob || op.kind == WriteOp::Kind::kDeleteJob ||
          op.kind == WriteOp::Kind::kBury) {
        floor = std::min(floor, op.id);
      }
    }
  }
  for (const std::vector<QueuedJob>* heap : {&ready_, &scheduled_}) {
    for (const QueuedJob& job : *heap) {
      if (job.fresh) floor = std::min(floor, job.id);
    }
  }
  for (const auto& [id, info] : leased_) {
    if (info.fresh) floor = std::min(floor, id);
  }
  for (uint64_t id : settling_) floor = std::min(floor, id);
  for (const auto& [id, record] : overlay_) floor = std::min(floor, id);
  if (floor <= fresh_floor_) return;
  // If this write fails, the floor on disk stays lower: only more records are stepped over.
  fresh_floor_ = floor;
  group.batch.Put(meta_cf_, kFreshFloorKey, U64Bytes(floor).slice());
}

void RocksDbJobStore::WriteLoop() {
  pthread_setname_np(pthread_self(), "jobstore-write");
  absl::Status previous;
  for (;;) {
    std::unique_ptr<Group> group;
    {
      absl::MutexLock lock(&pipe_mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_) {
        return !to_write_.empty() || preparer_done_;
      };
      pipe_mu_.Await(absl::Condition(&has_work));
      if (to_write_.empty()) return;
      group = std::move(to_write_.front());
      to_write_.pop_front();
    }
    if (group->status.ok() && group->depends_on_previous && !previous.ok()) {
      group->status = Unshared(previous);
    }
    WriteGroup(*group);
    previous = Unshared(group->status);
    absl::MutexLock lock(&pipe_mu_);
    --unwritten_;
    written_.push_back(std::move(group));
  }
}

void RocksDbJobStore::WriteGroup(Group& group) {
  using Kind = WriteOp::Kind;
  if (group.status.ok() && group.batch.Count() > 0) {
    rocksdb::WriteOptions write_options;
    // Only appends need the fsync; a group of settlements alone skips it (losing one means a
    // redelivery, which at-least-once allows).
    write_options.sync = group.sync;
    // Real elapsed time for the metric; the injected clock is for the store's semantics.
    const auto start = std::chrono::steady_clock::now();
    rocksdb::Status s = db_->Write(write_options, &group.batch);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    group.status = s.ok() ? absl::OkStatus() : WriteFailed(s, "group commit");
    if (s.ok() && metrics_.commit_duration != nullptr) {
      metrics_.commit_duration->Observe(elapsed.count());
      metrics_.commit_batch_items->Observe(
          static_cast<double>(group.new_ids.size() + group.settlements));
    }
  }

  // Publish. On failure the disk is unchanged: appends report the error; settled jobs keep their
  // in-memory state (and overlay records), so this process still treats them right.
  if (group.status.ok()) {
    for (uint64_t seen : group.seen_hashes) {
      seen_cache_[seen & (kSeenCacheSlots - 1)].store(seen, std::memory_order_relaxed);
    }
    absl::MutexLock lock(&mu_);
    for (uint64_t id : group.new_ids) {
      QueueLocked(group.now_ms, id, group.now_ms, /*dirty=*/false, group.fresh);
    }
    if (!group.new_ids.empty()) {
      published_id_ = std::max(published_id_, group.new_ids.back());
      CountJobLocked(group.now_ms, static_cast<int64_t>(group.new_ids.size()));
    }
    for (const WriteOp& op : group.ops) {
      if (op.kind != Kind::kPutJob || op.seq == 0) continue;
      auto it = overlay_.find(op.id);
      if (it != overlay_.end() && it->second.seq == op.seq) {
        // Its `due` key is written: a parked entry is found by the pager from now on.
        if (!parked_.empty()) parked_.erase(QueuedJob{DueOf(it->second.value), op.id});
        overlay_.erase(it);
      }
    }
  }
  if (group.status.ok() && group.duplicates > 0 && metrics_.duplicates != nullptr) {
    metrics_.duplicates->Increment(static_cast<double>(group.duplicates));
  }

  // Settlements of a failed group are written again (their in-memory effect already happened;
  // only the disk is behind): once the store has recovered, or with the next group when the
  // failure was not the disk's.
  if (!group.status.ok()) {
    absl::MutexLock lock(&mu_);
    RevertDueCountsLocked(group.due_deltas);
    for (const WriteOp& op : group.ops) {
      if (op.kind != Kind::kPutJob || op.seq == 0) continue;
      auto it = overlay_.find(op.id);
      if (it != overlay_.end() && it->second.seq == op.seq) it->second.disk_due_ms = op.disk_due_ms;
    }
  }
  if (!group.status.ok()) {
    std::vector<WriteOp> again;
    for (WriteOp& op : group.ops) {
      const bool settlement = (op.kind == Kind::kPutJob && op.seq != 0) ||
                              op.kind == Kind::kDeleteJob || op.kind == Kind::kBury;
      if (settlement) again.push_back(std::move(op));
    }
    if (!again.empty()) {
      absl::MutexLock lock(&health_mu_);
      if (!error_kind_.empty()) {
        for (WriteOp& op : again) deferred_.push_back(std::move(op));
      } else {
        absl::MutexLock queue_lock(&queue_mu_);
        for (auto it = again.rbegin(); it != again.rend(); ++it) queue_.push_front(std::move(*it));
      }
    }
  }

  // Callbacks, outside every lock.
  for (size_t o = 0; o < group.ops.size(); ++o) {
    WriteOp& op = group.ops[o];
    if (op.kind == Kind::kAppend) {
      if (group.status.ok()) {
        std::move(op.done)(std::move(group.results[o]));
      } else {
        std::move(op.done)(Unshared(group.status));
      }
    } else if (op.kind == Kind::kBarrier) {
      op.notify->Notify();
    }
  }
}

void RocksDbJobStore::PushQueuedLocked(const QueuedJob& job, int64_t now_ms) {
  std::vector<QueuedJob>& heap = job.due_ms <= now_ms ? ready_ : scheduled_;
  heap.push_back(job);
  std::push_heap(heap.begin(), heap.end(), LaterFirst());
}

void RocksDbJobStore::QueueLocked(int64_t due_ms, uint64_t id, int64_t now_ms, bool dirty,
                                  bool fresh) {
  const QueuedJob job{due_ms, id, fresh};
  if (job < cursor_) {
    // A fresh record below the cursor is in memory: the pager's place in the ids moves past it
    // (publications come in id order, and no fresh record between is on disk only: its key
    // would be below this one's, hence below the cursor).
    if (fresh) fresh_cursor_id_ = std::max(fresh_cursor_id_, id + 1);
    PushQueuedLocked(job, now_ms);
    if (WindowSizeLocked() > std::max<size_t>(options_.window_size, 2)) ShrinkWindowLocked();
  } else if (dirty) {
    parked_.insert(job);
  }
  // Else its `due` key is written and at or above the cursor: the pager reads it in its turn.
}

void RocksDbJobStore::ShrinkWindowLocked() {
  const size_t window = std::max<size_t>(options_.window_size, 2);
  std::vector<QueuedJob> all;
  all.reserve(WindowSizeLocked());
  all.insert(all.end(), ready_.begin(), ready_.end());
  all.insert(all.end(), scheduled_.begin(), scheduled_.end());
  const size_t keep = window / 2;
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end());
  // Keys below the lease floor stay: the cursor never goes below it.
  QueuedJob cut = std::max(all[keep], lease_floor_);
  cut.fresh = false;
  if (!(cut < cursor_)) return;
  // The lowest fresh record evicted is where the pager reads fresh records again.
  uint64_t fresh_from = fresh_cursor_id_;
  auto evict = [&](std::vector<QueuedJob>& heap) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    heap.erase(std::remove_if(heap.begin(), heap.end(),
                              [&](const QueuedJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                if (job < cut) return false;
                                if (job.fresh) fresh_from = std::min(fresh_from, job.id);
                                // A retry not yet written has no `due` key to page it back in.
                                if (overlay_.contains(job.id)) parked_.insert(job);
                                return true;
                              }),
               heap.end());
    std::make_heap(heap.begin(), heap.end(), LaterFirst());
  };
  evict(ready_);
  evict(scheduled_);
  cursor_ = cut;
  fresh_cursor_id_ = fresh_from;
}

absl::Status RocksDbJobStore::MaybePageLocked(int64_t now_ms) {
  constexpr QueuedJob kEnd{INT64_MAX, UINT64_MAX};
  if (!(cursor_ < kEnd)) return absl::OkStatus();
  const size_t window = std::max<size_t>(options_.window_size, 2);
  if (WindowSizeLocked() + page_chunk_ > window) return absl::OkStatus();
  // Two ordered streams are merged: the `due` keys (retried, replayed and other keyed jobs) from
  // the cursor, and the fresh records (in (due, id) order by id) from fresh_cursor_id_.
  // Under mu_: every write published before this point is in the iterators' snapshot, and every
  // one published after it is queued by its publication (appends, replays) or waits in parked_
  // (retries) until its key is written.
  std::vector<QueuedJob> got;
  got.reserve(page_chunk_);
  QueuedJob next_due = kEnd;
  rocksdb::ReadOptions read;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, due_cf_));
    size_t n = 0;
    for (it->Seek(DueKeyBytes(cursor_.due_ms, cursor_.id).slice()); it->Valid(); it->Next()) {
      if (it->key().size() != 16) return Malformed(kDueCf, 0);
      const QueuedJob job{static_cast<int64_t>(DecodeU64(it->key().data())),
                          DecodeU64(it->key().data() + 8)};
      if (n == page_chunk_) {
        next_due = job;
        break;
      }
      ++n;
      if (job.id > published_id_ || (!unpublished_.empty() && unpublished_.contains(job.id))) {
        continue;  // Queued by its publication.
      }
      got.push_back(job);
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "paging in due jobs"));
  }
  // Fresh records below next_due, at most a chunk. Records rewritten by a retry (no longer
  // fresh) are stepped over; unpublished ones end the stream (their publication queues them).
  QueuedJob next_fresh = kEnd;
  uint64_t fresh_end = fresh_cursor_id_;  // Where the fresh stream stopped.
  const size_t keyed = got.size();
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, jobs_cf_));
    size_t n = 0;
    for (it->Seek(U64Bytes(fresh_cursor_id_).slice()); it->Valid(); it->Next()) {
      if (it->key().size() != 8) return Malformed(kJobsCf, 0);
      const uint64_t id = DecodeU64(it->key().data());
      fresh_end = id;
      if (id > published_id_) break;
      fresh_end = id + 1;
      if (!IsFresh(it->value())) continue;
      const QueuedJob job{DueOf(it->value()), id, true};
      if (n == page_chunk_ || !(job < next_due)) {
        next_fresh = job;
        fresh_end = id;
        break;
      }
      ++n;
      got.push_back(job);
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "paging in fresh jobs"));
  }
  // Merge; what is beyond a chunk stays on disk, and the cursor moves to the first key not taken.
  std::inplace_merge(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(keyed), got.end());
  QueuedJob next = std::min(next_due, next_fresh);
  if (got.size() > page_chunk_) {
    next = std::min(next, got[page_chunk_]);
    for (size_t i = page_chunk_; i < got.size(); ++i) {
      if (got[i].fresh) {
        fresh_end = got[i].id;  // The lowest fresh record left on disk.
        break;
      }
    }
    got.resize(page_chunk_);
  }
  while (!parked_.empty() && *parked_.begin() < next) {
    got.push_back(*parked_.begin());
    parked_.erase(parked_.begin());
  }
  std::sort(got.begin(), got.end());
  got.erase(std::unique(got.begin(), got.end(),
                        [](const QueuedJob& a, const QueuedJob& b) {
                          return a.due_ms == b.due_ms && a.id == b.id;
                        }),
            got.end());
  cursor_ = next;
  fresh_cursor_id_ = fresh_end;
  for (const QueuedJob& job : got) PushQueuedLocked(job, now_ms);
  return absl::OkStatus();
}

void RocksDbJobStore::EraseFromWindowLocked(const absl::flat_hash_set<uint64_t>& ids) {
  if (ids.empty()) return;
  for (std::vector<QueuedJob>* heap : {&ready_, &scheduled_}) {
    heap->erase(std::remove_if(heap->begin(), heap->end(),
                               [&](const QueuedJob& job) { return ids.contains(job.id); }),
                heap->end());
    std::make_heap(heap->begin(), heap->end(), LaterFirst());
  }
}

void RocksDbJobStore::PromoteDueLocked(int64_t now_ms) {
  while (!scheduled_.empty() && scheduled_.front().due_ms <= now_ms) {
    std::pop_heap(scheduled_.begin(), scheduled_.end(), LaterFirst());
    const QueuedJob job = scheduled_.back();
    scheduled_.pop_back();
    ready_.push_back(job);
    std::push_heap(ready_.begin(), ready_.end(), LaterFirst());
  }
}

void RocksDbJobStore::ExpireLeasesLocked(absl::Time now) {
  while (!lease_deadlines_.empty() && lease_deadlines_.begin()->first <= now) {
    const uint64_t id = lease_deadlines_.begin()->second;
    lease_deadlines_.erase(lease_deadlines_.begin());
    auto it = leased_.find(id);
    HOOKRELAY_CHECK(it != leased_.end(), "a lease deadline without its lease");
    const int64_t due_ms = it->second.due_ms;
    const bool fresh = it->second.fresh;
    leased_.erase(it);
    // A job purged while leased has no record left: it ends here.
    if (!purged_leased_.empty() && purged_leased_.erase(id) > 0) {
      CountJobLocked(due_ms, -1);
      continue;
    }
    // A leased job was due when leased, so it goes back to ready at its old place in line (below
    // the lease floor, hence below the cursor).
    ready_.push_back({due_ms, id, fresh});
    std::push_heap(ready_.begin(), ready_.end(), LaterFirst());
  }
}

uint64_t RocksDbJobStore::NextLeaseLocked() {
  if (++lease_counter_ >= kLeaseCounterLimit) {
    ++lease_epoch_;
    lease_counter_ = 1;
    rocksdb::WriteOptions sync;
    sync.sync = true;
    // Best effort: if this write is lost, leases of this epoch could repeat after a restart.
    db_->Put(sync, meta_cf_, kLeaseEpochKey, U64Bytes(lease_epoch_).slice())
        .PermitUncheckedError();
  }
  return (lease_epoch_ << kLeaseEpochShift) | lease_counter_;
}

absl::StatusOr<std::vector<LeasedJob>> RocksDbJobStore::Lease(size_t max,
                                                              absl::Duration duration) {
  if (duration <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job store: lease duration must be positive, got ",
                     absl::FormatDuration(duration)));
  }
  std::vector<LeasedJob> out;
  if (max == 0) return out;
  const absl::Time now = clock_.Now();
  const absl::Time deadline = now + duration;

  struct Pick {
    QueuedJob job;
    uint64_t lease;
    std::string overlay;  // The pending record, if any.
    bool from_overlay;
  };
  std::vector<Pick> picks;
  {
    absl::MutexLock lock(&mu_);
    const int64_t now_ms = ToMillis(now);
    ExpireLeasesLocked(now);
    PromoteDueLocked(now_ms);
    absl::Status paged = MaybePageLocked(now_ms);
    picks.reserve(std::min(max, ready_.size()));
    while (picks.size() < max && paged.ok()) {
      if (ready_.empty()) {
        // The window ran dry: page in more while the next keys on disk may be due.
        const QueuedJob before = cursor_;
        if (now_ms < cursor_.due_ms) break;
        paged = MaybePageLocked(now_ms);
        if (ready_.empty() && !(before < cursor_)) break;
        continue;
      }
      std::pop_heap(ready_.begin(), ready_.end(), LaterFirst());
      const QueuedJob job = ready_.back();
      ready_.pop_back();
      const uint64_t lease = NextLeaseLocked();
      leased_[job.id] = {lease, deadline, job.due_ms, 0, job.fresh};
      lease_deadlines_.emplace(deadline, job.id);
      lease_floor_ = std::max(lease_floor_, QueuedJob{job.due_ms, job.id + 1});
      Pick& pick = picks.emplace_back(Pick{job, lease, {}, false});
      if (auto it = overlay_.find(job.id); it != overlay_.end()) {
        pick.overlay = it->second.value;
        pick.from_overlay = true;
      }
    }
    if (picks.empty() && !paged.ok()) return paged;
  }
  if (picks.empty()) return out;

  // Read the records outside the lock.
  std::vector<rocksdb::Slice> keys;
  std::vector<U64Bytes> key_bytes;
  key_bytes.reserve(picks.size());
  for (const Pick& pick : picks) {
    if (!pick.from_overlay) keys.push_back(key_bytes.emplace_back(pick.job.id).slice());
  }
  std::vector<rocksdb::PinnableSlice> values(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  if (!keys.empty()) {
    db_->MultiGet(rocksdb::ReadOptions(), jobs_cf_, keys.size(), keys.data(), values.data(),
                  statuses.data());
  }
  absl::Status read_error;
  for (const rocksdb::Status& s : statuses) {
    if (!s.ok() && !s.IsNotFound()) {
      read_error = FromRocks(s, "reading leased jobs");
      break;
    }
  }

  std::vector<const Pick*> dropped;
  std::vector<const Pick*> malformed;
  std::vector<uint64_t> user_hashes;
  out.reserve(picks.size());
  user_hashes.reserve(picks.size());
  size_t k = 0;
  for (const Pick& pick : picks) {
    rocksdb::Slice value;
    bool found = true;
    if (pick.from_overlay) {
      value = pick.overlay;
    } else {
      found = statuses[k].ok();
      value = values[k];
      ++k;
    }
    if (!read_error.ok()) continue;
    LeasedJob& leased = out.emplace_back();
    // Not found: purged after it was picked. A record due at another time: the key was left
    // behind by a settlement whose write was lost (the job has its own key). Both are dropped.
    // Unparsable: cannot be delivered; it is dropped from memory (it stays on disk).
    if (!found || (!pick.from_overlay && DueOf(value) != pick.job.due_ms)) {
      out.pop_back();
      dropped.push_back(&pick);
      continue;
    }
    if (!ParseJobValue(value, &leased.job)) {
      out.pop_back();
      malformed.push_back(&pick);
      continue;
    }
    leased.lease = pick.lease;
    leased.deadline = deadline;
    user_hashes.push_back(HeaderSize(value) == kUserHeaderSize ? DecodeU64(value.data() + 8)
                                                                : UserHash(leased.job.user_id()));
  }
  absl::MutexLock lock(&mu_);
  auto release = [&](const Pick& pick, bool back_to_ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = leased_.find(pick.job.id);
    if (it == leased_.end() || it->second.lease != pick.lease) return false;
    lease_deadlines_.erase({it->second.deadline, pick.job.id});
    leased_.erase(it);
    if (back_to_ready) {
      ready_.push_back(pick.job);
      std::push_heap(ready_.begin(), ready_.end(), LaterFirst());
    }
    return true;
  };
  if (!read_error.ok()) {
    for (const Pick& pick : picks) release(pick, /*back_to_ready=*/true);
    return read_error;
  }
  for (const Pick* pick : dropped) {
    // Gone (its deletion counts it unless it was leased then) or an orphaned key (no job).
    if (release(*pick, /*back_to_ready=*/false) && purged_leased_.erase(pick->job.id) > 0) {
      CountJobLocked(pick->job.due_ms, -1);
    }
  }
  for (const Pick* pick : malformed) {
    if (release(*pick, /*back_to_ready=*/false)) {
      purged_leased_.erase(pick->job.id);
      CountJobLocked(pick->job.due_ms, -1);
    }
  }
  // The user hash, for the pending-index key that the job's settlement deletes.
  for (size_t j = 0; j < out.size(); ++j) {
    auto it = leased_.find(out[j].job.id());
    if (it != leased_.end() && it->second.lease == out[j].lease) {
      it->second.user_hash = user_hashes[j];
    }
  }
  return out;
}

RocksDbJobStore::LeaseCheck RocksDbJobStore::EndLeaseLocked(uint64_t job_id, uint64_t lease,
                                                            LeaseInfo* info) {
  auto it = leased_.find(job_id);
  if (it == leased_.end()) return LeaseCheck::kNotLeased;
  if (it->second.lease != lease) return LeaseCheck::kOtherLease;
  *info = it->second;
  lease_deadlines_.erase({it->second.deadline, job_id});
  leased_.erase(it);
  return LeaseCheck::kOk;
}

absl::Status RocksDbJobStore::RefusedLease(uint64_t job_id, uint64_t lease, LeaseCheck check) {
  const std::string stale = absl::StrFormat(
      "job %d: lease %d is not the job's current lease (it expired)", job_id, lease);
  if (check == LeaseCheck::kOtherLease) return absl::FailedPreconditionError(stale);
  {
    absl::MutexLock lock(&mu_);
    if (overlay_.contains(job_id) || settling_.contains(job_id)) {
      return absl::FailedPreconditionError(stale);
    }
  }
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), jobs_cf_, U64Bytes(job_id).slice(), &value);
  if (s.ok()) return absl::FailedPreconditionError(stale);
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrFormat("job %d not found", job_id));
  return FromRocks(s, "reading a job");
}

absl::Status RocksDbJobStore::Complete(uint64_t job_id, uint64_t lease) {
  LeaseCheck check;
  LeaseInfo info;
  {
    absl::MutexLock lock(&mu_);
    check = EndLeaseLocked(job_id, lease, &info);
    if (check == LeaseCheck::kOk) {
      WriteOp op;
      op.kind = WriteOp::Kind::kDeleteJob;
      op.id = job_id;
      op.due_ms = info.due_ms;
      op.user_hash = info.user_hash;
      op.fresh = info.fresh;
      op.disk_due_ms = info.due_ms;
      if (auto it = overlay_.find(job_id); it != overlay_.end()) {
        op.disk_due_ms = it->second.disk_due_ms;  // Its rewrite is skipped.
        overlay_.erase(it);
      }
      // A job purged while leased: its deletion removed the record and counted it on disk.
      op.purged = !purged_leased_.empty() && purged_leased_.erase(job_id) > 0;
      CountJobLocked(info.due_ms, -1);
      Enqueue(std::move(op));
      return absl::OkStatus();
    }
  }
  return RefusedLease(job_id, lease, check);
}

absl::StatusOr<Job> RocksDbJobStore::BeginSettle(uint64_t job_id, uint64_t lease,
                                                 LeaseInfo* info) {
  LeaseCheck check;
  std::string value;
  bool have_value = false;
  {
    absl::MutexLock lock(&mu_);
    check = EndLeaseLocked(job_id, lease, info);
    if (check == LeaseCheck::kOk) {
      settling_.insert(job_id);
      if (auto it = overlay_.find(job_id); it != overlay_.end()) {
        value = it->second.value;
        have_value = true;
      }
    }
  }
  if (check != LeaseCheck::kOk) return RefusedLease(job_id, lease, check);

  absl::Status status;
  bool read_error = false;
  bool not_found = false;
  if (!have_value) {
    rocksdb::Status s =
        db_->Get(rocksdb::ReadOptions(), jobs_cf_, U64Bytes(job_id).slice(), &value);
    if (s.IsNotFound()) {
      status = absl::NotFoundError(absl::StrFormat("job %d not found", job_id));
      not_found = true;
    } else if (!s.ok()) {
      status = FromRocks(s, "reading a job");
      read_error = true;
    }
  }
  Job job;
  if (status.ok() && !ParseJobValue(value, &job)) status = Malformed(kJobsCf, job_id);
  if (!status.ok()) {
    absl::MutexLock lock(&mu_);
    // A read error leaves the job as it was: ready again (at-least-once). A missing record was
    // purged (its deletion counted it); a broken one cannot be delivered and is dropped.
    const bool mine = settling_.erase(job_id) > 0;
    const bool purged = purged_leased_.erase(job_id) > 0;
    if (mine && read_error) {
      ready_.push_back({info->due_ms, job_id, info->fresh});
      std::push_heap(ready_.begin(), ready_.end(), LaterFirst());
    } else if (mine && (purged || !not_found)) {
      // Purged while leased, or broken. (Missing otherwise: its deletion counts it.)
      CountJobLocked(info->due_ms, -1);
    }
    return status;
  }
  return job;
}

absl::Status RocksDbJobStore::Retry(uint64_t job_id, uint64_t lease, absl::Time not_before,
                                   const hookrelay::v1::Attempt& attempt) {
  LeaseInfo info;
  ASSIGN_OR_RETURN(Job job, BeginSettle(job_id, lease, &info));
  const int64_t now_ms = ToMillis(clock_.Now());
  RecordAttempt(attempt, now_ms, job);
  job.set_due_unix_ms(ToMillis(not_before));
  std::string value;
  EncodeJobValue(job, &value);

  absl::MutexLock lock(&mu_);
  if (settling_.erase(job_id) == 0) {
    return absl::NotFoundError(absl::StrFormat("job %d was purged", job_id));
  }
  const uint64_t seq = ++overlay_seq_;
  PendingRecord& pending = overlay_[job_id];
  // A rewrite not yet written leaves the record on disk where it was.
  if (pending.seq == 0) pending.disk_due_ms = info.due_ms;
  pending.seq = seq;
  pending.value = std::move(value);
  CountJobLocked(info.due_ms, -1);
  CountJobLocked(job.due_unix_ms(), +1);
  QueueLocked(job.due_unix_ms(), job_id, now_ms, /*dirty=*/true);
  WriteOp op;
  op.kind = WriteOp::Kind::kPutJob;
  op.id = job_id;
  op.seq = seq;
  op.due_ms = info.due_ms;
  op.fresh = info.fresh;
  Enqueue(std::move(op));
  return absl::OkStatus();
}

absl::Status RocksDbJobStore::Bury(uint64_t job_id, uint64_t lease, std::string_view reason,
                                  const hookrelay::v1::Attempt& attempt) {
  LeaseInfo info;
  ASSIGN_OR_RETURN(Job job, BeginSettle(job_id, lease, &info));
  const int64_t now_ms = ToMillis(clock_.Now());
  RecordAttempt(attempt, now_ms, job);
  job.set_dead_reason(std::string(reason));
  job.set_dead_at_unix_ms(now_ms);

  WriteOp op;
  op.kind = WriteOp::Kind::kBury;
  op.id = job_id;
  op.due_ms = info.due_ms;
  op.user_hash = info.user_hash;
  op.fresh = info.fresh;
  job.SerializeToString(&op.value);
  if (!job.user_id().empty()) op.index_key = DeadIndexKey(job.user_id(), job.source_id(), job_id);
  absl::MutexLock lock(&mu_);
  if (settling_.erase(job_id) == 0) {
    return absl::NotFoundError(absl::StrFormat("job %d was purged", job_id));
  }
  op.disk_due_ms = info.due_ms;
  if (auto it = overlay_.find(job_id); it != overlay_.end()) {
    op.disk_due_ms = it->second.disk_due_ms;
    overlay_.erase(it);
  }
  CountJobLocked(info.due_ms, -1);
  ++dead_count_;
  Enqueue(std::move(op));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Job>> RocksDbJobStore::ListDead(const DeadFilter& filter) {
  std::vector<Job> out;
  if (filter.limit == 0 || filter.after_id == UINT64_MAX) return out;
  Flush();  // Earlier Bury calls are visible.
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), dead_cf_));
  for (it->Seek(U64Bytes(filter.after_id + 1).slice()); it->Valid(); it->Next()) {
    Job job;
    if (!job.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Malformed(kDeadCf, it->key().size() == 8 ? DecodeU64(it->key().data()) : 0);
    }
    if (!MatchesDead(job, filter)) continue;
    out.push_back(std::move(job));
    if (out.size() >= filter.limit) break;
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "scanning dead letters"));
  return out;
}

absl::StatusOr<size_t> RocksDbJobStore::Replay(const DeadFilter& filter) {
  // Earlier Bury calls are written, and nothing else writes until this returns.
  const std::shared_ptr<absl::Notification> resume = PauseWrites();
  absl::Cleanup resume_writes = [&resume] { resume->Notify(); };
  const int64_t now_ms = ToMillis(clock_.Now());
  rocksdb::WriteOptions sync;
  sync.sync = true;
  rocksdb::WriteBatch batch;
  std::vector<uint64_t> ids;
  std::vector<uint64_t> user_hashes;
  size_t replayed = 0;
  std::string value;
  auto write_chunk = [&]() -> absl::Status {
    if (ids.empty()) return absl::OkStatus();
    const auto n = static_cast<int64_t>(ids.size());
    CountInBatch(n, -n, batch);
    const DueCountDeltas deltas = {{SecondOf(now_ms), n}};
    {
      // The pager must not read these keys before they are published below.
      absl::MutexLock lock(&mu_);
      unpublished_.insert(ids.begin(), ids.end());
      DueCountsInBatchLocked(deltas, batch);
    }
    const rocksdb::Status s = db_->Write(sync, &batch);
    absl::MutexLock lock(&mu_);
    for (uint64_t id : ids) unpublished_.erase(id);
    if (!s.ok()) {
      RevertDueCountsLocked(deltas);
      return WriteFailed(s, "replaying dead letters");
    }
    for (uint64_t id : ids) QueueLocked(now_ms, id, now_ms, /*dirty=*/false);
    CountJobLocked(now_ms, n);
    dead_count_ -= n;
    replayed += ids.size();
    ids.clear();
    user_hashes.clear();
    batch.Clear();
    return absl::OkStatus();
  };

  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), dead_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    Job job;
    if (it->key().size() != 8 ||
        !job.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Malformed(kDeadCf, it->key().size() == 8 ? DecodeU64(it->key().data()) : 0);
    }
    if (!MatchesDead(job, filter)) continue;
    // A fresh retry window; attempts and history stay for the record.
    job.set_first_attempt_unix_ms(0);
    job.clear_dead_reason();
    job.set_dead_at_unix_ms(0);
    job.set_due_unix_ms(now_ms);
    EncodeJobValue(job, &value);
    batch.Put(jobs_cf_, it->key(), value);
    PutJobKeys(now_ms, job.id(), UserHash(job.user_id()), batch);
    batch.Delete(dead_cf_, it->key());
    if (!job.user_id().empty()) {
      batch.Delete(users_cf_, DeadIndexKey(job.user_id(), job.source_id(), job.id()));
    }
    ids.push_back(job.id());
    user_hashes.push_back(UserHash(job.user_id()));
    if (ids.size() >= kAdminChunk) RETURN_IF_ERROR(write_chunk());
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "scanning dead letters"));
  RETURN_IF_ERROR(write_chunk());
  return replayed;
}

absl::Status RocksDbJobStore::FlushAppendOnly(rocksdb::ColumnFamilyHandle* family,
                                              std::string_view what) {
  // Reads of an append-only family come from SST files: its vector memtable would be sorted on
  // every read. The flush is bounded by the memtable's size (8 or 32 MB).
  rocksdb::FlushOptions flush;
  flush.wait = true;
  flush.allow_write_stall = true;
  return FromRocks(db_->Flush(flush, family), what);
}

absl::StatusOr<std::vector<std::string>> RocksDbJobStore::SourcesSeen(std::string_view user_id) {
  std::vector<std::string> sources;
  if (user_id.empty()) return sources;
  RETURN_IF_ERROR(FlushAppendOnly(users_cf_, "flushing the user index"));
  std::string prefix;
  SeenPrefix(user_id, &prefix);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), users_cf_));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    rocksdb::Slice rest = it->key();
    rest.remove_prefix(prefix.size());
    if (rest.size() < 4) return Malformed(kUsersCf, 0);
    const uint32_t n = (uint32_t{static_cast<unsigned char>(rest[0])} << 24) |
                       (uint32_t{static_cast<unsigned char>(rest[1])} << 16) |
                       (uint32_t{static_cast<unsigned char>(rest[2])} << 8) |
                       uint32_t{static_cast<unsigned char>(rest[3])};
    if (rest.size() != 4 + size_t{n}) return Malformed(kUsersCf, 0);
    sources.emplace_back(rest.data() + 4, n);
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "reading the user index"));
  return sources;
}

absl::StatusOr<DeletionOutcome> RocksDbJobStore::ApplyDeletion(DeletionPlan plan) {
  if (plan.record.id().empty() || plan.record.user_id().empty()) {
    return absl::InvalidArgumentError("job store: a deletion needs an id and a user id");
  }
  absl::StatusOr<DeletionOutcome> outcome;
  RunExclusive([&] { outcome = ApplyDeletionNow(plan); });
  return outcome;
}

void RocksDbJobStore::RunExclusive(std::function<void()> fn) {
  absl::Notification done;
  WriteOp op;
  op.kind = WriteOp::Kind::kExclusive;
  op.run = std::move(fn);
  op.notify = &done;
  Enqueue(std::move(op));
  done.WaitForNotification();
}

absl::StatusOr<DeletionOutcome> RocksDbJobStore::ApplyDeletionNow(DeletionPlan& plan) {
  using hookrelay::v1::Deletion;
  DeletionOutcome outcome;
  size_t& touched = outcome.keys_touched;
  Deletion& record = plan.record;
  const std::string& user = record.user_id();

  // Idempotence: a request id applied before answers its record.
  if (!record.request_id().empty()) {
    std::string id;
    const rocksdb::Status s =
        db_->Get(rocksdb::ReadOptions(), deletions_cf_, RequestKey(record.request_id()), &id);
    ++touched;
    if (s.ok()) {
      ASSIGN_OR_RETURN(std::optional<Deletion> earlier, GetDeletion(id));
      ++touched;
      if (!earlier.has_value()) return Malformed(kDeletionsCf, 0);
      outcome.record = *std::move(earlier);
      return outcome;
    }
    if (!s.IsNotFound()) return FromRocks(s, "reading deletions");
  }

  const absl::flat_hash_set<std::string_view> sources(record.source_ids().begin(),
                                                      record.source_ids().end());
  const uint64_t user_hash = UserHash(user);
  RETURN_IF_ERROR(FlushAppendOnly(users_cf_, "flushing the user index"));
  RETURN_IF_ERROR(FlushAppendOnly(profiles_cf_, "flushing profiles"));
  rocksdb::WriteBatch batch;

  // 1. The user's pending jobs: candidates from the pending index ("p" keys of the user's
  // hash), checked against their records (the pending rewrite of a retried job when there is
  // one; hash collisions and other sources are filtered out here).
  std::vector<uint64_t> listed;
  {
    const PendingKeyBytes first(user_hash, 0);
    const rocksdb::Slice prefix(first.slice().data(), 9);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), users_cf_));
    for (it->Seek(first.slice()); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      if (it->key().size() != 17) return Malformed(kUsersCf, 0);
      listed.push_back(DecodeU64(it->key().data() + 9));
      ++touched;
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "reading the pending index"));
    ++touched;  // The seek that ends the range.
  }
  std::vector<uint64_t> candidates;
  absl::flat_hash_map<uint64_t, PendingRecord> overlay;
  {
    absl::MutexLock lock(&mu_);
    for (uint64_t id : listed) {
      if (auto o = overlay_.find(id); o != overlay_.end()) {
        overlay.emplace(id, o->second);
      } else {
        candidates.push_back(id);
      }
    }
  }
  struct Purged {
    uint64_t id;
    int64_t due_ms;
  };
  std::vector<Purged> purged;
  DueCountDeltas due_deltas;
  // `disk_due_ms`: the due time of the record on disk (the persisted counts follow it).
  auto consider = [&](uint64_t id, rocksdb::Slice value,
                      std::optional<int64_t> disk_due_ms) -> absl::Status {
    Job job;
    if (!ParseJobValue(value, &job)) return Malformed(kJobsCf, id);
    if (job.user_id() != user || !sources.contains(job.source_id()) ||
        job.type() == hookrelay::v1::DELETE || job.test()) {
      return absl::OkStatus();
    }
    batch.Delete(jobs_cf_, U64Bytes(id).slice());
    // The key of this record; a superseded key of a pending retry is deleted by that retry's
    // (skipped) write.
    DeleteJobKeys(job.due_unix_ms(), id, user_hash, IsFresh(value), batch);
    ++touched;
    purged.push_back({id, job.due_unix_ms()});
    --due_deltas[SecondOf(disk_due_ms.value_or(job.due_unix_ms()))];
    return absl::OkStatus();
  };
  if (!candidates.empty()) {
    std::sort(candidates.begin(), candidates.end());
    std::vector<U64Bytes> key_bytes;
    key_bytes.reserve(candidates.size());
    std::vector<rocksdb::Slice> keys;
    keys.reserve(candidates.size());
    for (uint64_t id : candidates) keys.push_back(key_bytes.emplace_back(id).slice());
    std::vector<rocksdb::PinnableSlice> values(keys.size());
    std::vector<rocksdb::Status> statuses(keys.size());
    db_->MultiGet(rocksdb::ReadOptions(), jobs_cf_, keys.size(), keys.data(), values.data(),
                  statuses.data(), /*sorted_input=*/true);
    touched += keys.size();
    for (size_t k = 0; k < keys.size(); ++k) {
      if (statuses[k].IsNotFound()) continue;  // Ended meanwhile.
      RETURN_IF_ERROR(FromRocks(statuses[k], "reading the user's jobs"));
      RETURN_IF_ERROR(consider(candidates[k], values[k], std::nullopt));
    }
  }
  for (const auto& [id, pending] : overlay) {
    RETURN_IF_ERROR(consider(id, pending.value, pending.disk_due_ms));
  }

  // 2. The user's dead letters of those sources, and the sources-seen entries.
  size_t dead = 0;
  std::string prefix;
  for (const std::string& source : record.source_ids()) {
    DeadIndexPrefix(user, source, &prefix);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), users_cf_));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      if (it->key().size() != prefix.size() + 8) return Malformed(kUsersCf, 0);
      batch.Delete(dead_cf_, rocksdb::Slice(it->key().data() + prefix.size(), 8));
      batch.Delete(users_cf_, it->key());
      touched += 3;
      ++dead;
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "reading the user index"));
    ++touched;  // The seek that ends the range.
    SeenKey(user, source, &prefix);
    batch.Delete(users_cf_, prefix);
    ++touched;
    // The profile of that source.
    std::string ignored;
    const std::string profile_key = ProfileKey(user, source);
    const rocksdb::Status got =
        db_->Get(rocksdb::ReadOptions(), profiles_cf_, profile_key, &ignored);
    touched += 2;
    if (got.ok()) {
      record.set_purged_profile(true);
      batch.Delete(profiles_cf_, profile_key);
    } else if (!got.IsNotFound()) {
      return FromRocks(got, "reading a profile");
    }
  }
  // Memberships: removed without an identify; the member counts follow.
  for (const std::string& audience : plan.audience_ids) {
    std::string ignored;
    const std::string key = MemberKey(audience, user);
    const rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), audiences_cf_, key, &ignored);
    touched += 1;
    if (got.IsNotFound()) continue;
    RETURN_IF_ERROR(FromRocks(got, "reading a membership"));
    hookrelay::v1::AudienceState state;
    std::string value;
    const rocksdb::Status s =
        db_->Get(rocksdb::ReadOptions(), audiences_cf_, AudienceKey('a', audience), &value);
    if (s.ok() && state.ParseFromString(value) && state.members() > 0) {
      state.set_members(state.members() - 1);
      batch.Put(audiences_cf_, AudienceKey('a', audience), state.SerializeAsString());
    }
    batch.Delete(audiences_cf_, key);
    touched += 3;
  }

  // 3. The notifications, due now.
  const int64_t now_ms = ToMillis(clock_.Now());
  const std::vector<uint64_t> new_ids = PutNewJobs(plan.notifications, now_ms, batch);
  touched += new_ids.size();
  due_deltas[SecondOf(now_ms)] += static_cast<int64_t>(new_ids.size());

  CountInBatch(-static_cast<int64_t>(purged.size()), -static_cast<int64_t>(dead), batch);

  // 4. The record, in the same write: it exists if and only if all of the above happened.
  record.set_state(Deletion::COMPLETED);
  record.set_notifications(new_ids.size());
  record.set_purged_jobs(purged.size());
  record.set_purged_dead_letters(dead);
  batch.Put(deletions_cf_, DeletionKey(record.id()), record.SerializeAsString());
  ++touched;
  if (!record.request_id().empty()) {
    batch.Put(deletions_cf_, RequestKey(record.request_id()), record.id());
    ++touched;
  }
  rocksdb::WriteOptions sync;
  sync.sync = true;
  {
    absl::MutexLock lock(&mu_);
    DueCountsInBatchLocked(due_deltas, batch);
  }
  if (options_.deletion_hook_for_testing) options_.deletion_hook_for_testing("before_write");
  if (rocksdb::Status s = db_->Write(sync, &batch); !s.ok()) {
    absl::MutexLock lock(&mu_);
    RevertDueCountsLocked(due_deltas);
    return WriteFailed(s, "applying a deletion");
  }
  if (options_.deletion_hook_for_testing) options_.deletion_hook_for_testing("after_write");

  // 5. Memory: the purged jobs leave the window (or the parked set; those beyond the cursor
  // were only on disk), the counts follow, the notifications are queued, and the sources-seen
  // cache forgets the pairs.
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_set<uint64_t> purged_ids;
    for (const Purged& p : purged) purged_ids.insert(p.id);
    // Jobs that ended (Complete, Bury) while the deletion was written: their ops are queued
    // behind it and now write (and count) nothing; their counts already moved.
    absl::flat_hash_set<uint64_t> ended;
    {
      absl::MutexLock queue_lock(&queue_mu_);
      for (WriteOp& op : queue_) {
        if ((op.kind == WriteOp::Kind::kDeleteJob || op.kind == WriteOp::Kind::kBury) &&
            purged_ids.contains(op.id)) {
          op.purged = true;
          ended.insert(op.id);
        }
      }
    }
    absl::flat_hash_set<uint64_t> from_window;
    for (const Purged& p : purged) {
      if (ended.contains(p.id)) continue;
      int64_t due_ms = p.due_ms;
      if (auto o = overlay_.find(p.id); o != overlay_.end()) {
        due_ms = DueOf(o->second.value);
        overlay_.erase(o);  // Its pending write is skipped.
      }
      // A leased job finishes its attempt (it counts as leased until then); with its record
      // gone, a retry or bury drops it and a Complete writes nothing.
      if (leased_.contains(p.id)) {
        purged_leased_.insert(p.id);
        continue;
      }
      CountJobLocked(due_ms, -1);
      // A settling one is dropped by its Retry/Bury.
      if (settling_.erase(p.id) > 0) continue;
      if (parked_.erase(QueuedJob{due_ms, p.id}) > 0) continue;
      if (QueuedJob{due_ms, p.id} < cursor_) from_window.insert(p.id);
    }
    EraseFromWindowLocked(from_window);
    dead_count_ -= static_cast<int64_t>(dead);
    for (uint64_t id : new_ids) QueueLocked(now_ms, id, now_ms, /*dirty=*/false);
    if (!new_ids.empty()) {
      CountJobLocked(now_ms, static_cast<int64_t>(new_ids.size()));
      published_id_ = std::max(published_id_, new_ids.back());
    }
  }
  for (const std::string& source : record.source_ids()) {
    const uint64_t seen = SeenHash(user, source);
    seen_cache_[seen & (kSeenCacheSlots - 1)].store(0, std::memory_order_relaxed);
  }
  outcome.record = record;
  outcome.created = true;
  return outcome;
}

std::vector<uint64_t> RocksDbJobStore::PutNewJobs(std::vector<Job>& jobs, int64_t now_ms,
                                                  rocksdb::WriteBatch& batch) {
  std::vector<uint64_t> ids;
  ids.reserve(jobs.size());
  std::string value;
  for (Job& job : jobs) {
    const uint64_t id = next_id_++;
    job.set_id(id);
    job.set_due_unix_ms(now_ms);
    EncodeJobValue(job, &value);
    batch.Put(jobs_cf_, U64Bytes(id).slice(), value);
    PutJobKeys(now_ms, id, UserHash(job.user_id()), batch);
    ids.push_back(id);
  }
  if (!ids.empty()) batch.Put(meta_cf_, kNextIdKey, U64Bytes(next_id_).slice());
  CountInBatch(static_cast<int64_t>(ids.size()), 0, batch);
  return ids;
}

absl::Status RocksDbJobStore::WriteWithJobs(rocksdb::WriteBatch& batch,
                                            std::vector<Job>& jobs, std::string_view what) {
  const int64_t now_ms = ToMillis(clock_.Now());
  const std::vector<uint64_t> ids = PutNewJobs(jobs, now_ms, batch);
  const DueCountDeltas deltas = {{SecondOf(now_ms), static_cast<int64_t>(ids.size())}};
  {
    absl::MutexLock lock(&mu_);
    DueCountsInBatchLocked(deltas, batch);
  }
  rocksdb::WriteOptions sync;
  sync.sync = true;
  if (rocksdb::Status s = db_->Write(sync, &batch); !s.ok()) {
    absl::MutexLock lock(&mu_);
    RevertDueCountsLocked(deltas);
    return WriteFailed(s, what);
  }
  absl::MutexLock lock(&mu_);
  for (uint64_t id : ids) QueueLocked(now_ms, id, now_ms, /*dirty=*/false);
  if (!ids.empty()) {
    CountJobLocked(now_ms, static_cast<int64_t>(ids.size()));
    published_id_ = std::max(published_id_, ids.back());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> RocksDbJobStore::GetAudienceState(
    std::string_view audience_id) {
  std::string value;
  const rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), audiences_cf_, AudienceKey('a', audience_id), &value);
  if (s.IsNotFound()) return std::optional<hookrelay::v1::AudienceState>();
  RETURN_IF_ERROR(FromRocks(s, "reading an audience's state"));
  hookrelay::v1::AudienceState state;
  if (!state.ParseFromString(value)) return Malformed(kAudiencesCf, 0);
  return std::optional<hookrelay::v1::AudienceState>(std::move(state));
}

absl::StatusOr<AudienceSyncInput> RocksDbJobStore::BeginAudienceSync(
    std::string_view audience_id, const std::vector<std::string>& sources, absl::Time now) {
  AudienceSyncInput input;
  // Every change before this point is written and logged at or below the position; every later
  // one is logged above it (the per-user dedup restarts).
  RunExclusive([&] {
    input.log_position = next_log_seq_ - 1;
    logged_users_.clear();
  });
  ASSIGN_OR_RETURN(input.state, GetAudienceState(audience_id));
  RETURN_IF_ERROR(FlushAppendOnly(profiles_cf_, "flushing profiles"));
  absl::flat_hash_set<std::string> users;
  rocksdb::ReadOptions read;
  if (!input.state.has_value()) {
    // First computation: every profile of the audience's sources.
    const absl::flat_hash_set<std::string> wanted(sources.begin(), sources.end());
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, profiles_cf_));
    std::string user, source;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      size_t pos = 0;
      if (!ReadLengthPrefixed(it->key(), &pos, &user) ||
          !ReadLengthPrefixed(it->key(), &pos, &source)) {
        return Malformed(kProfilesCf, 0);
      }
      if (wanted.contains(source)) users.insert(user);
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "scanning profiles"));
  } else {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, audiences_cf_));
    const std::string end = LogKey(input.log_position);
    for (it->Seek(LogKey(input.state->cursor() + 1));
         it->Valid() && it->key().size() == 9 && it->key()[0] == 'c' &&
         it->key().compare(end) <= 0;
         it->Next()) {
      users.emplace(it->value().data(), it->value().size());
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "reading the profile change log"));
  }
  {
    // Rechecks due by now (window edges).
    const std::string prefix = AudienceKey('x', audience_id);
    const std::string end = RecheckKey(audience_id, absl::ToUnixMillis(now) + 1, "");
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, audiences_cf_));
    std::string user;
    for (it->Seek(prefix); it->Valid() && it->key().compare(end) < 0; it->Next()) {
      size_t pos = prefix.size() + 8;
      if (!it->key().starts_with(prefix) || !ReadLengthPrefixed(it->key(), &pos, &user)) {
        return Malformed(kAudiencesCf, 0);
      }
      users.insert(user);
      input.rechecks_due.push_back(it->key().ToString());
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "reading audience rechecks"));
  }
  input.users.assign(users.begin(), users.end());
  std::sort(input.users.begin(), input.users.end());
  return input;
}

absl::StatusOr<std::vector<AudienceUser>> RocksDbJobStore::ReadAudienceUsers(
    std::string_view audience_id, const std::vector<std::string>& users,
    const std::vector<std::string>& sources) {
  std::vector<AudienceUser> out(users.size());
  // One MultiGet: each user's profiles of the sources and membership.
  std::vector<std::string> keys;
  keys.reserve(users.size() * sources.size());
  for (const std::string& user : users) {
    for (const std::string& source : sources) keys.push_back(ProfileKey(user, source));
  }
  std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
  std::vector<rocksdb::PinnableSlice> values(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  if (!keys.empty()) {
    db_->MultiGet(rocksdb::ReadOptions(), profiles_cf_, keys.size(), slices.data(), values.data(),
                  statuses.data());
  }
  std::vector<std::string> member_keys;
  member_keys.reserve(users.size());
  for (const std::string& user : users) member_keys.push_back(MemberKey(audience_id, user));
  std::vector<rocksdb::Slice> member_slices(member_keys.begin(), member_keys.end());
  std::vector<rocksdb::PinnableSlice> member_values(member_keys.size());
  std::vector<rocksdb::Status> member_statuses(member_keys.size());
  if (!member_keys.empty()) {
    db_->MultiGet(rocksdb::ReadOptions(), audiences_cf_, member_keys.size(), member_slices.data(),
                  member_values.data(), member_statuses.data());
  }
  for (size_t u = 0; u < users.size(); ++u) {
    AudienceUser& user = out[u];
    user.user_id = users[u];
    if (!member_statuses[u].IsNotFound()) {
      RETURN_IF_ERROR(FromRocks(member_statuses[u], "reading memberships"));
      user.member = true;
    }
    for (size_t s = 0; s < sources.size(); ++s) {
      const size_t k = u * sources.size() + s;
      if (statuses[k].IsNotFound()) continue;
      RETURN_IF_ERROR(FromRocks(statuses[k], "reading profiles"));
      if (!user.profiles.emplace_back().ParseFromArray(values[k].data(),
                                                       static_cast<int>(values[k].size()))) {
        return Malformed(kProfilesCf, 0);
      }
    }
  }
  return out;
}

absl::StatusOr<hookrelay::v1::AudienceState> RocksDbJobStore::CommitAudienceSync(
    AudienceSyncPlan plan) {
  absl::StatusOr<hookrelay::v1::AudienceState> state;
  RunExclusive([&] { state = CommitAudienceSyncNow(plan); });
  return state;
}

absl::StatusOr<hookrelay::v1::AudienceState> RocksDbJobStore::CommitAudienceSyncNow(
    AudienceSyncPlan& plan) {
  // The member count is read here, between writes, so that deletions (which also adjust it) and
  // syncs never overwrite each other's counts.
  ASSIGN_OR_RETURN(std::optional<hookrelay::v1::AudienceState> previous,
                   GetAudienceState(plan.audience_id));
  hookrelay::v1::AudienceState state = plan.stats;
  int64_t members = previous.has_value() ? static_cast<int64_t>(previous->members()) : 0;
  // A user deleted after the evaluation (deletions run between writes, like this commit) gets no
  // identify: an entry needs a profile still, an exit a membership still recorded.
  if (!plan.changes.empty()) {
    RETURN_IF_ERROR(FlushAppendOnly(profiles_cf_, "flushing profiles"));
    absl::flat_hash_set<std::string> gone;
    for (const auto& [user, member] : plan.changes) {
      std::string ignored;
      bool present = false;
      if (member) {
        for (const std::string& source : plan.sources) {
          const rocksdb::Status s =
              db_->Get(rocksdb::ReadOptions(), profiles_cf_, ProfileKey(user, source), &ignored);
          if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "reading a profile");
          if (s.ok()) {
            present = true;
            break;
          }
        }
      } else {
        const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), audiences_cf_,
                                           MemberKey(plan.audience_id, user), &ignored);
        if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "reading a membership");
        present = s.ok();
      }
      if (!present) gone.insert(user);
    }
    if (!gone.empty()) {
      plan.changes.erase(std::remove_if(plan.changes.begin(), plan.changes.end(),
                                        [&](const auto& c) { return gone.contains(c.first); }),
                         plan.changes.end());
      plan.jobs.erase(std::remove_if(plan.jobs.begin(), plan.jobs.end(),
                                     [&](const Job& j) { return gone.contains(j.user_id()); }),
                      plan.jobs.end());
      plan.rechecks.erase(std::remove_if(plan.rechecks.begin(), plan.rechecks.end(),
                                         [&](const auto& r) { return gone.contains(r.first); }),
                          plan.rechecks.end());
    }
  }
  rocksdb::WriteBatch batch;
  for (const auto& [user, member] : plan.changes) {
    const std::string key = MemberKey(plan.audience_id, user);
    if (member) {
      batch.Put(audiences_cf_, key, rocksdb::Slice());
      ++members;
    } else {
      batch.Delete(audiences_cf_, key);
      --members;
    }
  }
  for (const std::string& key : plan.rechecks_done) batch.Delete(audiences_cf_, key);
  for (const auto& [user, at] : plan.rechecks) {
    batch.Put(audiences_cf_, RecheckKey(plan.audience_id, absl::ToUnixMillis(at), user),
              rocksdb::Slice());
  }
  state.set_cursor(plan.log_position);
  state.set_members(static_cast<uint64_t>(std::max<int64_t>(members, 0)));
  state.set_computed(true);
  batch.Put(audiences_cf_, AudienceKey('a', plan.audience_id), state.SerializeAsString());
  if (plan.log_needed_after > 0) {
    batch.DeleteRange(audiences_cf_, LogKey(0), LogKey(plan.log_needed_after + 1));
  }
  RETURN_IF_ERROR(WriteWithJobs(batch, plan.jobs, "committing an audience sync"));
  return state;
}

absl::Status RocksDbJobStore::DropAudience(std::string_view audience_id) {
  rocksdb::WriteBatch batch;
  for (char kind : {'m', 'x'}) {
    const std::string prefix = AudienceKey(kind, audience_id);
    batch.DeleteRange(audiences_cf_, prefix, PrefixEnd(prefix));
  }
  batch.Delete(audiences_cf_, AudienceKey('a', audience_id));
  absl::Status status;
  std::vector<Job> none;
  RunExclusive([&] { status = WriteWithJobs(batch, none, "dropping an audience"); });
  return status;
}

absl::StatusOr<std::optional<hookrelay::v1::Deletion>> RocksDbJobStore::GetDeletion(
    std::string_view id) {
  std::string value;
  const rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), deletions_cf_, DeletionKey(id), &value);
  if (s.IsNotFound()) return std::optional<hookrelay::v1::Deletion>();
  RETURN_IF_ERROR(FromRocks(s, "reading a deletion"));
  hookrelay::v1::Deletion record;
  if (!record.ParseFromString(value)) return Malformed(kDeletionsCf, 0);
  return std::optional<hookrelay::v1::Deletion>(std::move(record));
}

absl::StatusOr<std::vector<hookrelay::v1::Deletion>> RocksDbJobStore::ListDeletions(
    std::string_view before_id, size_t limit) {
  std::vector<hookrelay::v1::Deletion> out;
  if (limit == 0) return out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), deletions_cf_));
  if (before_id.empty()) {
    it->SeekForPrev("d\xff");
  } else {
    const std::string start = DeletionKey(before_id);
    it->SeekForPrev(start);
    if (it->Valid() && it->key() == start) it->Prev();
  }
  for (; it->Valid() && it->key().starts_with("d"); it->Prev()) {
    hookrelay::v1::Deletion& record = out.emplace_back();
    if (!record.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Malformed(kDeletionsCf, 0);
    }
    if (out.size() >= limit) break;
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "listing deletions"));
  return out;
}

absl::Status RocksDbJobStore::WriteFailed(const rocksdb::Status& s, std::string_view what) {
  const std::string_view kind = ErrorKind(s);
  if (metrics_.store_errors != nullptr) {
    metrics_.store_errors->Add({{"kind", std::string(kind)}}).Increment();
  }
  bool changed = false;
  {
    absl::MutexLock lock(&health_mu_);
    if (error_kind_.empty()) {
      error_kind_ = std::string(kind);
      writable_.store(false);
      changed = true;
    }
  }
  if (changed) {
    // The detail (with paths) is for the operator's log only.
    common::LogError("job store cannot write; refusing ingest until it recovers",
                     {{"kind", kind}, {"during", what}, {"error", s.ToString()}});
    if (metrics_.writable != nullptr) metrics_.writable->Set(0);
    if (options_.on_write_health) options_.on_write_health(false);
  }
  return absl::UnavailableError(absl::StrCat("cannot store events now: ", ErrorText(kind),
                                             "; retry later"));
}

void RocksDbJobStore::RecoverLoop() {
  pthread_setname_np(pthread_self(), "jobstore-resume");
  for (;;) {
    {
      absl::MutexLock lock(&health_mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mu_) {
        return health_stopping_ || !error_kind_.empty();
      };
      health_mu_.Await(absl::Condition(&wake));
      if (health_stopping_) return;
    }
    absl::Duration pause = options_.resume_interval;
    int tries = 0;
    for (;;) {
      {
        absl::MutexLock lock(&health_mu_);
        // Real time: waiting for the disk to have room again, not for scheduled work.
        health_mu_.AwaitWithTimeout(absl::Condition(&health_stopping_), pause);
        if (health_stopping_) return;
      }
      pause = std::min(pause * 2, options_.resume_max_interval);
      ++tries;
      // Resume clears RocksDB's background error (flushing what it must); the synced probe
      // proves that a write reaches the disk now. Either failing means: not yet.
      rocksdb::Status s = db_->Resume();
      if (s.ok()) {
        rocksdb::WriteOptions sync;
        sync.sync = true;
        s = db_->Put(sync, meta_cf_, kProbeKey, U64Bytes(ToMillis(clock_.Now())).slice());
      }
      if (!s.ok()) {
        if (metrics_.store_errors != nullptr) {
          metrics_.store_errors->Add({{"kind", std::string(ErrorKind(s))}}).Increment();
        }
        continue;
      }
      std::vector<WriteOp> deferred;
      std::string kind;
      size_t rewritten = 0;
      {
        absl::MutexLock lock(&health_mu_);
        deferred.swap(deferred_);
        kind.swap(error_kind_);
        rewritten = deferred.size();
        // Queued before the store counts as writable: the fresh floor (MaybePutFreshFloorLocked)
        // is only written while no settlement is queued.
        if (!deferred.empty()) {
          absl::MutexLock queue_lock(&queue_mu_);
          for (auto it = deferred.rbegin(); it != deferred.rend(); ++it) {
            queue_.push_front(std::move(*it));
          }
        }
        writable_.store(true);
      }
      common::LogInfo("job store writable again; accepting ingest",
                      {{"was", kind}, {"tries", tries}, {"settlements_rewritten", rewritten}});
      if (metrics_.writable != nullptr) metrics_.writable->Set(1);
      if (options_.on_write_health) options_.on_write_health(true);
      break;
    }
  }
}

absl::Status RocksDbJobStore::WriteHealth() const {
  if (writable_.load(std::memory_order_relaxed)) return absl::OkStatus();
  absl::MutexLock lock(&health_mu_);
  if (error_kind_.empty()) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("cannot store events now: ", ErrorText(error_kind_), "; retry later"));
}

JobCounts RocksDbJobStore::Counts() {
  const absl::Time now = clock_.Now();
  const int64_t now_ms = ToMillis(now);
  absl::MutexLock lock(&mu_);
  ExpireLeasesLocked(now);
  PromoteDueLocked(now_ms);
  JobCounts counts;
  counts.leased = static_cast<int64_t>(leased_.size() + settling_.size());
  counts.dead = dead_count_;
  // Scheduled: the jobs due in later seconds (from the due-time counts), plus those due later
  // in this second that memory knows of (a job beyond the window due later in this very second
  // counts as ready: the one approximation).
  const int64_t second = SecondOf(now_ms);
  int64_t scheduled = DueAfterLocked(second);
  const int64_t second_end_ms = (second + 1) * 1000;
  std::vector<size_t> stack;
  if (!scheduled_.empty()) stack.push_back(0);
  while (!stack.empty()) {  // The heap's entries due before second_end_ms: a top subtree.
    const size_t i = stack.back();
    stack.pop_back();
    if (scheduled_[i].due_ms >= second_end_ms) continue;
    ++scheduled;
    for (size_t child : {2 * i + 1, 2 * i + 2}) {
      if (child < scheduled_.size()) stack.push_back(child);
    }
  }
  for (auto it = parked_.lower_bound(QueuedJob{now_ms + 1, 0});
       it != parked_.end() && it->due_ms < second_end_ms; ++it) {
    ++scheduled;
  }
  const int64_t queued = std::max<int64_t>(live_jobs_ - counts.leased, 0);
  counts.scheduled = std::min(scheduled, queued);
  counts.ready = queued - counts.scheduled;
  if (!ready_.empty()) {
    counts.oldest_ready_due = absl::FromUnixMillis(ready_.front().due_ms);
  } else if (!parked_.empty() && parked_.begin()->due_ms <= now_ms) {
    counts.oldest_ready_due = absl::FromUnixMillis(parked_.begin()->due_ms);
  } else if (counts.ready > 0 && cursor_.due_ms <= now_ms) {
    counts.oldest_ready_due = absl::FromUnixMillis(cursor_.due_ms);
  }
  return counts;
}

RocksDbJobStore::MemoryStats RocksDbJobStore::MemoryStatsForTesting() {
  absl::MutexLock lock(&mu_);
  MemoryStats stats;
  stats.window = WindowSizeLocked();
  stats.parked = parked_.size();
  stats.leased = leased_.size();
  stats.overlay = overlay_.size();
  stats.caught_up = cursor_.due_ms == INT64_MAX && cursor_.id == UINT64_MAX;
  stats.fresh_floor = fresh_floor_;
  return stats;
}

absl::Time RocksDbJobStore::NextWake() {
  const absl::Time due = NextDue();
  absl::MutexLock lock(&mu_);
  if (lease_deadlines_.empty()) return due;
  return std::min(due, lease_deadlines_.begin()->first);
}

absl::Time RocksDbJobStore::NextDue() {
  const int64_t now_ms = ToMillis(clock_.Now());
  absl::MutexLock lock(&mu_);
  // Everything beyond the window (parked or on disk) comes after every job in it.
  if (!scheduled_.empty()) return absl::FromUnixMillis(scheduled_.front().due_ms);
  int64_t due = INT64_MAX;
  if (auto it = parked_.lower_bound(QueuedJob{now_ms + 1, 0}); it != parked_.end()) due = it->due_ms;
  // Jobs on disk only are due at the cursor's time at the earliest (a time already past means
  // ready jobs, which the dispatcher leases without waiting for a due time).
  if (cursor_.due_ms > now_ms) due = std::min(due, cursor_.due_ms);
  return due == INT64_MAX ? absl::InfiniteFuture() : absl::FromUnixMillis(due);
}

absl::Status RocksDbJobStore::CompactForTesting() {
  Flush();
  rocksdb::CompactRangeOptions options;
  options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  for (rocksdb::ColumnFamilyHandle* handle : handles_) {
    RETURN_IF_ERROR(FromRocks(db_->CompactRange(options, handle, nullptr, nullptr), "compacting"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> RocksDbJobStore::HasDedupKeyForTesting(std::string_view dedup_key) {
  Flush();
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), dedup_cf_,
                               rocksdb::Slice(dedup_key.data(), dedup_key.size()), &value);
  if (s.IsNotFound()) return false;
  RETURN_IF_ERROR(FromRocks(s, "reading a dedup key"));
  return true;
}

}  // namespace hookrelay::collector
