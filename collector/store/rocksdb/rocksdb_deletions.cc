// RocksDbJobStore, the per-user index and deletions (SPEC §6.1; see the header): the sources a
// user was seen in, and ApplyDeletion, which purges a user's pending jobs, dead letters, profiles
// and memberships and queues the notifications in one write, as an exclusive op. The index is
// written by the group commit (rocksdb_group_commit.cc) and by Bury.

#include "collector/store/rocksdb/rocksdb_job_store.h"

#include <algorithm>

#include "rocksdb/iterator.h"
#include "collector/store/rocksdb/rocksdb_layout.h"
#include "collector/store/rocksdb/rocksdb_status.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;
using rocksdb_internal::AudienceKey;
using rocksdb_internal::DeadIndexPrefix;
using rocksdb_internal::DecodeU64;
using rocksdb_internal::DeletionKey;
using rocksdb_internal::DueOf;
using rocksdb_internal::FromRocks;
using rocksdb_internal::IsFresh;
using rocksdb_internal::Malformed;
using rocksdb_internal::MemberKey;
using rocksdb_internal::ParseJobValue;
using rocksdb_internal::PendingKeyBytes;
using rocksdb_internal::ProfileKey;
using rocksdb_internal::RequestKey;
using rocksdb_internal::SecondOf;
using rocksdb_internal::SeenHash;
using rocksdb_internal::SeenKey;
using rocksdb_internal::SeenPrefix;
using rocksdb_internal::ToMillis;
using rocksdb_internal::U64Bytes;
using rocksdb_internal::UserHash;
using rocksdb_internal::kDeletionsCf;
using rocksdb_internal::kJobsCf;
using rocksdb_internal::kUsersCf;

}  // namespace

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
      // In the window if below the cursor, or below a detached destination's own cursor (an id
      // not in the window is passed over by the erase).
      if (QueuedJob{due_ms, p.id} < cursor_ || !detached_.empty()) from_window.insert(p.id);
    }
    EraseFromWindowLocked(from_window);
    dead_count_ -= static_cast<int64_t>(dead);
    for (size_t i = 0; i < new_ids.size(); ++i) {
      const uint32_t tag = DestinationTag(plan.notifications[i].destination_id());
      QueueLocked(now_ms, new_ids[i], tag, OrderKey(tag, plan.notifications[i].ordering_key()),
                  now_ms, /*dirty=*/false);
    }
    if (!new_ids.empty()) {
      CountJobLocked(now_ms, static_cast<int64_t>(new_ids.size()));
      published_id_ = std::max(published_id_, new_ids.back());
    }
  }
  if (!new_ids.empty()) ready_signal_->Raise();  // The notifications are ready.
  for (const std::string& source : record.source_ids()) {
    const uint64_t seen = SeenHash(user, source);
    seen_cache_[seen & (kSeenCacheSlots - 1)].store(0, std::memory_order_relaxed);
  }
  outcome.record = record;
  outcome.created = true;
  return outcome;
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

}  // namespace hookrelay::collector
