#include "collector/store/rocksdb/rocksdb_crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace hookrelay::collector {
namespace {

// The reflected Castagnoli polynomial.
constexpr uint32_t kPolynomial = 0x82F63B78u;

// Byte-at-a-time table, built at compile time: librocksdb may checksum during its own static
// initialisation, before this file's would have run.
constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const char* data,
                                                      size_t size) {
  uint64_t c = ~crc;
  const char* p = data;
  const char* const end = data + size;
  // Byte steps up to 8-byte alignment, then 8 bytes per instruction, then the tail.
  while (p < end && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), static_cast<uint8_t>(*p++));
  }
  while (end - p >= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));
    c = _mm_crc32_u64(c, word);
    p += 8;
  }
  while (p < end) c = _mm_crc32_u8(static_cast<uint32_t>(c), static_cast<uint8_t>(*p++));
  return ~static_cast<uint32_t>(c);
}
#endif

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t crc, const char* data, size_t size) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < size; ++i) {
    c = kTable[(c ^ static_cast<uint8_t>(data[i])) & 0xFF] ^ (c >> 8);
  }
  return ~c;
}

bool Crc32cHardware() {
#if defined(__x86_64__)
  static const bool hardware = [] {
    __builtin_cpu_init();  // may run before libgcc's own constructor has
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return hardware;
#else
  return false;
#endif
}

uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t size) {
#if defined(__x86_64__)
  if (Crc32cHardware()) return ExtendSse42(crc, data, size);
#endif
  return Crc32cExtendPortable(crc, data, size);
}

}  // namespace hookrelay::collector

#if defined(__x86_64__)
// The interposed definition (see the header), on x86-64 only: elsewhere librocksdb's own may use
// the CPU's CRC instructions and is left alone. Declared here as RocksDB's util/crc32c.h declares
// it; that header is not installed.
namespace rocksdb::crc32c {
uint32_t Extend(uint32_t init_crc, const char* data, size_t n);
}  // namespace rocksdb::crc32c

uint32_t rocksdb::crc32c::Extend(uint32_t init_crc, const char* data, size_t n) {
  return hookrelay::collector::Crc32cExtend(init_crc, data, n);
}
#endif
