#include "collector/store/rocksdb/rocksdb_options.h"

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "rocksdb/compaction_filter.h"
#include "rocksdb/env.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/listener.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/perf_level.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/table_properties_collectors.h"
#include "rocksdb/write_buffer_manager.h"
#include "collector/store/rocksdb/rocksdb_layout.h"
#include "common/log.h"

namespace hookrelay::collector::rocksdb_internal {
namespace {

// RocksDB counts every key comparison, and more, in a thread-local PerfContext unless the thread
// says otherwise; nothing here reads those counts. Flushes (the vector memtables' sort) and
// compactions compare keys the most, on RocksDB's own threads: each turns the counting off for
// its thread when it starts its first job (the store's threads do so themselves).
class PerfCountsOff : public rocksdb::EventListener {
 public:
  void OnFlushBegin(rocksdb::DB*, const rocksdb::FlushJobInfo&) override { Off(); }
  void OnCompactionBegin(rocksdb::DB*, const rocksdb::CompactionJobInfo&) override { Off(); }
  void OnSubcompactionBegin(const rocksdb::SubcompactionJobInfo&) override { Off(); }
  const char* Name() const override { return "hookrelay.PerfCountsOff"; }

 private:
  static void Off() { rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable); }  // a TLS store
};

// RocksDB's info log, through the project's logger (so nothing is written to the data volume,
// which may be the very thing that is full). Warnings and errors only, unless debug logging is
// on; at most a few lines per second, since a failing disk makes RocksDB repeat itself.
class RocksDbLogBridge : public rocksdb::Logger {
 public:
  RocksDbLogBridge()
      : rocksdb::Logger(common::LogEnabled(common::LogLevel::kDebug)
                            ? rocksdb::InfoLogLevel::DEBUG_LEVEL
                            : rocksdb::InfoLogLevel::WARN_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    common::LogLevel ours = common::LogLevel::kDebug;
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL && level != rocksdb::InfoLogLevel::HEADER_LEVEL) {
      ours = common::LogLevel::kError;
    } else if (level == rocksdb::InfoLogLevel::WARN_LEVEL) {
      ours = common::LogLevel::kWarning;
    }
    if (!common::LogEnabled(ours)) return;
    char buffer[1024];
    const int n = std::vsnprintf(buffer, sizeof(buffer), format, ap);
    if (n < 0) return;
    const std::string_view text(buffer, std::min<size_t>(static_cast<size_t>(n), sizeof(buffer) - 1));
    common::LogRateLimited(limiter_, ours, "rocksdb", {{"text", text}});
  }

 private:
  common::LogRateLimiter limiter_{5.0, 20};
};

// Drops dedup keys stored at or before now - window. One filter per compaction, so the cutoff
// (and the clock read) is per compaction, not per key.
class DedupExpiryFilter : public rocksdb::CompactionFilter {
 public:
  explicit DedupExpiryFilter(int64_t cutoff_ms) : cutoff_ms_(cutoff_ms) {}

  bool Filter(int level, const rocksdb::Slice& key, const rocksdb::Slice& value,
              std::string* new_value, bool* value_changed) const override {
    return value.size() == 8 && static_cast<int64_t>(DecodeU64(value.data())) <= cutoff_ms_;
  }
  const char* Name() const override { return "hookrelay.DedupExpiryFilter"; }

 private:
  const int64_t cutoff_ms_;
};

class DedupExpiryFilterFactory : public rocksdb::CompactionFilterFactory {
 public:
  DedupExpiryFilterFactory(common::Clock& clock, absl::Duration window)
      : clock_(clock), window_(window) {}

  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& context) override {
    return std::make_unique<DedupExpiryFilter>(ToMillis(clock_.Now() - window_));
  }
  const char* Name() const override { return "hookrelay.DedupExpiryFilterFactory"; }

 private:
  common::Clock& clock_;
  const absl::Duration window_;
};

rocksdb::BlockBasedTableOptions TableOptions(const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  return table;
}

// For families that ingest only appends to, in random key order, and that are read after a
// flush (syncs, deletions): a vector memtable makes each insert O(1) instead of a skip-list
// search per key (a read of an unflushed vector sorts it).
rocksdb::ColumnFamilyOptions MakeAppendOnlyOptions(const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions options = MakeSmallOptions(cache);
  options.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  return options;
}

}  // namespace

