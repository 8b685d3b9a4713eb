// Helpers shared by the files that implement AdminCore (admin_core.cc and admin_<resource>.cc):
// argument checks, paging of id-sorted lists, the common error answers, id lengths. Not API:
// only AdminCore's own files include it.
#ifndef HOOKRELAY_COLLECTOR_ADMIN_ADMIN_CORE_INTERNAL_H_
#define HOOKRELAY_COLLECTOR_ADMIN_ADMIN_CORE_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collector/admin/admin_core.h"

namespace hookrelay::collector::internal {

// Random part of generated source, destination and audience ids.
constexpr size_t kIdLength = 12;

// A list call's page_size: 0 (the default) up to the limit.
absl::Status CheckPageSize(int32_t page_size);

// The page of `ids` (sorted) after `token`, at most `page_size`; sets next_page_token.
template <typename T, typename IdOf>
absl::StatusOr<std::vector<const T*>> Page(const std::vector<const T*>& all, IdOf id_of,
                                           int32_t page_size, const std::string& token,
                                           std::string* next_page_token) {
  if (absl::Status st = CheckPageSize(page_size); !st.ok()) return st;
  const size_t size = page_size == 0 ? AdminCore::kDefaultPageSize : page_size;
  std::string after;
  if (!token.empty()) {
    absl::StatusOr<std::string> decoded = internal::DecodeIdPageToken(token);
    if (!decoded.ok()) return decoded.status();
    after = *decoded;
  }
  std::vector<const T*> out;
  for (const T* item : all) {
    if (!after.empty() && id_of(*item) <= after) continue;
    if (out.size() == size) {
      *next_page_token = internal::EncodeIdPageToken(id_of(*out.back()));
      break;
    }
    out.push_back(item);
  }
  return out;
}

// FAILED_PRECONDITION for a change to an object of the config file.
absl::Status FileObject(std::string_view what, const std::string& id, const std::string& path);
// NOT_FOUND: `what` "id" does not exist.
absl::Status NotFound(std::string_view what, const std::string& id);

}  // namespace hookrelay::collector::internal

#endif  // HOOKRELAY_COLLECTOR_ADMIN_ADMIN_CORE_INTERNAL_H_
