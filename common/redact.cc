#include "common/redact.h"

#include <string>
#include <string_view>

namespace hookrelay::common {

std::string RedactUrl(std::string_view url) {
  std::string out;
  out.reserve(url.size() + 16);
  // scheme://
  std::string_view rest = url;
  if (const size_t scheme_end = rest.find("://"); scheme_end != std::string_view::npos) {
    out.append(rest.substr(0, scheme_end + 3));
    rest.remove_prefix(scheme_end + 3);
  }
  // authority: [userinfo@]host[:port]
  const size_t authority_end = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, authority_end);
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    out.append(kRedacted);
    out.append(authority.substr(at));
  } else {
    out.append(authority);
  }
  if (authority_end == std::string_view::npos) return out;
  rest.remove_prefix(authority_end);
  // path
  const size_t query_start = rest.find_first_of("?#");
  out.append(rest.substr(0, query_start));
  if (query_start == std::string_view::npos) return out;
  rest.remove_prefix(query_start);
  if (rest.front() == '?') {
    rest.remove_prefix(1);
    out.push_back('?');
    const size_t fragment = rest.find('#');
    std::string_view query = rest.substr(0, fragment);
    rest = fragment == std::string_view::npos ? std::string_view() : rest.substr(fragment);
    bool first = true;
    while (true) {
      const size_t amp = query.find('&');
      const std::string_view pair = query.substr(0, amp);
      if (!first) out.push_back('&');
      first = false;
      const size_t eq = pair.find('=');
      out.append(pair.substr(0, eq));
      if (eq != std::string_view::npos) {
        out.push_back('=');
        out.append(kRedacted);
      }
      if (amp == std::string_view::npos) break;
      query.remove_prefix(amp + 1);
    }
  }
  out.append(rest);  // The fragment, if any (never sent to the receiver).
  return out;
}

}  // namespace hookrelay::common
