#include "deliverer/collector_targets.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace hookrelay::deliverer {
namespace {

// Splits `host:port` / `[v6]:port`; the host keeps no brackets.
absl::Status SplitHostPort(absl::string_view spec, absl::string_view hostport, std::string* host,
                           std::string* port) {
  absl::string_view h;
  absl::string_view p;
  if (absl::StartsWith(hostport, "[")) {
    const size_t close = hostport.find(']');
    if (close == absl::string_view::npos || close + 1 >= hostport.size() ||
        hostport[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("--collector: \"", spec, "\" is not [ipv6]:port"));
    }
    h = hostport.substr(1, close - 1);
    p = hostport.substr(close + 2);
  } else {
    const size_t colon = hostport.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--collector: \"", spec, "\" has no port (host:port)"));
    }
    h = hostport.substr(0, colon);
    p = hostport.substr(colon + 1);
    if (h.find(':') != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--collector: \"", spec, "\": an IPv6 address needs brackets ([addr]:port)"));
    }
  }
  uint32_t n = 0;
  if (h.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--collector: \"", spec, "\" has no host"));
  }
  if (!absl::SimpleAtoi(p, &n) || n < 1 || n > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--collector: \"", spec, "\": port must be 1..65535"));
  }
  *host = std::string(h);
  *port = std::string(p);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CollectorTarget> ParseCollectorTarget(absl::string_view spec) {
  CollectorTarget target;
  target.spec = std::string(spec);
  absl::string_view rest = spec;
  if (absl::StartsWith(rest, "dns:///")) {
    rest.remove_prefix(7);
    target.dynamic = true;
  } else if (absl::StartsWith(rest, "dns://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--collector: \"", spec, "\": a DNS authority is not supported, use dns:///host:port"));
  } else if (absl::StartsWith(rest, "dns:")) {
    rest.remove_prefix(4);
    target.dynamic = true;
  } else if (rest.find("://") != absl::string_view::npos ||
             absl::StartsWith(rest, "ipv4:") || absl::StartsWith(rest, "ipv6:") ||
             absl::StartsWith(rest, "unix:")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--collector: \"", spec, "\": expected host:port or dns:///host:port"));
  }
  if (absl::Status st = SplitHostPort(spec, rest, &target.host, &target.port); !st.ok()) {
    return st;
  }
  return target;
}

absl::StatusOr<std::vector<std::string>> ResolveWithSystem(const std::string& host,
                                                           const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &list);
  if (rc != 0) {
    const std::string message = absl::StrCat("resolving ", host, ": ", gai_strerror(rc));
    if (rc == EAI_NONAME || rc == EAI_NODATA) return absl::NotFoundError(message);
    return absl::UnavailableError(message);
  }
  std::vector<std::string> endpoints;
  for (const addrinfo* a = list; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      if (inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text)) == nullptr) continue;
      endpoints.push_back(absl::StrCat(text, ":", port));
    } else if (a->ai_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      if (inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text)) == nullptr) continue;
      endpoints.push_back(absl::StrCat("[", text, "]:", port));
    }
  }
  freeaddrinfo(list);
  std::sort(endpoints.begin(), endpoints.end());
  endpoints.erase(std::unique(endpoints.begin(), endpoints.end()), endpoints.end());
  if (endpoints.empty()) return absl::NotFoundError(absl::StrCat("resolving ", host, ": no address"));
  return endpoints;
}

}  // namespace hookrelay::deliverer
