#include "common/uuid.h"

#include <cstdint>

#include "absl/random/random.h"

namespace hookrelay::common {

std::string NewUuidV4() {
  thread_local absl::BitGen gen;
  uint64_t hi = absl::Uniform<uint64_t>(gen);
  uint64_t lo = absl::Uniform<uint64_t>(gen);
  hi = (hi & 0xFFFFFFFFFFFF0FFFULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;  // variant 10
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(36, '-');
  int pos = 0;
  auto put = [&](uint64_t v, int nibbles) {
    for (int k = nibbles - 1; k >= 0; --k) {
      if (pos == 8 || pos == 13 || pos == 18 || pos == 23) ++pos;
      out[pos++] = kHex[(v >> (4 * k)) & 0xF];
    }
  };
  put(hi, 16);
  put(lo, 16);
  return out;
}

}  // namespace hookrelay::common
