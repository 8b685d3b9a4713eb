// RocksDbJobStore, leases and settlements: Lease takes ready jobs from the window and reads their
// records; Complete, Retry and Bury end a lease and queue their write for the next group commit,
// applying their effect in memory at once. Leases are memory-only (an epoch persisted per Open
// keeps them unique across restarts).

#include "collector/store/rocksdb/rocksdb_job_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collector/store/rocksdb/rocksdb_layout.h"
#include "collector/store/rocksdb/rocksdb_status.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;
using rocksdb_internal::DeadIndexKey;
using rocksdb_internal::DecodeU64;
using rocksdb_internal::DueOf;
using rocksdb_internal::EncodeJobValue;
using rocksdb_internal::FromRocks;
using rocksdb_internal::HeaderSize;
using rocksdb_internal::Malformed;
using rocksdb_internal::ParseJobValue;
using rocksdb_internal::ToMillis;
using rocksdb_internal::U64Bytes;
using rocksdb_internal::UserHash;
using rocksdb_internal::kJobsCf;
using rocksdb_internal::kLeaseEpochKey;
using rocksdb_internal::kUserHeaderSize;

// 2^40 leases per epoch: over 60 days at 200k leases/s before the epoch has to move on.
constexpr int kLeaseEpochShift = 40;
constexpr uint64_t kLeaseCounterLimit = uint64_t{1} << kLeaseEpochShift;

}  // namespace

