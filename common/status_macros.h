// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr (Debian's Abseil
// 20220623 ships neither).
#ifndef HOOKRELAY_COMMON_STATUS_MACROS_H_
#define HOOKRELAY_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HOOKRELAY_CONCAT_INNER(a, b) a##b
#define HOOKRELAY_CONCAT(a, b) HOOKRELAY_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                                  \
  do {                                                         \
    const ::absl::Status hookrelay_status_ = (expr);           \
    if (!hookrelay_status_.ok()) return hookrelay_status_;     \
  } while (0)

// `lhs = *expr` when `expr` (an absl::StatusOr) is OK; otherwise returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  HOOKRELAY_ASSIGN_OR_RETURN_IMPL(HOOKRELAY_CONCAT(hookrelay_statusor_, __LINE__), lhs, expr)

#define HOOKRELAY_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = std::move(statusor).value()

#endif  // HOOKRELAY_COMMON_STATUS_MACROS_H_
