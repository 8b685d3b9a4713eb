// The helpers shared by AdminCore's files (admin_core_internal.h) and the page tokens and random
// ids of admin_core.h's internal namespace.
#include "collector/admin/admin_core_internal.h"

#include <openssl/rand.h>

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collector/api/admin_errors.h"
#include "common/check.h"
#include "common/strings.h"

namespace hookrelay::collector::internal {
namespace {

constexpr std::string_view kPageTokenPrefix = "dead-after:";
constexpr std::string_view kIdPageTokenPrefix = "id-after:";

}  // namespace

absl::Status CheckPageSize(int32_t page_size) {
  if (page_size >= 0 && page_size <= AdminCore::kMaxPageSize) return absl::OkStatus();
  return InvalidField(
      "pageSize", absl::StrCat(page_size, page_size < 0 ? " is negative" : " is over the limit",
                               "; at most ", AdminCore::kMaxPageSize, " (0 = ",
                               AdminCore::kDefaultPageSize, ")"));
}

absl::Status FileObject(std::string_view what, const std::string& id, const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(
      common::ToAbsl(what), " \"", id, "\" is defined in ", path,
      "; change it there (objects of the config file are read-only through the admin API)"));
}

absl::Status NotFound(std::string_view what, const std::string& id) {
  return absl::NotFoundError(absl::StrCat(common::ToAbsl(what), " \"", absl::CHexEscape(id),
                                          "\" does not exist"));
}

std::string EncodePageToken(uint64_t last_id) {
  return absl::WebSafeBase64Escape(absl::StrCat(common::ToAbsl(kPageTokenPrefix), last_id));
}

absl::StatusOr<uint64_t> DecodePageToken(std::string_view token) {
  std::string decoded;
  uint64_t id = 0;
  if (!absl::WebSafeBase64Unescape(common::ToAbsl(token), &decoded) ||
      !absl::StartsWith(decoded, common::ToAbsl(kPageTokenPrefix)) ||
      !absl::SimpleAtoi(absl::string_view(decoded).substr(kPageTokenPrefix.size()), &id) ||
      EncodePageToken(id) != token) {  // Only the exact spelling we hand out.
    return InvalidField("pageToken", "not a token returned by this list; leave it empty for the first page");
  }
  return id;
}

std::string EncodeIdPageToken(std::string_view last_id) {
  return absl::WebSafeBase64Escape(
      absl::StrCat(common::ToAbsl(kIdPageTokenPrefix), common::ToAbsl(last_id)));
}

absl::StatusOr<std::string> DecodeIdPageToken(std::string_view token) {
  std::string decoded;
  if (!absl::WebSafeBase64Unescape(common::ToAbsl(token), &decoded) ||
      !absl::StartsWith(decoded, common::ToAbsl(kIdPageTokenPrefix)) ||
      EncodeIdPageToken(std::string_view(decoded).substr(kIdPageTokenPrefix.size())) != token) {
    return InvalidField("pageToken", "not a token returned by this list; leave it empty for the first page");
  }
  return decoded.substr(kIdPageTokenPrefix.size());
}

std::string RandomToken(std::string_view prefix, size_t length, bool mixed_case) {
  static constexpr char kLower[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  static constexpr char kMixed[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const std::string_view alphabet = mixed_case ? std::string_view(kMixed, 62)
                                               : std::string_view(kLower, 36);
  std::string out(prefix);
  while (out.size() < prefix.size() + length) {
    unsigned char bytes[64];
    HOOKRELAY_CHECK(RAND_bytes(bytes, sizeof(bytes)) == 1, "RAND_bytes failed");
    for (unsigned char b : bytes) {
      // Rejection sampling: no bias towards the first characters.
      const unsigned limit = 256 - 256 % alphabet.size();
      if (b >= limit) continue;
      out.push_back(alphabet[b % alphabet.size()]);
      if (out.size() == prefix.size() + length) break;
    }
  }
  return out;
}

}  // namespace hookrelay::collector::internal
