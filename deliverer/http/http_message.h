// The request and result types of the deliverer's HTTP sender (deliverer/http_sender.h), shared by
// its transports (deliverer/http/h1_connection.h, deliverer/http/curl_sender.h). Plain structs.
#ifndef HOOKRELAY_DELIVERER_HTTP_HTTP_MESSAGE_H_
#define HOOKRELAY_DELIVERER_HTTP_HTTP_MESSAGE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"

#include "deliverer/outcome_policy.h"

namespace hookrelay::deliverer {

struct HttpRequest {
  // http:// or https://, used exactly as given.
  std::string url;
  // Static and signature headers, sent in this order. Names and values must not contain CR, LF or
  // NUL (such a request fails with kOther, nothing sent). An empty value is sent as an empty
  // header. A `User-Agent` or `Content-Type` here replaces the sender's own.
  std::vector<std::pair<std::string, std::string>> headers;
  // The exact bytes to POST, shared by the URLs of one job; never copied. nullptr = empty body.
  std::shared_ptr<const std::string> body;
  // The whole request, connect and TLS handshake included, from when it gets a connection slot
  // (time waiting for a slot excluded). At least 1 ms is used.
  absl::Duration timeout = absl::Seconds(5);
};

struct HttpResult {
  // url: the request's; status and retry_after when error is kNone; error otherwise.
  UrlResult result;
  // Human text for logs when there was no response, e.g. "TLS certificate problem: self-signed
  // certificate" or "refused 127.0.0.1: loopback address; --allow_private_networks permits it".
  // Empty when a response arrived.
  std::string error_detail;
  // Wall time from getting a connection slot to completion: the receiver's time (connect, TLS,
  // request, response). Zero when the request never got a slot (refused before, or shut down
  // while waiting for one).
  absl::Duration duration;
  // Wall time from Send() to getting a connection slot (or to failing without one): the wait for
  // a slot to the receiver's host.
  absl::Duration queued;
  // The HTTP version of the response: 10, 11, 20 (HTTP/2), 30; 0 when there was none.
  int http_version = 0;
};

// Receives a request's result, exactly once. Must not block.
using HttpCallback = absl::AnyInvocable<void(HttpResult) &&>;

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_HTTP_HTTP_MESSAGE_H_
