#include "collector/store/rocksdb/rocksdb_status.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hookrelay::collector::rocksdb_internal {

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string message = absl::StrCat("job store: ", std::string(what), ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  return absl::InternalError(message);
}

absl::Status Unshared(const absl::Status& s) {
  return s.ok() ? absl::OkStatus() : absl::Status(s.code(), std::string(s.message()));
}

std::string_view ErrorKind(const rocksdb::Status& s) {
  if (s.IsNoSpace()) return "no_space";
  if (s.IsCorruption()) return "corruption";
  if (s.IsIOError()) return "io_error";
  return "other";
}

absl::Status Malformed(std::string_view cf, uint64_t id) {
  return absl::DataLossError(
      absl::StrFormat("job store: malformed record in column family %s (job %d)", cf, id));
}

}  // namespace hookrelay::collector::rocksdb_internal
