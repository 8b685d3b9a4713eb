#include "collector/api/admin_auth.h"

#include <openssl/sha.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace hookrelay::collector {
namespace {

std::string TokenId(const std::string& token) {
  if (token.empty()) return "";
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  return absl::StrCat("token:", absl::BytesToHexString(absl::string_view(
                                    reinterpret_cast<const char*>(digest), 4)));
}

}  // namespace

bool ConstantTimeEquals(absl::string_view given, absl::string_view expected) {
  // The loop always runs over `expected`; `diff` is volatile so that the compiler cannot stop
  // at the first difference.
  volatile unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto g = static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    diff = static_cast<unsigned char>(diff | (g ^ static_cast<unsigned char>(expected[i])));
  }
  return diff == 0;
}

bool IsLoopbackPeer(absl::string_view peer) {
  if (absl::ConsumePrefix(&peer, "ipv4:")) return absl::StartsWith(peer, "127.");
  if (absl::ConsumePrefix(&peer, "ipv6:")) {
    return absl::StartsWith(peer, "[::1]") || absl::StartsWith(peer, "[::ffff:127.");
  }
  return false;
}

AdminAuth::AdminAuth(std::string token) : token_(std::move(token)), token_id_(TokenId(token_)) {}

absl::StatusOr<std::string> AdminAuth::Check(absl::string_view authorization,
                                             absl::string_view peer) const {
  if (token_.empty()) {
    if (!IsLoopbackPeer(peer)) {
      return absl::PermissionDeniedError(
          "the admin API and Subscribe answer only on loopback when the collector has no admin "
          "token (--admin_token_file)");
    }
    return absl::StrCat("peer:", peer);
  }
  if (authorization.empty()) {
    return absl::UnauthenticatedError("admin token required: send authorization: Bearer <token>");
  }
  authorization = absl::StripAsciiWhitespace(authorization);
  constexpr absl::string_view kBearer = "bearer ";
  if (authorization.size() <= kBearer.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kBearer.size()), kBearer)) {
    return absl::UnauthenticatedError("authorization must be: Bearer <admin token>");
  }
  const absl::string_view token = absl::StripLeadingAsciiWhitespace(authorization.substr(kBearer.size()));
  if (!ConstantTimeEquals(token, token_)) {
    return absl::UnauthenticatedError("wrong admin token");
  }
  return token_id_;
}

}  // namespace hookrelay::collector