bool RocksDbJobStore::ExpireLeasesLocked(absl::Time now) {
  bool expired = false;
  while (!lease_deadlines_.empty() && lease_deadlines_.begin()->first <= now) {
    expired = true;
    const uint64_t id = lease_deadlines_.begin()->second;
    lease_deadlines_.erase(lease_deadlines_.begin());
    auto it = leased_.find(id);
    HOOKRELAY_CHECK(it != leased_.end(), "a lease deadline without its lease");
    const int64_t due_ms = it->second.due_ms;
    const bool fresh = it->second.fresh;
    const uint32_t dest = it->second.dest;
    const uint64_t key = it->second.key;
    leased_.erase(it);
    ready_.Release(key, id);
    // A job purged while leased has no record left: it ends here.
    if (!purged_leased_.empty() && purged_leased_.erase(id) > 0) {
      CountJobLocked(due_ms, -1);
      continue;
    }
    // A leased job was due when leased, so it goes back to ready at its old place in line (below
    // the lease floor, hence below the cursor).
    QueuedJob back{due_ms, id, fresh};
    back.dest = dest;
    back.key = key;
    ready_.Push(back);
  }
  return expired;
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

absl::StatusOr<std::vector<LeasedJob>> RocksDbJobStore::Lease(size_t max, LeaseBudget budget) {
  std::vector<LeasedJob> out;
  if (max == 0) return out;
  const absl::Time now = clock_.Now();
  const absl::Time deadline = now + options_.lease_duration;

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
    if (paged.ok() && !detached_.empty()) paged = PageDetachedLocked(now_ms);
    picks.reserve(std::min(max, ready_.size()));
    // Chunks paged in by this call while looking for a job within budget: bounded, so that a
    // long stretch of held-back jobs on disk does not hold mu_ (and every append's publication)
    // for long; the rest is paged by the next call, which the ready signal asks for.
    int pages = 0;
    constexpr int kMaxPagesPerLease = 64;
    // Each destination's budget, asked when one of its jobs is first at hand.
    std::vector<size_t> allowance;
    auto ask = [&](uint32_t tag) { return budget(DestinationOfTag(tag)); };
    while (picks.size() < max && paged.ok()) {
      QueuedJob job;
      if (!ready_.PopWithin(allowance, ask, &job)) {
        // Nothing within budget in the window: page in more while the next keys on disk may be
        // due, up to HeldWindowLimit() (held-back jobs do not stop the pager).
        if (++pages > kMaxPagesPerLease) {
          ready_signal_->RaiseSoon();
          break;
        }
        if (!detached_.empty()) {
          // A detached destination with budget that ran out of jobs in memory pages its own.
          bool moved = false;
          paged = PageDetachedLocked(now_ms, &allowance, &moved);
          if (!paged.ok()) break;
          if (moved) continue;
        }
        const QueuedJob before = cursor_;
        if (now_ms < cursor_.due_ms) break;
        // A full window of held-back jobs: the destinations holding more than a chunk of them
        // are detached first (their jobs leave memory), so that held jobs grow the window past
        // its size only when spread over many destinations.
        if (WindowSizeLocked() + page_chunk_ > std::max<size_t>(options_.window_size, 2) &&
            DetachHeldLocked(allowance)) {
          continue;
        }
        paged = MaybePageLocked(now_ms, HeldWindowLimit());
        if (before < cursor_) {
          window_held_ = window_held_ || WindowSizeLocked() > std::max<size_t>(options_.window_size, 2);
          continue;
        }
        // No room: the window is full of jobs held back (or the disk holds no more), none of
        // their destinations with more than a chunk of them to detach (above). Past
        // HeldWindowLimit() of them, the oldest go out anyway (the dispatcher puts them back,
        // due later, which moves them out of the window) so that jobs behind them are reached.
        const QueuedJob kEnd{INT64_MAX, UINT64_MAX};
        if (ready_.empty() || !(cursor_ < kEnd) ||
            WindowSizeLocked() + page_chunk_ <= HeldWindowLimit()) {
          break;
        }
        if (!ready_.PopOldest(&job)) break;
      }
      if (window_held_ && WindowSizeLocked() <= std::max<size_t>(options_.window_size, 2)) {
        window_held_ = false;
      }
      const uint64_t lease = NextLeaseLocked();
      leased_[job.id] = {lease, deadline, job.due_ms, 0, job.fresh, job.dest, job.key};
      ready_.Acquire(job.key, job.id);
      lease_deadlines_.emplace(deadline, job.id);
      lease_floor_ = std::max(lease_floor_, QueuedJob{job.due_ms, job.id + 1});
      if (job.dest >= dest_lease_floor_.size()) dest_lease_floor_.resize(job.dest + 1, QueuedJob{0, 0});
      dest_lease_floor_[job.dest] =
          std::max(dest_lease_floor_[job.dest], QueuedJob{job.due_ms, job.id + 1});
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
  std::vector<std::pair<const Pick*, int64_t>> held;
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
    // A job of a key whose retry holds it (a record from before a restart: this process's own
    // retries hold the key in memory): back in line, and the key waits for the hold's end.
    if (pick.job.key != 0 && leased.job.hold_until_unix_ms() > ToMillis(now)) {
      held.emplace_back(&pick, leased.job.hold_until_unix_ms());
      out.pop_back();
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
    ready_.Release(pick.job.key, pick.job.id);
    if (back_to_ready) ready_.Push(pick.job);
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
  for (const auto& [pick, until_ms] : held) {
    ready_.Hold(pick->job.key, until_ms);
    release(*pick, /*back_to_ready=*/true);
  }
  // The user hash, for the pending-index key that the job's settlement deletes.
  for (size_t j = 0; j < out.size(); ++j) {
    auto it = leased_.find(out[j].job.id());
    if (it != leased_.end() && it->second.lease == out[j].lease) {
      it->second.user_hash = user_hashes[j];
    }
  }
  // New lease deadlines, jobs promoted, holds found: the ready signal's timer looks again if
  // that moved its wake earlier (new leases end after those already running).
  if (!out.empty() || !held.empty()) ready_signal_->Reschedule(NextWakeLocked(ToMillis(now)));
  return out;
}

std::vector<absl::StatusOr<absl::Time>> RocksDbJobStore::ExtendLeases(
    const std::vector<std::pair<uint64_t, uint64_t>>& leases) {
  std::vector<absl::StatusOr<absl::Time>> out;
  out.reserve(leases.size());
  const absl::Time now = clock_.Now();
  const absl::Time deadline = now + options_.lease_duration;
  std::vector<std::pair<size_t, LeaseCheck>> refused;
  absl::Time next_wake;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [job_id, lease] : leases) {
      auto it = leased_.find(job_id);
      // A lease past its deadline has run out, noticed or not: too late to extend.
      if (it == leased_.end() || it->second.lease != lease || it->second.deadline <= now) {
        refused.emplace_back(out.size(),
                             it == leased_.end() ? LeaseCheck::kNotLeased : LeaseCheck::kOtherLease);
        out.push_back(absl::Time());
        continue;
      }
      lease_deadlines_.erase({it->second.deadline, job_id});
      it->second.deadline = std::max(it->second.deadline, deadline);
      lease_deadlines_.emplace(it->second.deadline, job_id);
      out.push_back(it->second.deadline);
    }
    next_wake = NextWakeLocked(ToMillis(now));
  }
  for (const auto& [i, check] : refused) out[i] = RefusedLease(leases[i].first, leases[i].second, check);
  // The earliest lease expiry moved, later: the timer is woken only if its wake moved earlier.
  if (!leases.empty()) ready_signal_->Reschedule(next_wake);
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

absl::Status RocksDbJobStore::CompleteJob(uint64_t job_id, uint64_t lease) {
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
      op.order_key = info.key;  // Its key stays taken until this is written.
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
    if (mine) ready_.Release(info->key, job_id);
    if (mine && read_error) {
      QueuedJob back{info->due_ms, job_id, info->fresh};
      back.dest = info->dest;
      back.key = info->key;
      ready_.Push(back);
    } else if (mine && (purged || !not_found)) {
      // Purged while leased, or broken. (Missing otherwise: its deletion counts it.)
      CountJobLocked(info->due_ms, -1);
    }
    return status;
  }
  return job;
}

absl::Status RocksDbJobStore::RetryJob(uint64_t job_id, uint64_t lease, absl::Time not_before,
                                      const hookrelay::v1::Attempt& attempt) {
  LeaseInfo info;
  ASSIGN_OR_RETURN(Job job, BeginSettle(job_id, lease, &info));
  const int64_t now_ms = ToMillis(clock_.Now());
  RecordAttempt(attempt, now_ms, job);
  // A job of a key keeps its place, first of its key, and holds the key until its time.
  const bool keyed = info.key != 0;
  const int64_t not_before_ms = ToMillis(not_before);
  if (keyed) {
    job.set_hold_until_unix_ms(not_before_ms > now_ms ? not_before_ms : 0);
  } else {
    job.set_due_unix_ms(not_before_ms);
  }
  std::string value;
  EncodeJobValue(job, &value);

  absl::MutexLock lock(&mu_);
  if (settling_.erase(job_id) == 0) {
    ready_.Release(info.key, job_id);
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
  if (keyed) {
    if (not_before_ms > now_ms) ready_.Hold(info.key, not_before_ms);
    ready_.Release(info.key, job_id);
  }
  QueueLocked(job.due_unix_ms(), job_id, info.dest, info.key, now_ms, /*dirty=*/true);
  WriteOp op;
  op.kind = WriteOp::Kind::kPutJob;
  op.id = job_id;
  op.seq = seq;
  op.due_ms = info.due_ms;
  op.fresh = info.fresh;
  Enqueue(std::move(op));
  if (keyed ? not_before_ms <= now_ms : job.due_unix_ms() <= now_ms) {
    ready_signal_->RaiseSoon();  // Ready again at once.
  } else {
    ready_signal_->Reschedule();  // A new due time.
  }
  return absl::OkStatus();
}

absl::Status RocksDbJobStore::BuryJob(uint64_t job_id, uint64_t lease, std::string_view reason,
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
  op.order_key = info.key;  // Its key stays taken until this is written.
  job.set_hold_until_unix_ms(0);
  job.SerializeToString(&op.value);
  if (!job.user_id().empty()) op.index_key = DeadIndexKey(job.user_id(), job.source_id(), job_id);
  absl::MutexLock lock(&mu_);
  if (settling_.erase(job_id) == 0) {
    ready_.Release(info.key, job_id);
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

void RocksDbJobStore::Settle(std::vector<Settlement> batch, SettleCallback done) {
  std::vector<absl::Status> statuses;
  statuses.reserve(batch.size());
  for (Settlement& s : batch) {
    switch (s.kind) {
      case Settlement::Kind::kComplete:
        statuses.push_back(CompleteJob(s.job_id, s.lease));
        break;
      case Settlement::Kind::kRetry:
        statuses.push_back(RetryJob(s.job_id, s.lease, s.not_before, s.attempt));
        break;
      case Settlement::Kind::kBury:
        statuses.push_back(BuryJob(s.job_id, s.lease, s.reason, s.attempt));
        break;
    }
  }
  std::move(done)(std::move(statuses));
}

}  // namespace hookrelay::collector
