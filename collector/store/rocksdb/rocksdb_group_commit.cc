// RocksDbJobStore, the write path (see the header's "Group commit"): the preparer's queue, the
// preparer thread (dedup check, ids, one WriteBatch per group) and the writer thread (one write
// and fsync per group, then publication and callbacks), barriers and pauses, and the exclusive
// ops that run between two groups (deletions, audience commits) with their writes of new jobs.

#include "collector/store/rocksdb/rocksdb_job_store.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "rocksdb/perf_level.h"
#include "collector/store/rocksdb/rocksdb_group_commit.h"
#include "collector/store/rocksdb/rocksdb_layout.h"
#include "collector/store/rocksdb/rocksdb_status.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;
using rocksdb_internal::DecodeU64;
using rocksdb_internal::DueKeyBytes;
using rocksdb_internal::DueOf;
using rocksdb_internal::DueValue;
using rocksdb_internal::QueueFields;
using rocksdb_internal::RecordQueueFields;
using rocksdb_internal::EncodeJobHeader;
using rocksdb_internal::EncodeJobValue;
using rocksdb_internal::kUserHeaderSize;
using rocksdb_internal::FromRocks;
using rocksdb_internal::LogKey;
using rocksdb_internal::PendingKeyBytes;
using rocksdb_internal::ProfileKey;
using rocksdb_internal::SecondOf;
using rocksdb_internal::SeenHash;
using rocksdb_internal::SeenKey;
using rocksdb_internal::ToMillis;
using rocksdb_internal::U64Bytes;
using rocksdb_internal::Unshared;
using rocksdb_internal::UserHash;
using rocksdb_internal::kFreshDueKey;
using rocksdb_internal::kFreshFloorKey;
using rocksdb_internal::kNextIdKey;

// Puts an appended job's record, gathered from its parts: the header, then the job's bytes with
// its id and due time in their places (no copy of the job before the batch's own).
void PutNewJobRecord(rocksdb::ColumnFamilyHandle* jobs_cf, uint64_t id, int64_t due_ms,
                     uint64_t user_hash, bool fresh, const NewJob& job, rocksdb::WriteBatch& batch) {
  char header[kUserHeaderSize];
  EncodeJobHeader(due_ms, user_hash, fresh, header);
  char id_field[NewJob::kFieldBytes];
  char due_field[NewJob::kFieldBytes];
  const std::string_view head = job.head();
  const std::string_view tail = job.tail();
  const rocksdb::Slice value[] = {
      rocksdb::Slice(header, sizeof(header)),
      rocksdb::Slice(id_field, NewJob::IdField(id, id_field)),
      rocksdb::Slice(head.data(), head.size()),
      rocksdb::Slice(due_field, NewJob::DueField(due_ms, due_field)),
      rocksdb::Slice(tail.data(), tail.size()),
  };
  const U64Bytes key_bytes(id);
  const rocksdb::Slice key = key_bytes.slice();
  batch.Put(jobs_cf, rocksdb::SliceParts(&key, 1), rocksdb::SliceParts(value, 5));
}

}  // namespace

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
  // RocksDB counts every key comparison in a thread-local PerfContext unless told not to; no one
  // reads those counts here.
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  using Kind = WriteOp::Kind;
  std::unique_ptr<Group> spare;
  const Group* last = nullptr;  // The group handed to the writer most recently.
  LingerState linger;
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
      MaybeLingerLocked(linger);
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
      acked_appends_.store(0, std::memory_order_relaxed);
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

bool RocksDbJobStore::WriterIdleForTesting() {
  absl::MutexLock lock(&pipe_mu_);
  return unwritten_ == 0;
}

bool RocksDbJobStore::LingerDoneLocked(size_t appends_expected) const {
  if (stopping_) return true;
  using Kind = WriteOp::Kind;
  size_t n = 0;
  size_t appends = 0;
  for (const WriteOp& op : queue_) {
    switch (op.kind) {
      case Kind::kAppend:
        ++appends;
        for (const AppendItem& item : op.items) n += item.jobs.size();
        break;
      case Kind::kDeleteJob:
      case Kind::kBury:
        if (op.order_key != 0) return true;  // The key's next job waits for this write.
        ++n;
        break;
      case Kind::kPutJob:
        ++n;
        break;
      case Kind::kBarrier:
      case Kind::kPause:
      case Kind::kExclusive:
        return true;
    }
    if (n >= options_.linger_jobs) return true;
  }
  return appends >= appends_expected;
}