rocksdb::DBOptions MakeDbOptions() {
  rocksdb::DBOptions options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  // Sized for the 2-core target: one flush thread and two compaction threads. Writes never run
  // on these threads (the store's writer thread does), they compete for CPU only while flushing
  // and compacting.
  options.IncreaseParallelism(2);
  // ...and both compaction threads used when a family falls behind: IncreaseParallelism(2)
  // leaves max_background_jobs at 2, which RocksDB splits into one flush and ONE compaction at a
  // time. Then a compaction of the user index (seconds, under a backlog) held back the
  // compactions of `jobs`' flushed files, `jobs` reached 20 L0 files, and RocksDB delayed every
  // write to 16 MB/s: acknowledgements waited 0.2-0.8 s (docs/BENCHMARKS.md, "Write stalls").
  options.max_background_jobs = 3;
  // `dead` and the meta family get few writes; without a cap their small memtables would keep
  // every WAL file alive until they filled up. Past this size, RocksDB flushes the families
  // holding the oldest WAL so it can be deleted. Also bounds what a restart replays (issue 14:
  // start-up time and memory must not grow with the backlog).
  options.max_total_wal_size = uint64_t{128} << 20;
  // Memtables of all families together: flushed early past this, so the process's memory stays
  // bounded under a backlog (each family's own limits would allow several times as much). Not
  // a hard cap: with one flush thread behind, memtables still pile up to the families' limits
  // (250-280 MB RSS during a 10M-job ingest). allow_stall would make it one, but it deadlocks:
  // `jobs` merges two memtables per flush, so memory never drops while writes wait.
  options.write_buffer_manager = std::make_shared<rocksdb::WriteBufferManager>(size_t{128} << 20);
  // Write SST data back in 1 MB steps instead of one large burst at each file's end, so the
  // WAL fsyncs of the group commit do not queue behind it.
  options.bytes_per_sync = uint64_t{1} << 20;
  options.keep_log_file_num = 4;
  // No LOG file on the data volume (it is what fills up first, and RocksDB used to abort on it).
  options.info_log = std::make_shared<RocksDbLogBridge>();
  // Opening after a crash replays the WAL into memtables without writing new SST files, so a
  // restart on a nearly full volume still succeeds.
  options.avoid_flush_during_recovery = true;
  // The profiles family's memtable is a vector (below), which takes no concurrent writes; the
  // store has one writer thread anyway.
  options.allow_concurrent_memtable_write = false;
  options.listeners.push_back(std::make_shared<PerfCountsOff>());
  return options;
}

