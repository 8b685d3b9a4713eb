// CRC32C (Castagnoli) for RocksDB's write-ahead log, with the SSE4.2 instruction.
//
// RocksDB checksums every WAL record with crc32c::Extend. Debian builds librocksdb portable,
// without SSE4.2, so its Extend is a table loop: 6-7 % of the collector's CPU at ingest
// saturation (docs/BENCHMARKS.md, "The WAL checksum"). librocksdb calls the function through its
// PLT, so a definition of rocksdb::crc32c::Extend exported by the executable takes its place for
// every caller in the process (ELF symbol interposition; the linkopts of this target export it).
// Same polynomial, same pre- and post-inversion, so the checksums are bit for bit those of
// librocksdb's own function: files written by one are read by the other.
//
// On an x86-64 CPU without SSE4.2 a table loop of our own answers (the result is the same, only
// slower). On other architectures nothing is interposed: librocksdb keeps its own.
#ifndef HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_CRC32C_H_
#define HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace hookrelay::collector {

// CRC32C of `data` continued from `crc` (0 to start), as rocksdb::crc32c::Extend.
uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t size);

// The table loop alone (the fallback; tests compare the two).
uint32_t Crc32cExtendPortable(uint32_t crc, const char* data, size_t size);

// Whether Crc32cExtend uses the CPU's CRC32 instruction here.
bool Crc32cHardware();

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_CRC32C_H_
