// Who may use the admin surface (Admin RPCs, the admin HTTP API and console) and Subscribe
// (whose jobs carry destination secrets): one check for all of them (SPEC §9).
//
// With a token (--admin_token_file), a caller must present `Bearer <token>` (the `authorization`
// gRPC metadata entry or HTTP header; "Bearer" in any case); the token is compared in constant
// time: UNAUTHENTICATED otherwise. Without a token, only loopback peers are served:
// PERMISSION_DENIED for others.
//
// Thread-safe (immutable after construction).
#ifndef HOOKRELAY_COLLECTOR_API_ADMIN_AUTH_H_
#define HOOKRELAY_COLLECTOR_API_ADMIN_AUTH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hookrelay::collector {

class AdminAuth {
 public:
  explicit AdminAuth(std::string token);

  // `authorization`: the header / metadata value ("" when absent). `peer`: gRPC's peer string
  // ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000") or the same form for HTTP. Returns who the
  // caller is for the audit log: "token:<first 8 hex digits of SHA-256(token)>" or
  // "peer:<address>" when no token is configured.
  absl::StatusOr<std::string> Check(absl::string_view authorization, absl::string_view peer) const;

  bool has_token() const { return !token_.empty(); }

 private:
  const std::string token_;
  const std::string token_id_;
};

// True for 127.0.0.0/8 and ::1 (also ::ffff:127.x.y.z), in gRPC's peer format.
bool IsLoopbackPeer(absl::string_view peer);

// Compares in time that depends only on `expected.size()`, not on where the inputs differ.
bool ConstantTimeEquals(absl::string_view given, absl::string_view expected);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_API_ADMIN_AUTH_H_
