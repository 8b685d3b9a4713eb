// The embedded job store's errors (collector/store/rocksdb): a rocksdb::Status as the
// absl::Status callers get, the kind label of a failed write, and the error for a record that
// does not decode. Internal to the engine.
#ifndef HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_STATUS_H_
#define HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_STATUS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "rocksdb/status.h"

namespace hookrelay::collector::rocksdb_internal {

// `s` as an absl::Status whose message says what the store was doing.
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what);

// A copy of `s` that shares no heap state with it. An error Status is refcounted inside Debian's
// uninstrumented Abseil, so TSan cannot see the ordering when copies of one are dropped on
// different threads (the store's and the callers'); each thread gets its own instead.
absl::Status Unshared(const absl::Status& s);

// The label of hookrelay_store_errors_total{kind} for a failed write.
std::string_view ErrorKind(const rocksdb::Status& s);

// DATA_LOSS: a record of column family `cf` (job `id`, or 0) does not decode.
absl::Status Malformed(std::string_view cf, uint64_t id);

}  // namespace hookrelay::collector::rocksdb_internal

#endif  // HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_STATUS_H_
