// Secrets mounted as files (Kubernetes Secrets, Docker secrets): the admin token, destination
// shared secrets. Keeps them off command lines (visible in `ps`) and out of ConfigMaps.
#ifndef HOOKRELAY_COMMON_SECRET_FILE_H_
#define HOOKRELAY_COMMON_SECRET_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace hookrelay::common {

// The largest secret file read, in bytes.
inline constexpr size_t kMaxSecretFileBytes = 4096;

// The file's contents without trailing whitespace (a final newline is usual in such files).
// Errors name the path and never contain the contents: NOT_FOUND / PERMISSION_DENIED /
// FAILED_PRECONDITION (unreadable), INVALID_ARGUMENT (empty once trimmed, over
// kMaxSecretFileBytes, or holding control characters other than the trailing whitespace).
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_SECRET_FILE_H_
