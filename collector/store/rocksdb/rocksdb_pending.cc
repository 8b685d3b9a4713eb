// RocksDbJobStore, the order of pending jobs (see the header's "Memory and start-up"): the `due`
// and pending-index keys, the job and due-time counts (persisted and in memory), the window of
// queued jobs with its cursor and the pager that reads the next chunk from disk, and what is
// answered from them: Counts, NextDue, NextWake.

#include "collector/store/rocksdb/rocksdb_job_store.h"

#include <algorithm>
#include <optional>

#include "absl/hash/hash.h"

#include "rocksdb/iterator.h"
#include "collector/store/rocksdb/rocksdb_layout.h"
#include "collector/store/rocksdb/rocksdb_status.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

using rocksdb_internal::DecodeU64;
using rocksdb_internal::DueCountKey;
using rocksdb_internal::DueKeyBytes;
using rocksdb_internal::DueOf;
using rocksdb_internal::FromRocks;
using rocksdb_internal::DueValue;
using rocksdb_internal::QueueFields;
using rocksdb_internal::RecordQueueFields;
using rocksdb_internal::SplitDueValue;
using rocksdb_internal::IsFresh;
using rocksdb_internal::Malformed;
using rocksdb_internal::PendingKeyBytes;
using rocksdb_internal::SecondOf;
using rocksdb_internal::ToMillis;
using rocksdb_internal::U64Bytes;
using rocksdb_internal::kDeadCountKey;
using rocksdb_internal::kDueCf;
using rocksdb_internal::kJobCountKey;
using rocksdb_internal::kJobsCf;

}  // namespace

void RocksDbJobStore::PutJobKeys(int64_t due_ms, uint64_t id, uint64_t user_hash,
                                 std::string_view destination, std::string_view ordering_key,
                                 rocksdb::WriteBatch& batch) {
  std::string value;
  DueValue(destination, ordering_key, &value);
  batch.Put(due_cf_, DueKeyBytes(due_ms, id).slice(), value);
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

void RocksDbJobStore::ReadyQueues::PushHeap(const QueuedJob& job) {
  if (job.dest >= heaps_.size()) heaps_.resize(job.dest + 1);
  std::vector<QueuedJob>& heap = heaps_[job.dest];
  heap.push_back(job);
  std::push_heap(heap.begin(), heap.end(), LaterFirst());
}

bool RocksDbJobStore::ReadyQueues::Free(const QueuedJob& job) const {
  if (job.key == 0) return true;
  auto it = keys_.find(job.key);
  return it == keys_.end() || (it->second.busy == 0 && it->second.hold_until_ms == 0);
}

void RocksDbJobStore::ReadyQueues::Push(const QueuedJob& job) {
  ++size_;
  if (!Free(job)) {
    std::vector<QueuedJob>& held = keys_[job.key].held;
    held.push_back(job);
    std::push_heap(held.begin(), held.end(), LaterFirst());
    ++waiting_;
    return;
  }
  PushHeap(job);
}

void RocksDbJobStore::ReadyQueues::Acquire(uint64_t key, uint64_t id) {
  if (key == 0) return;
  Key& k = keys_[key];
  HOOKRELAY_CHECK(k.busy == 0 && k.hold_until_ms == 0, "a job leased while its key was not free");
  k.busy = id;
}

void RocksDbJobStore::ReadyQueues::Release(uint64_t key, uint64_t id) {
  if (key == 0) return;
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.busy != id) return;
  it->second.busy = 0;
  MaybeFree(key);
}

void RocksDbJobStore::ReadyQueues::Hold(uint64_t key, int64_t until_ms) {
  if (key == 0) return;
  Key& k = keys_[key];
  if (k.hold_until_ms != 0) holds_.erase({k.hold_until_ms, key});
  k.hold_until_ms = std::max<int64_t>(until_ms, 1);
  holds_.emplace(k.hold_until_ms, key);
}

bool RocksDbJobStore::ReadyQueues::EndHolds(int64_t now_ms) {
  bool ended = false;
  while (!holds_.empty() && holds_.begin()->first <= now_ms) {
    ended = true;
    const uint64_t key = holds_.begin()->second;
    holds_.erase(holds_.begin());
    auto it = keys_.find(key);
    if (it == keys_.end()) continue;
    it->second.hold_until_ms = 0;
    MaybeFree(key);
  }
  return ended;
}

