// RocksDbJobStore, dead letters: ListDead pages through the `dead` family; Replay moves the
// matching dead letters back to pending jobs, due now, writing while the group commit is paused.

#include "collector/store/rocksdb/rocksdb_job_store.h"

#include "absl/cleanup/cleanup.h"
#include "rocksdb/iterator.h"
#include "collector/store/rocksdb/rocksdb_layout.h"
#include "collector/store/rocksdb/rocksdb_status.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;
using rocksdb_internal::DeadIndexKey;
using rocksdb_internal::DecodeU64;
using rocksdb_internal::EncodeJobValue;
using rocksdb_internal::FromRocks;
using rocksdb_internal::Malformed;
using rocksdb_internal::SecondOf;
using rocksdb_internal::ToMillis;
using rocksdb_internal::U64Bytes;
using rocksdb_internal::UserHash;
using rocksdb_internal::kAdminChunk;
using rocksdb_internal::kDeadCf;

bool MatchesDead(const Job& job, const DeadFilter& filter) {
  if (!filter.destination_id.empty() && job.destination_id() != filter.destination_id) {
    return false;
  }
  const absl::Time dead_at = absl::FromUnixMillis(job.dead_at_unix_ms());
  return dead_at >= filter.from && dead_at < filter.to;
}

}  // namespace

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
  std::vector<uint32_t> tags;  // Parallel to ids.
  std::vector<uint64_t> keys;  // Parallel to ids: ordering keys.
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
    for (size_t i = 0; i < ids.size(); ++i) {
      QueueLocked(now_ms, ids[i], tags[i], keys[i], now_ms, /*dirty=*/false);
    }
    CountJobLocked(now_ms, n);
    dead_count_ -= n;
    replayed += ids.size();
    ids.clear();
    tags.clear();
    keys.clear();
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
    PutJobKeys(now_ms, job.id(), UserHash(job.user_id()), job.destination_id(),
               job.ordering_key(), batch);
    tags.push_back(DestinationTag(job.destination_id()));
    keys.push_back(OrderKey(tags.back(), job.ordering_key()));
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
  if (replayed > 0) ready_signal_->Raise();
  return replayed;
}

}  // namespace hookrelay::collector
