// The bytes of an HTTP/1.1 POST's head (request line and header lines), written into a buffer that
// the caller reuses from request to request, so that steady-state requests allocate nothing here.
//
// Sent: `POST <target> HTTP/1.1`, `Host`, `User-Agent: hookrelay/1.0`, `Accept: */*`,
// `Content-Type: application/json`, `Authorization: Basic …` when the URL has user info, each
// replaced by the caller's header of that name; then the caller's headers in order (an empty value
// as `Name:`), then `Content-Length`. The caller's Content-Length, Transfer-Encoding and Expect
// headers are dropped: the sender frames the body itself and never asks `Expect: 100-continue`.
// Pure functions.
#ifndef HOOKRELAY_DELIVERER_HTTP_REQUEST_HEAD_H_
#define HOOKRELAY_DELIVERER_HTTP_REQUEST_HEAD_H_

#include <cstddef>
#include <string>

#include "deliverer/http/http_message.h"
#include "deliverer/http/url.h"

namespace hookrelay::deliverer::http {

// Empty when every header name and value may be sent; otherwise the reason, for logs (a name that
// is empty or holds ':', CR, LF or NUL; a value that holds CR, LF or NUL).
std::string CheckHeaders(const HttpRequest& request);

// Appends the head of a POST of `body_size` bytes to `url` to `out`. REQUIRES: CheckHeaders(request)
// is empty and `url` was parsed from request.url.
void AppendRequestHead(const UrlParts& url, const HttpRequest& request, size_t body_size,
                       std::string* out);

}  // namespace hookrelay::deliverer::http

#endif  // HOOKRELAY_DELIVERER_HTTP_REQUEST_HEAD_H_
