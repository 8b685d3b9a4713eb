// An invariant check: a broken invariant is a bug, and the process stops at once with a message
// (one structured fatal log line with the condition, file and line) rather than carrying on with
// corrupt state. Untrusted input and downstream failures are never checked this way: they get a
// Status and a metric.
//   HOOKRELAY_CHECK(it != leased_.end(), "a lease deadline without its lease");
#ifndef HOOKRELAY_COMMON_CHECK_H_
#define HOOKRELAY_COMMON_CHECK_H_

#include <string_view>

#include "absl/base/optimization.h"

namespace hookrelay::common::internal {

// Logs {"level":"error","msg":"invariant violated",...} and aborts. Never returns.
[[noreturn]] void CheckFailed(std::string_view condition, std::string_view message,
                              std::string_view file, int line);

}  // namespace hookrelay::common::internal

#define HOOKRELAY_CHECK(condition, message)                                                 \
  do {                                                                                      \
    if (ABSL_PREDICT_FALSE(!(condition))) {                                                 \
      ::hookrelay::common::internal::CheckFailed(#condition, (message), __FILE__, __LINE__); \
    }                                                                                       \
  } while (false)

#endif  // HOOKRELAY_COMMON_CHECK_H_
