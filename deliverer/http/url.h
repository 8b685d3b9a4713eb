// Splits a receiver URL into what the HTTP/1.1 transport needs: scheme, host, port, the request
// target and the user info, as views into the URL (no allocation). Also the key of a receiver
// host's connection slots and pool.
//
// Accepted: http:// and https:// (any case), an authority with optional user info, a host name,
// an IPv4 address or a bracketed IPv6 address, an optional port (1-65535), then an optional path
// and query; a fragment is dropped (never sent). Refused: other schemes, an empty host, a bad
// port, bytes below 0x21 or 0x7f anywhere in the URL (spaces, CR/LF, NUL, tabs). Pure functions.
#ifndef HOOKRELAY_DELIVERER_HTTP_URL_H_
#define HOOKRELAY_DELIVERER_HTTP_URL_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace hookrelay::deliverer::http {

struct UrlParts {
  bool tls = false;  // https
  // Without brackets for IPv6: what is resolved, verified and sent as SNI.
  std::string_view host;
  // host[:port] as written in the URL (brackets kept), the port only when it is not the scheme's
  // default: the Host header.
  std::string_view host_header;
  bool port_given = false;
  uint16_t port = 0;  // the scheme's default filled in
  std::string_view target;     // path and query; empty means "/"
  std::string_view user_info;  // percent-encoded user[:password], empty when none
};

// Parses `url`; on failure returns false and sets `error` to a text for logs.
bool ParseUrl(std::string_view url, UrlParts* parts, std::string* error);

// scheme://host:port in lower case, the default port filled in, user info dropped: the key of the
// host's connection slots (the same host spelled differently shares them). Replaces `key`'s
// contents (its capacity is reused).
void HostKey(const UrlParts& parts, std::string* key);

}  // namespace hookrelay::deliverer::http

#endif  // HOOKRELAY_DELIVERER_HTTP_URL_H_
