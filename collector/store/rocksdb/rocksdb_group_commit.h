// RocksDbJobStore's group commit (rocksdb_group_commit.cc): one group of writes, handed from the
// preparer thread to the writer thread. Internal to the engine: included by the files that
// handle groups (the write path, and the destructor that frees the last ones).
#ifndef HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_GROUP_COMMIT_H_
#define HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_GROUP_COMMIT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "rocksdb/write_batch.h"
#include "collector/store/store.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"

namespace hookrelay::collector {

// One group commit. Built by the preparer, then owned by the writer until written, then recycled
// by the preparer (its vectors and WriteBatch keep their capacity).
struct RocksDbJobStore::Group {
  std::vector<WriteOp> ops;
  // Parallel to ops; only the kAppend entries are used.
  std::vector<AppendResult> results;
  std::vector<uint64_t> new_ids;
  // Parallel to new_ids: the jobs' destination tags.
  std::vector<uint32_t> new_tags;
  // Parallel to new_ids: the jobs' ordering keys (OrderKey; 0 for none).
  std::vector<uint64_t> new_keys;
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
    new_tags.clear();
    new_keys.clear();
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

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_GROUP_COMMIT_H_