int64_t RocksDbJobStore::ReadyQueues::NextHoldEnd() const {
  return holds_.empty() ? INT64_MAX : holds_.begin()->first;
}

void RocksDbJobStore::ReadyQueues::MaybeFree(uint64_t key) {
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.busy != 0 || it->second.hold_until_ms != 0) return;
  for (const QueuedJob& job : it->second.held) PushHeap(job);
  waiting_ -= it->second.held.size();
  keys_.erase(it);
}

int RocksDbJobStore::ReadyQueues::OldestHeap(absl::FunctionRef<bool(uint32_t)> eligible) const {
  int best = -1;
  for (size_t tag = 0; tag < heaps_.size(); ++tag) {
    const std::vector<QueuedJob>& heap = heaps_[tag];
    if (heap.empty() || !eligible(static_cast<uint32_t>(tag))) continue;
    if (best < 0 || heap.front() < heaps_[static_cast<size_t>(best)].front()) {
      best = static_cast<int>(tag);
    }
  }
  return best;
}

RocksDbJobStore::QueuedJob RocksDbJobStore::ReadyQueues::Oldest() const {
  const int tag = OldestHeap([](uint32_t) { return true; });
  std::optional<QueuedJob> oldest;
  if (tag >= 0) oldest = heaps_[static_cast<size_t>(tag)].front();
  if (waiting_ > 0) {
    for (const auto& [key, k] : keys_) {
      if (!k.held.empty() && (!oldest || k.held.front() < *oldest)) oldest = k.held.front();
    }
  }
  HOOKRELAY_CHECK(oldest.has_value(), "Oldest() of empty ready queues");
  return *oldest;
}

bool RocksDbJobStore::ReadyQueues::PopWithin(std::vector<size_t>& allowance,
                                             absl::FunctionRef<size_t(uint32_t)> ask,
                                             QueuedJob* out) {
  if (allowance.size() < heaps_.size()) {
    // kUnasked: the budget of that destination is asked when it first has a job at hand.
    allowance.resize(heaps_.size(), kUnasked);
  }
  for (;;) {
    const int tag = OldestHeap([&](uint32_t t) {
      if (allowance[t] == kUnasked) allowance[t] = t == 0 ? kUnasked - 1 : std::min(ask(t), kUnasked - 1);
      return allowance[t] > 0;
    });
    if (tag < 0) return false;
    std::vector<QueuedJob>& heap = heaps_[static_cast<size_t>(tag)];
    std::pop_heap(heap.begin(), heap.end(), LaterFirst());
    const QueuedJob job = heap.back();
    heap.pop_back();
    if (!Free(job)) {
      // Its key was taken after it was queued: it waits aside (no allowance spent).
      --size_;
      Push(job);
      continue;
    }
    --size_;
    --allowance[static_cast<size_t>(tag)];
    *out = job;
    return true;
  }
}

bool RocksDbJobStore::ReadyQueues::PopOldest(QueuedJob* out) {
  for (;;) {
    const int tag = OldestHeap([](uint32_t) { return true; });
    if (tag < 0) return false;
    std::vector<QueuedJob>& heap = heaps_[static_cast<size_t>(tag)];
    std::pop_heap(heap.begin(), heap.end(), LaterFirst());
    const QueuedJob job = heap.back();
    heap.pop_back();
    --size_;
    if (!Free(job)) {
      Push(job);
      continue;
    }
    *out = job;
    return true;
  }
}

void RocksDbJobStore::ReadyQueues::ShrinkHeap(uint32_t tag) {
  if (tag < heaps_.size()) heaps_[tag].shrink_to_fit();
}

