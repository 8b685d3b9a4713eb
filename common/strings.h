// Debian's Abseil is built with its own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0),
// distinct from std::string_view. These two helpers cross between them at no cost.
#ifndef HOOKRELAY_COMMON_STRINGS_H_
#define HOOKRELAY_COMMON_STRINGS_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace hookrelay::common {

inline absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view ToStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_STRINGS_H_