rocksdb::ColumnFamilyOptions MakeJobsOptions(const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions options;
  // Level-style compaction sized for a 256 MB budget: L0 compacted early, no compression on
  // L0/L1 (short-lived data, and CPU is the scarce resource on 2 cores), LZ4 below, where a
  // long-lived backlog ends up. (LZ4 on every level would let flushed files move down without a
  // rewrite, since keys are appended in order; with two compactions at once it made another
  // destination's deliveries beside a 10M-job held backlog 15-25 % slower: docs/BENCHMARKS.md,
  // "Write stalls".)
  options.OptimizeLevelStyleCompaction(uint64_t{256} << 20);
  // Small memtables, each flushed alone (~16k jobs; a job appended and completed within one
  // leaves only a small tombstone in the SST file, not its ~0.5 KB record). Not the 2 x 64 MB
  // flushes that OptimizeLevelStyleCompaction picks: while a flush writes and syncs a large
  // file, the group commit's WAL fdatasync on the same disk stalls for 50-100 ms, and every
  // request in that commit waits. With 8 MB flushes the acknowledgement p99 at 40k events/s
  // fell from 80-140 ms to 15 ms (docs/BENCHMARKS.md, "Acknowledgement latency"). Up to 16
  // memtables (128 MB) before a write stall, which is back-pressure.
  options.write_buffer_size = 8 << 20;
  options.min_write_buffer_number_to_merge = 1;
  options.max_write_buffer_number = 16;
  options.level_compaction_dynamic_level_bytes = true;
  rocksdb::BlockBasedTableOptions table = TableOptions(cache);
  // No bloom filter: lookups are for jobs known to exist, and with sequential keys each lookup
  // hits one file's key range anyway. Larger blocks suit the ~0.5 KB values.
  table.block_size = 16 * 1024;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

rocksdb::ColumnFamilyOptions MakeDedupOptions(const std::shared_ptr<rocksdb::Cache>& cache,
                                              common::Clock& clock, absl::Duration window) {
  rocksdb::ColumnFamilyOptions options;
  // 8 MB memtables (about 120k keys) flushed alone, for the same reason as `jobs`; no
  // compression on L0/L1, LZ4 below (keys share their source-id prefix, but most of a message
  // id is random).
  options.OptimizeLevelStyleCompaction(uint64_t{128} << 20);
  options.write_buffer_size = 8 << 20;
  options.min_write_buffer_number_to_merge = 1;
  options.max_write_buffer_number = 8;
  options.level_compaction_dynamic_level_bytes = true;
  // Misses are the common case: a whole-key bloom filter in the memtable and in every SST file
  // answers most lookups without touching a data block.
  options.memtable_prefix_bloom_size_ratio = 0.05;
  options.memtable_whole_key_filtering = true;
  rocksdb::BlockBasedTableOptions table = TableOptions(cache);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  options.compaction_filter_factory = std::make_shared<DedupExpiryFilterFactory>(clock, window);
  // Make sure every file meets the expiry filter at least once per window (at least hourly),
  // even when no new writes push compactions down to it.
  options.periodic_compaction_seconds = static_cast<uint64_t>(
      std::max<int64_t>(absl::ToInt64Seconds(window), 3600));
  return options;
}

rocksdb::ColumnFamilyOptions MakeDueOptions(const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions options;
  options.write_buffer_size = 16 << 20;
  options.max_write_buffer_number = 3;
  options.level_compaction_dynamic_level_bytes = true;
  // No compression where keys are young (most are deleted within seconds); LZ4 below, where a
  // backlog's keys end up. Inserts are mostly in key order: each starts where the previous one
  // with the same first byte ended (one hint per prefix).
  options.compression_per_level = {rocksdb::kNoCompression, rocksdb::kNoCompression,
                                   rocksdb::kLZ4Compression};
  options.memtable_insert_with_hint_prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(1));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(TableOptions(cache)));
  // Every key is deleted once its job ends, behind the pager's cursor: files dense with
  // tombstones are compacted early, so that a seek after a restart does not step over them.
  options.table_properties_collector_factories.emplace_back(
      rocksdb::NewCompactOnDeletionCollectorFactory(16384, 8192));
  return options;
}

rocksdb::ColumnFamilyOptions MakeSmallOptions(const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions options;
  options.write_buffer_size = 8 << 20;
  options.compression = rocksdb::kLZ4Compression;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(TableOptions(cache)));
  return options;
}

// `users`: also the pending index, a key per job written at append and deleted when it ends:
// young keys are not compressed (most are gone within seconds), LZ4 below.
rocksdb::ColumnFamilyOptions MakeUsersOptions(const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions options = MakeAppendOnlyOptions(cache);
  options.compression_per_level = {rocksdb::kNoCompression, rocksdb::kNoCompression,
                                   rocksdb::kLZ4Compression};
  // A key per job: with two 8 MB memtables, ingest stopped while one was flushed.
  options.write_buffer_size = 16 << 20;
  options.max_write_buffer_number = 4;
  // Universal compaction: the pending index's keys arrive in random order (user hash first), so
  // under a backlog every level-style L0 -> L1 compaction rewrote the whole of L1 (557 MB
  // rewritten for ~150 MB of keys in one ingest benchmark, seconds per compaction). Universal
  // merges runs of similar size: 141 MB. Only deletions read this family, by prefix scans, so
  // the extra sorted runs cost nothing at ingest.
  options.compaction_style = rocksdb::kCompactionStyleUniversal;
  return options;
}

rocksdb::ColumnFamilyOptions MakeProfileOptions(const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions options = MakeAppendOnlyOptions(cache);
  options.merge_operator = std::make_shared<ProfileMerge>();
  options.write_buffer_size = 32 << 20;
  return options;
}

}  // namespace hookrelay::collector::rocksdb_internal