void RocksDbJobStore::ReadyQueues::RemoveIf(absl::FunctionRef<bool(const QueuedJob&)> drop) {
  for (std::vector<QueuedJob>& heap : heaps_) {
    const size_t before = heap.size();
    heap.erase(std::remove_if(heap.begin(), heap.end(),
                              [&](const QueuedJob& job) { return drop(job); }),
               heap.end());
    if (heap.size() == before) continue;
    size_ -= before - heap.size();
    std::make_heap(heap.begin(), heap.end(), LaterFirst());
  }
  if (waiting_ == 0) return;
  for (auto& [key, k] : keys_) {
    const size_t before = k.held.size();
    k.held.erase(std::remove_if(k.held.begin(), k.held.end(),
                                [&](const QueuedJob& job) { return drop(job); }),
                 k.held.end());
    if (k.held.size() == before) continue;
    size_ -= before - k.held.size();
    waiting_ -= before - k.held.size();
    std::make_heap(k.held.begin(), k.held.end(), LaterFirst());
  }
}

void RocksDbJobStore::ReadyQueues::ForEach(absl::FunctionRef<void(const QueuedJob&)> f) const {
  for (const std::vector<QueuedJob>& heap : heaps_) {
    for (const QueuedJob& job : heap) f(job);
  }
  if (waiting_ == 0) return;
  for (const auto& [key, k] : keys_) {
    for (const QueuedJob& job : k.held) f(job);
  }
}

uint64_t RocksDbJobStore::OrderKey(uint32_t dest, std::string_view ordering_key) {
  if (ordering_key.empty()) return 0;
  return absl::HashOf(dest, absl::string_view(ordering_key.data(), ordering_key.size())) | 1;
}

uint32_t RocksDbJobStore::DestinationTag(std::string_view destination_id) {
  if (destination_id.empty()) return 0;
  const absl::string_view key(destination_id.data(), destination_id.size());
  absl::MutexLock lock(&tags_mu_);
  if (auto it = tags_.find(key); it != tags_.end()) return it->second;
  const auto tag = static_cast<uint32_t>(tag_names_.size());
  tags_.emplace(std::string(destination_id), tag);
  tag_names_.emplace_back(destination_id);
  return tag;
}

std::string RocksDbJobStore::DestinationOfTag(uint32_t tag) {
  absl::MutexLock lock(&tags_mu_);
  return tag < tag_names_.size() ? tag_names_[tag] : std::string();
}

void RocksDbJobStore::PushQueuedLocked(const QueuedJob& job, int64_t now_ms) {
  if (job.due_ms <= now_ms) {
    ready_.Push(job);
    return;
  }
  scheduled_.push_back(job);
  std::push_heap(scheduled_.begin(), scheduled_.end(), LaterFirst());
}

void RocksDbJobStore::QueueLocked(int64_t due_ms, uint64_t id, uint32_t dest, uint64_t key,
                                  int64_t now_ms, bool dirty, bool fresh) {
  QueuedJob job{due_ms, id, fresh};
  job.dest = dest;
  job.key = key;
  // The cursor whose part of the order it joins: its detached destination's own, or the window's
  // (see Detached), with that cursor's place in the fresh records.
  QueuedJob* cursor = &cursor_;
  uint64_t* fresh_cursor = &fresh_cursor_id_;
  if (!detached_.empty()) {
    if (auto it = detached_.find(dest); it != detached_.end()) {
      cursor = &it->second.from;
      fresh_cursor = &it->second.fresh_id;
    }
  }
  if (job < *cursor) {
    // A fresh record below the cursor is in memory: the pager's place in the ids moves past it
    // (publications come in id order, and no fresh record between is on disk only: its key
    // would be below this one's, hence below the cursor).
    if (fresh) *fresh_cursor = std::max(*fresh_cursor, id + 1);
    PushQueuedLocked(job, now_ms);
    // A window grown by held-back jobs (up to HeldWindowLimit()) is not shrunk for an append:
    // that would evict what the pager just brought in, at every append.
    const size_t limit =
        window_held_ ? HeldWindowLimit() : std::max<size_t>(options_.window_size, 2);
    if (WindowSizeLocked() > limit) ShrinkWindowLocked();
  } else if (dirty) {
    parked_.insert(job);
  }
  // Else its `due` key is written and at or above the cursor: the pager reads it in its turn.
}

