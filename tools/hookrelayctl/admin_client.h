// The admin JSON API over HTTP (docs/ADMIN_API.md) for hookrelayctl: requests and answers are
// the hookrelay.v1 admin messages, sent and read in protobuf's JSON mapping with libcurl.
#ifndef HOOKRELAY_TOOLS_HOOKRELAYCTL_ADMIN_CLIENT_H_
#define HOOKRELAY_TOOLS_HOOKRELAYCTL_ADMIN_CLIENT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"

namespace hookrelay::hookrelayctl {

// A refused call: the server's code, message and field violations (field, description).
struct ApiError {
  int http_status = 0;  // 0: no answer (connection failed, timeout)
  std::string code;     // "INVALID_ARGUMENT"
  std::string message;
  std::vector<std::pair<std::string, std::string>> violations;
};

class AdminClient {
 public:
  // `base_url`: http://host:port (no path). `token` empty: no Authorization header.
  AdminClient(std::string base_url, std::string token, absl::Duration timeout);

  // `method` GET/POST/PATCH/DELETE on `path` (+ query), with `body` as JSON when non-null;
  // the answer parsed into `response` when non-null. On failure fills `error` and returns false.
  bool Call(const std::string& method, const std::string& path,
            const google::protobuf::Message* body, google::protobuf::Message* response,
            ApiError* error, const std::string& raw_body = "") const;

  const std::string& base_url() const { return base_url_; }

 private:
  const std::string base_url_;
  const std::string token_;
  const absl::Duration timeout_;
};

// %-encodes a path segment or query value.
std::string UrlEncode(const std::string& s);

}  // namespace hookrelay::hookrelayctl

#endif  // HOOKRELAY_TOOLS_HOOKRELAYCTL_ADMIN_CLIENT_H_