void RocksDbJobStore::MaybeLingerLocked(LingerState& state) {
  // The clients answered since the last group was taken may each send again (a closed loop sends
  // exactly those): once that many appends are queued, no one else is likely to come soon.
  const size_t expected = std::max<size_t>(2, acked_appends_.load(std::memory_order_relaxed));
  if (options_.commit_linger <= absl::ZeroDuration() || LingerDoneLocked(expected)) return;
  {
    // A group still being written gathers the next one's work by itself.
    absl::MutexLock lock(&pipe_mu_);
    if (unwritten_ > 0) return;
  }
  if (state.skips > 0) {
    --state.skips;
    return;
  }
  const size_t before = queue_.size();
  auto done = [this, expected]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    return LingerDoneLocked(expected);
  };
  queue_mu_.AwaitWithTimeout(absl::Condition(&done), options_.commit_linger);
  if (queue_.size() > before) {
    state.backoff = 0;
    if (metrics_.lingers_joined != nullptr) metrics_.lingers_joined->Increment();
  } else {
    state.backoff = std::min(std::max(1, state.backoff * 2), 256);
    state.skips = state.backoff;
    if (metrics_.lingers_alone != nullptr) metrics_.lingers_alone->Increment();
  }
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
      for (const NewJob& job : item.jobs) {
        const uint64_t id = next_id_++;
        const uint64_t job_user =
            job.user_id() == item.user_id ? user_hash : UserHash(job.user_id());
        PutNewJobRecord(jobs_cf_, id, now_ms, job_user, group.fresh, job, group.batch);
        if (group.fresh) {
          // No `due` key: the pager finds a fresh record by its id.
          if (job_user != 0) {
            group.batch.Put(users_cf_, PendingKeyBytes(job_user, id).slice(), rocksdb::Slice());
          }
        } else {
          PutJobKeys(now_ms, id, job_user, job.destination_id(), job.ordering_key(), group.batch);
        }
        group.new_ids.push_back(id);
        group.new_tags.push_back(DestinationTag(job.destination_id()));
        group.new_keys.push_back(OrderKey(group.new_tags.back(), job.ordering_key()));
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
          const QueueFields fields = RecordQueueFields(it->second.value);
          DueValue(fields.destination, fields.ordering_key, &key_scratch_);
          group.batch.Put(due_cf_, DueKeyBytes(new_due, op.id).slice(), key_scratch_);
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
  ready_.ForEach([&](const QueuedJob& job) {
    if (job.fresh) floor = std::min(floor, job.id);
  });
  for (const QueuedJob& job : scheduled_) {
    if (job.fresh) floor = std::min(floor, job.id);
  }
  for (const auto& [id, info] : leased_) {
    if (info.fresh) floor = std::min(floor, id);
  }
  for (uint64_t id : settling_) floor = std::min(floor, id);
  // A detached destination's fresh records from its own place on are on disk only.
  for (const auto& [tag, d] : detached_) floor = std::min(floor, d.fresh_id);
  for (const auto& [id, record] : overlay_) floor = std::min(floor, id);
  if (floor <= fresh_floor_) return;
  // If this write fails, the floor on disk stays lower: only more records are stepped over.
  fresh_floor_ = floor;
  group.batch.Put(meta_cf_, kFreshFloorKey, U64Bytes(floor).slice());
}

void RocksDbJobStore::WriteLoop() {
  pthread_setname_np(pthread_self(), "jobstore-write");
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);  // as in PrepareLoop
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

  bool freed = false;
  // Publish. On failure the disk is unchanged: appends report the error; settled jobs keep their
  // in-memory state (and overlay records), so this process still treats them right.
  if (group.status.ok()) {
    for (uint64_t seen : group.seen_hashes) {
      seen_cache_[seen & (kSeenCacheSlots - 1)].store(seen, std::memory_order_relaxed);
    }
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < group.new_ids.size(); ++i) {
      QueueLocked(group.now_ms, group.new_ids[i], group.new_tags[i], group.new_keys[i], group.now_ms,
                  /*dirty=*/false, group.fresh);
    }
    if (!group.new_ids.empty()) {
      published_id_ = std::max(published_id_, group.new_ids.back());
      CountJobLocked(group.now_ms, static_cast<int64_t>(group.new_ids.size()));
    }
    for (const WriteOp& op : group.ops) {
      // A written completion or burial frees its key (per-key order): the next job of the key
      // may go now that a crash can no longer bring this one back.
      if (op.order_key != 0 && (op.kind == Kind::kDeleteJob || op.kind == Kind::kBury)) {
        ready_.Release(op.order_key, op.id);
        freed = true;
      }
      if (op.kind != Kind::kPutJob || op.seq == 0) continue;
      auto it = overlay_.find(op.id);
      if (it != overlay_.end() && it->second.seq == op.seq) {
        // Its `due` key is written: a parked entry is found by the pager from now on.
        if (!parked_.empty()) parked_.erase(QueuedJob{DueOf(it->second.value), op.id});
        overlay_.erase(it);
      }
    }
  }
  if (group.status.ok() && (!group.new_ids.empty() || freed)) ready_signal_->Raise();
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
      acked_appends_.fetch_add(1, std::memory_order_relaxed);
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

void RocksDbJobStore::RunExclusive(std::function<void()> fn) {
  absl::Notification done;
  WriteOp op;
  op.kind = WriteOp::Kind::kExclusive;
  op.run = std::move(fn);
  op.notify = &done;
  Enqueue(std::move(op));
  done.WaitForNotification();
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
    PutJobKeys(now_ms, id, UserHash(job.user_id()), job.destination_id(), job.ordering_key(),
               batch);
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
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint32_t tag = DestinationTag(jobs[i].destination_id());
      QueueLocked(now_ms, ids[i], tag, OrderKey(tag, jobs[i].ordering_key()), now_ms,
                  /*dirty=*/false);
    }
    if (!ids.empty()) {
      CountJobLocked(now_ms, static_cast<int64_t>(ids.size()));
      published_id_ = std::max(published_id_, ids.back());
    }
  }
  if (!ids.empty()) ready_signal_->Raise();
  return absl::OkStatus();
}

}  // namespace hookrelay::collector