void RocksDbJobStore::ShrinkWindowLocked() {
  const size_t window = std::max<size_t>(options_.window_size, 2);
  std::vector<QueuedJob> all;
  all.reserve(WindowSizeLocked());
  ready_.ForEach([&](const QueuedJob& job) { all.push_back(job); });
  all.insert(all.end(), scheduled_.begin(), scheduled_.end());
  const size_t keep = window / 2;
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end());
  // Keys below the lease floor stay: the cursor never goes below it.
  QueuedJob cut = std::max(all[keep], lease_floor_);
  cut.fresh = false;
  if (!(cut < cursor_)) return;
  // The lowest fresh record evicted is where the pager reads fresh records again.
  uint64_t fresh_from = fresh_cursor_id_;
  auto drop = [&](const QueuedJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (job < cut) return false;
    if (job.fresh) fresh_from = std::min(fresh_from, job.id);
    if (!detached_.empty()) {
      if (auto it = detached_.find(job.dest); it != detached_.end()) {
        it->second.from = std::min(it->second.from, QueuedJob{job.due_ms, job.id});
        if (job.fresh) it->second.fresh_id = std::min(it->second.fresh_id, job.id);
      }
    }
    // A retry not yet written has no `due` key to page it back in.
    if (overlay_.contains(job.id)) parked_.insert(job);
    return true;
  };
  ready_.RemoveIf(drop);
  scheduled_.erase(std::remove_if(scheduled_.begin(), scheduled_.end(), drop), scheduled_.end());
  std::make_heap(scheduled_.begin(), scheduled_.end(), LaterFirst());
  cursor_ = cut;
  fresh_cursor_id_ = fresh_from;
}

absl::Status RocksDbJobStore::MaybePageLocked(int64_t now_ms, size_t limit) {
  constexpr QueuedJob kEnd{INT64_MAX, UINT64_MAX};
  if (!(cursor_ < kEnd)) return absl::OkStatus();
  const size_t window = limit > 0 ? limit : std::max<size_t>(options_.window_size, 2);
  if (WindowSizeLocked() + page_chunk_ > window) return absl::OkStatus();
  if (detached_.empty()) {
    return PageLocked(&cursor_, &fresh_cursor_id_, [](uint32_t) { return true; }, now_ms);
  }
  // A detached destination's jobs are its own cursor's (PageDetachedLocked).
  return PageLocked(
      &cursor_, &fresh_cursor_id_,
      [this](uint32_t dest) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !detached_.contains(dest); },
      now_ms);
}

absl::Status RocksDbJobStore::PageLocked(QueuedJob* cursor, uint64_t* fresh_cursor,
                                         absl::FunctionRef<bool(uint32_t)> take, int64_t now_ms) {
  constexpr QueuedJob kEnd{INT64_MAX, UINT64_MAX};
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
    for (it->Seek(DueKeyBytes(cursor->due_ms, cursor->id).slice()); it->Valid(); it->Next()) {
      if (it->key().size() != 16) return Malformed(kDueCf, 0);
      QueuedJob job{static_cast<int64_t>(DecodeU64(it->key().data())),
                    DecodeU64(it->key().data() + 8)};
      if (n == page_chunk_) {
        next_due = job;
        break;
      }
      ++n;
      if (job.id > published_id_ || (!unpublished_.empty() && unpublished_.contains(job.id))) {
        continue;  // Queued by its publication.
      }
      // The value is the destination id and ordering key (DueValue; empty in keys written
      // before the destination was kept there).
      const QueueFields fields =
          SplitDueValue(std::string_view(it->value().data(), it->value().size()));
      job.dest = DestinationTag(fields.destination);
      if (!take(job.dest)) continue;  // another cursor's
      job.key = OrderKey(job.dest, fields.ordering_key);
      got.push_back(job);
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "paging in due jobs"));
  }
  // Fresh records below next_due, at most a chunk. Records rewritten by a retry (no longer
  // fresh) are stepped over; unpublished ones end the stream (their publication queues them).
  QueuedJob next_fresh = kEnd;
  uint64_t fresh_end = *fresh_cursor;  // Where the fresh stream stopped.
  const size_t keyed = got.size();
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, jobs_cf_));
    size_t n = 0;
    for (it->Seek(U64Bytes(*fresh_cursor).slice()); it->Valid(); it->Next()) {
      if (it->key().size() != 8) return Malformed(kJobsCf, 0);
      const uint64_t id = DecodeU64(it->key().data());
      fresh_end = id;
      if (id > published_id_) break;
      fresh_end = id + 1;
      if (!IsFresh(it->value())) continue;
      QueuedJob job{DueOf(it->value()), id, true};
      if (n == page_chunk_ || !(job < next_due)) {
        next_fresh = job;
        fresh_end = id;
        break;
      }
      ++n;
      const QueueFields fields = RecordQueueFields(it->value());
      job.dest = DestinationTag(fields.destination);
      if (!take(job.dest)) continue;  // another cursor's
      job.key = OrderKey(job.dest, fields.ordering_key);
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
  for (auto it = parked_.begin(); it != parked_.end() && *it < next;) {
    if (!take(it->dest)) {
      ++it;
      continue;
    }
    got.push_back(*it);
    it = parked_.erase(it);
  }
  std::sort(got.begin(), got.end());
  got.erase(std::unique(got.begin(), got.end(),
                        [](const QueuedJob& a, const QueuedJob& b) {
                          return a.due_ms == b.due_ms && a.id == b.id;
                        }),
            got.end());
  *cursor = next;
  *fresh_cursor = fresh_end;
  for (const QueuedJob& job : got) PushQueuedLocked(job, now_ms);
  return absl::OkStatus();
}

