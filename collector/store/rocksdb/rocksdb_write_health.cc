// RocksDbJobStore, write health (see the header's "A full disk or an I/O error"): a failed write
// marks the store unwritable (metrics, the callback, one log line), and the recovery thread
// resumes RocksDB and probes the disk with growing pauses until a write succeeds, then requeues
// the settlements that were deferred meanwhile.

#include "collector/store/rocksdb/rocksdb_job_store.h"

#include <pthread.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "collector/store/rocksdb/rocksdb_layout.h"
#include "collector/store/rocksdb/rocksdb_status.h"
#include "common/log.h"

namespace hookrelay::collector {
namespace {

using rocksdb_internal::ErrorKind;
using rocksdb_internal::ToMillis;
using rocksdb_internal::U64Bytes;
using rocksdb_internal::kProbeKey;

// What callers are told when the store cannot write: the kind, never a file path.
const char* ErrorText(std::string_view kind) {
  if (kind == "no_space") return "no space left on the collector's disk";
  if (kind == "corruption") return "the collector's store reports corruption";
  if (kind == "io_error") return "the collector's disk reports I/O errors";
  return "the collector's store cannot write";
}

}  // namespace

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

}  // namespace hookrelay::collector
