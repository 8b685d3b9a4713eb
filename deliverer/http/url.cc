#include "deliverer/http/url.h"

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace hookrelay::deliverer::http {
namespace {

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

}  // namespace

bool ParseUrl(std::string_view url, UrlParts* parts, std::string* error) {
  for (const char c : url) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) {
      *error = "invalid URL: contains a space or a control byte";
      return false;
    }
  }
  std::string_view rest;
  if (StartsWithIgnoreCase(url, "https://")) {
    parts->tls = true;
    rest = url.substr(8);
  } else if (StartsWithIgnoreCase(url, "http://")) {
    parts->tls = false;
    rest = url.substr(7);
  } else {
    const size_t colon = url.find("://");
    *error = colon == std::string_view::npos
                 ? std::string("invalid URL: no scheme")
                 : absl::StrCat("unsupported protocol \"",
                                std::string(url.substr(0, colon)), "\": only http and https");
    return false;
  }
  const size_t authority_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, authority_end);
  std::string_view tail =
      authority_end == std::string_view::npos ? std::string_view() : rest.substr(authority_end);
  if (const size_t fragment = tail.find('#'); fragment != std::string_view::npos) {
    tail = tail.substr(0, fragment);
  }
  parts->target = tail;
  parts->user_info = {};
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    parts->user_info = authority.substr(0, at);
    authority = authority.substr(at + 1);
  }
  parts->host_header = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      *error = "invalid URL: unterminated IPv6 address";
      return false;
    }
    parts->host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        *error = "invalid URL: bad authority";
        return false;
      }
      port = after.substr(1);
    }
    parts->port_given = !after.empty();
  } else {
    const size_t colon = authority.find(':');
    parts->host = authority.substr(0, colon);
    parts->port_given = colon != std::string_view::npos;
    if (parts->port_given) port = authority.substr(colon + 1);
  }
  if (parts->host.empty()) {
    *error = "invalid URL: no host";
    return false;
  }
  const uint16_t default_port = parts->tls ? 443 : 80;
  if (parts->port_given) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
        value > 65535) {
      *error = "invalid URL: bad port";
      return false;
    }
    parts->port = static_cast<uint16_t>(value);
    if (parts->port == default_port) {
      // The Host header leaves the scheme's default port out (as browsers and curl do).
      parts->host_header = authority.substr(0, authority.size() - port.size() - 1);
    }
  } else {
    parts->port = default_port;
  }
  return true;
}

void HostKey(const UrlParts& parts, std::string* key) {
  key->clear();
  key->append(parts.tls ? "https://" : "http://");
  const size_t host_start = key->size();
  const bool ipv6 = parts.host.find(':') != std::string_view::npos;
  if (ipv6) key->push_back('[');
  key->append(parts.host);
  if (ipv6) key->push_back(']');
  for (size_t i = host_start; i < key->size(); ++i) {
    (*key)[i] = absl::ascii_tolower(static_cast<unsigned char>((*key)[i]));
  }
  char port[8];
  const auto [end, ec] = std::to_chars(port, port + sizeof(port), parts.port);
  key->push_back(':');
  key->append(port, end);
}

}  // namespace hookrelay::deliverer::http
