// Redaction of receiver URLs for output meant for people (logs, CLI, admin reads of attempts):
// credentials in the user info and values in the query string are replaced, the rest is kept so
// that the URL still says where a request went.
//   https://user:pw@hooks.example.com/in?token=abc&v=2#x → https://redacted@hooks.example.com/in?token=redacted&v=redacted#x
#ifndef HOOKRELAY_COMMON_REDACT_H_
#define HOOKRELAY_COMMON_REDACT_H_

#include <string>
#include <string_view>

namespace hookrelay::common {

inline constexpr std::string_view kRedacted = "redacted";

// Works on any string: text that is not a URL comes back unchanged unless it has '@' before the
// first '/', or a '?'. Idempotent.
std::string RedactUrl(std::string_view url);

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_REDACT_H_
