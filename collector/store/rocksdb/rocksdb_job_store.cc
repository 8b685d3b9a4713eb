// RocksDbJobStore, the core (see the header for the other parts): Open (the DB and its column
// families, then the in-memory state rebuilt from the persisted counters and the first page of
// the due order), the one-time conversion of an older data dir, the stored configuration, the
// destructor and the test hooks.

#include "collector/store/rocksdb/rocksdb_job_store.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <system_error>

#include "absl/memory/memory.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rocksdb/cache.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "collector/store/rocksdb/rocksdb_group_commit.h"
#include "collector/store/rocksdb/rocksdb_layout.h"
#include "collector/store/rocksdb/rocksdb_options.h"
#include "collector/store/rocksdb/rocksdb_status.h"
#include "common/check.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;
using rocksdb_internal::DecodeU64;
using rocksdb_internal::DueCountKey;
using rocksdb_internal::DueOf;
using rocksdb_internal::ErrorKind;
using rocksdb_internal::FromRocks;
using rocksdb_internal::HeaderSize;
using rocksdb_internal::QueueFields;
using rocksdb_internal::RecordQueueFields;
using rocksdb_internal::Int64Add;
using rocksdb_internal::LogKey;
using rocksdb_internal::MakeDbOptions;
using rocksdb_internal::MakeDedupOptions;
using rocksdb_internal::MakeDueOptions;
using rocksdb_internal::MakeJobsOptions;
using rocksdb_internal::MakeProfileOptions;
using rocksdb_internal::MakeSmallOptions;
using rocksdb_internal::MakeUsersOptions;
using rocksdb_internal::Malformed;
using rocksdb_internal::SecondOf;
using rocksdb_internal::ToMillis;
using rocksdb_internal::U64Bytes;
using rocksdb_internal::Unshared;
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
using rocksdb_internal::kProfilesCf;
using rocksdb_internal::kUsersCf;

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
  if (options.lease_duration <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job store: lease_duration must be positive, got ",
                     absl::FormatDuration(options.lease_duration)));
  }
  if (options.commit_linger < absl::ZeroDuration() || options.commit_linger > absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job store: commit_linger must be between 0s and 1s, got ",
                     absl::FormatDuration(options.commit_linger)));
  }
  options.max_commit_batch = std::max<size_t>(options.max_commit_batch, 1);
  options.linger_jobs = std::max<size_t>(options.linger_jobs, 1);
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
  store->ready_signal_ = std::make_unique<ReadySignal>(
      store->clock_, [raw = store.get()] { return raw->NextWake(); });
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
  if (ready_signal_) ready_signal_->Stop();  // No ready call and no timer from here on.
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
    auto& lingers = prometheus::BuildCounter()
                        .Name("hookrelay_store_commit_lingers_total")
                        .Help("Group commits that waited for more work (--commit_linger), by "
                              "result: joined (more came) or alone")
                        .Register(registry);
    metrics_.lingers_joined = &lingers.Add({{"result", "joined"}});
    metrics_.lingers_alone = &lingers.Add({{"result", "alone"}});
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
      const QueueFields fields = RecordQueueFields(it->value());
      PutJobKeys(DueOf(it->value()), id, user_hash, fields.destination, fields.ordering_key, batch);
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

absl::Status RocksDbJobStore::FlushAppendOnly(rocksdb::ColumnFamilyHandle* family,
                                              std::string_view what) {
  // Reads of an append-only family come from SST files: its vector memtable would be sorted on
  // every read. The flush is bounded by the memtable's size (8 or 32 MB).
  rocksdb::FlushOptions flush;
  flush.wait = true;
  flush.allow_write_stall = true;
  return FromRocks(db_->Flush(flush, family), what);
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

void RocksDbJobStore::SetReadyCallback(std::function<void()> ready) {
  ready_signal_->Set(std::move(ready));
}

}  // namespace hookrelay::collector
