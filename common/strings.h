// Debian's Abseil is built with its own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0),
// distinct from std::string_view. These two helpers cross between them at no cost. And a stable
// string hash for values that are stored or sent.
#ifndef HOOKRELAY_COMMON_STRINGS_H_
#define HOOKRELAY_COMMON_STRINGS_H_

#include <cstdint>
#include <string_view>

#include "absl/strings/string_view.h"

namespace hookrelay::common {

inline absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view ToStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// FNV-1a, 64 bits: the same value in every build and process (unlike std::hash and absl::Hash),
// for hashes that are stored or sent. Not for adversarial input.
inline uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_STRINGS_H_
