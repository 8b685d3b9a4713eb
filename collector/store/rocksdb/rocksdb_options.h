// The embedded job store's RocksDB tuning (collector/store/rocksdb): the DB options (sized for
// the 2-core target, no info log on the data volume) and each column family's options, with the
// dedup family's expiry filter. Internal to the engine; the why of each setting is beside it in
// the .cc.
#ifndef HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_OPTIONS_H_
#define HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_OPTIONS_H_

#include <memory>

#include "absl/time/time.h"
#include "rocksdb/cache.h"
#include "rocksdb/options.h"
#include "common/clock.h"

namespace hookrelay::collector::rocksdb_internal {

rocksdb::DBOptions MakeDbOptions();

// `jobs`: sequential keys, ~0.5 KB values, most of them deleted within seconds (delivered).
rocksdb::ColumnFamilyOptions MakeJobsOptions(const std::shared_ptr<rocksdb::Cache>& cache);

// `dedup`: random keys (source id + message id, tens of bytes) with 8-byte values, looked up once
// per ingested event and almost never found. Keys stored at or before clock.Now() - window are
// dropped by compactions. `clock` must outlive the options.
rocksdb::ColumnFamilyOptions MakeDedupOptions(const std::shared_ptr<rocksdb::Cache>& cache,
                                              common::Clock& clock, absl::Duration window);

// `due`: 16-byte keys, appended in near-sequential order, read by the pager in order.
rocksdb::ColumnFamilyOptions MakeDueOptions(const std::shared_ptr<rocksdb::Cache>& cache);

// `dead` and meta: small and rarely written.
rocksdb::ColumnFamilyOptions MakeSmallOptions(const std::shared_ptr<rocksdb::Cache>& cache);

// `users`: also the pending index, a key per job written at append and deleted when it ends.
rocksdb::ColumnFamilyOptions MakeUsersOptions(const std::shared_ptr<rocksdb::Cache>& cache);

// `profiles`: ProfileDelta merge operands, appended in random key order.
rocksdb::ColumnFamilyOptions MakeProfileOptions(const std::shared_ptr<rocksdb::Cache>& cache);

}  // namespace hookrelay::collector::rocksdb_internal

#endif  // HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_OPTIONS_H_