bool RocksDbJobStore::DetachHeldLocked(const std::vector<size_t>& allowance) {
  const size_t keep = std::max<size_t>(page_chunk_, 1);
  size_t evicted = 0;
  for (uint32_t tag = 1; tag < allowance.size(); ++tag) {
    if (allowance[tag] != 0 || ready_.SizeOf(tag) <= keep) continue;
    // Its oldest `keep` jobs stay (and none at or below a key of it ever leased leaves: see
    // dest_lease_floor_); the rest go back to disk only.
    std::vector<QueuedJob> jobs = *ready_.HeapOf(tag);
    std::nth_element(jobs.begin(), jobs.begin() + static_cast<std::ptrdiff_t>(keep - 1), jobs.end());
    QueuedJob floor = jobs[keep - 1];
    if (tag < dest_lease_floor_.size()) floor = std::max(floor, dest_lease_floor_[tag]);
    floor.fresh = false;
    auto [it, inserted] = detached_.try_emplace(tag);
    Detached& d = it->second;
    if (inserted) {
      // Everything of it beyond the window's cursor is on disk only already.
      d.from = QueuedJob{cursor_.due_ms, cursor_.id};
      d.fresh_id = fresh_cursor_id_;
    }
    ready_.RemoveIf([&](const QueuedJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (job.dest != tag || !(floor < job)) return false;
      d.from = std::min(d.from, QueuedJob{job.due_ms, job.id});
      if (job.fresh) d.fresh_id = std::min(d.fresh_id, job.id);
      // A retry not yet written has no `due` key to page it back in.
      if (overlay_.contains(job.id)) parked_.insert(job);
      ++evicted;
      return true;
    });
    ready_.ShrinkHeap(tag);
  }
  return evicted > 0;
}

bool RocksDbJobStore::DetachedWantsPageLocked(uint32_t tag, const Detached& d) const {
  constexpr QueuedJob kEnd{INT64_MAX, UINT64_MAX};
  return d.from < kEnd && ready_.SizeOf(tag) < std::max<size_t>(page_chunk_ / 2, 1) &&
         WindowSizeLocked() + page_chunk_ <= HeldWindowLimit();
}

absl::Status RocksDbJobStore::PageDetachedLocked(int64_t now_ms,
                                                 const std::vector<size_t>* allowance,
                                                 bool* moved) {
  for (auto& [tag, d] : detached_) {
    if (!DetachedWantsPageLocked(tag, d)) continue;
    // Within a Lease: only a destination not known to be out of budget.
    if (allowance != nullptr && tag < allowance->size() && (*allowance)[tag] == 0) continue;
    const uint32_t mine = tag;
    const QueuedJob before = d.from;
    RETURN_IF_ERROR(PageLocked(&d.from, &d.fresh_id,
                               [mine](uint32_t dest) { return dest == mine; }, now_ms));
    if (moved != nullptr && before < d.from) *moved = true;
  }
  return absl::OkStatus();
}

void RocksDbJobStore::EraseFromWindowLocked(const absl::flat_hash_set<uint64_t>& ids) {
  if (ids.empty()) return;
  ready_.RemoveIf([&](const QueuedJob& job) { return ids.contains(job.id); });
  scheduled_.erase(std::remove_if(scheduled_.begin(), scheduled_.end(),
                                  [&](const QueuedJob& job) { return ids.contains(job.id); }),
                   scheduled_.end());
  std::make_heap(scheduled_.begin(), scheduled_.end(), LaterFirst());
}

bool RocksDbJobStore::PromoteDueLocked(int64_t now_ms) {
  bool moved = false;
  while (!scheduled_.empty() && scheduled_.front().due_ms <= now_ms) {
    std::pop_heap(scheduled_.begin(), scheduled_.end(), LaterFirst());
    const QueuedJob job = scheduled_.back();
    scheduled_.pop_back();
    ready_.Push(job);
    moved = true;
  }
  return ready_.EndHolds(now_ms) || moved;
}

JobCounts RocksDbJobStore::Counts() {
  const absl::Time now = clock_.Now();
  const int64_t now_ms = ToMillis(now);
  absl::MutexLock lock(&mu_);
  // What fell due is made ready here as by Lease, and announced: the timer reads the next due
  // time after this and would otherwise never raise the signal for these jobs (a scrape of the
  // gauges between a retry's due time and the timer's wake held that retry back until some
  // later job woke the dispatcher).
  const bool expired = ExpireLeasesLocked(now);
  if (PromoteDueLocked(now_ms) || expired) ready_signal_->RaiseSoon();
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
    counts.oldest_ready_due = absl::FromUnixMillis(ready_.Oldest().due_ms);
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
  for (const auto& [tag, d] : detached_) {
    if (d.from.due_ms != INT64_MAX || d.from.id != UINT64_MAX) stats.caught_up = false;
  }
  stats.detached = detached_.size();
  stats.fresh_floor = fresh_floor_;
  return stats;
}

absl::Time RocksDbJobStore::NextWake() {
  const int64_t now_ms = ToMillis(clock_.Now());
  absl::MutexLock lock(&mu_);
  return NextWakeLocked(now_ms);
}

absl::Time RocksDbJobStore::NextWakeLocked(int64_t now_ms) {
  const absl::Time due = NextDueLocked(now_ms);
  if (lease_deadlines_.empty()) return due;
  return std::min(due, lease_deadlines_.begin()->first);
}

absl::Time RocksDbJobStore::NextDue() {
  const int64_t now_ms = ToMillis(clock_.Now());
  absl::MutexLock lock(&mu_);
  return NextDueLocked(now_ms);
}

absl::Time RocksDbJobStore::NextDueLocked(int64_t now_ms) {
  // A retry holding its key (per-key order) ends like a scheduled job's due time.
  const int64_t hold = ready_.NextHoldEnd();
  // Everything beyond the window (parked or on disk) comes after every job in it.
  if (!scheduled_.empty()) {
    return absl::FromUnixMillis(std::min(scheduled_.front().due_ms, hold));
  }
  int64_t due = hold;
  if (auto it = parked_.lower_bound(QueuedJob{now_ms + 1, 0}); it != parked_.end()) due = it->due_ms;
  // Jobs on disk only are due at the cursor's time at the earliest (a time already past means
  // ready jobs, which the dispatcher leases without waiting for a due time).
  if (cursor_.due_ms > now_ms) due = std::min(due, cursor_.due_ms);
  // A detached destination with few jobs in memory: its next chunk is paged by the next Lease.
  for (const auto& [tag, d] : detached_) {
    if (DetachedWantsPageLocked(tag, d)) due = std::min(due, std::max(d.from.due_ms, now_ms));
  }
  return due == INT64_MAX ? absl::InfiniteFuture() : absl::FromUnixMillis(due);
}

}  // namespace hookrelay::collector
