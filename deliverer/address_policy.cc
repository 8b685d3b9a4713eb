#include "deliverer/address_policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace hookrelay::deliverer {
namespace {

constexpr std::string_view kUnspecified = "unspecified address";
constexpr std::string_view kLoopback = "loopback address";
constexpr std::string_view kPrivate = "private address (RFC 1918)";
constexpr std::string_view kShared = "shared address space (RFC 6598, carrier-grade NAT)";
constexpr std::string_view kLinkLocal = "link-local address";
constexpr std::string_view kMetadata = "cloud metadata address";
constexpr std::string_view kMulticast = "multicast address";
constexpr std::string_view kReserved = "reserved address";
constexpr std::string_view kUniqueLocal = "unique local address";
constexpr std::string_view kSiteLocal = "site-local address";
constexpr std::string_view kIpv4Compatible = "IPv4-compatible IPv6 address (deprecated)";
constexpr std::string_view kUnknownFamily = "not an IPv4 or IPv6 address";

// `ip` in host byte order is inside prefix/bits.
constexpr bool InV4(uint32_t ip, uint32_t prefix, int bits) {
  const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  return (ip & mask) == (prefix & mask);
}

constexpr uint32_t V4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return (a << 24) | (b << 16) | (c << 8) | d;
}

std::string_view V4Reason(uint32_t ip) {
  if (ip == V4(169, 254, 169, 254)) return kMetadata;
  if (InV4(ip, V4(0, 0, 0, 0), 8)) return kUnspecified;
  if (InV4(ip, V4(10, 0, 0, 0), 8)) return kPrivate;
  if (InV4(ip, V4(100, 64, 0, 0), 10)) return kShared;
  if (InV4(ip, V4(127, 0, 0, 0), 8)) return kLoopback;
  if (InV4(ip, V4(169, 254, 0, 0), 16)) return kLinkLocal;
  if (InV4(ip, V4(172, 16, 0, 0), 12)) return kPrivate;
  if (InV4(ip, V4(192, 168, 0, 0), 16)) return kPrivate;
  if (InV4(ip, V4(224, 0, 0, 0), 4)) return kMulticast;
  if (InV4(ip, V4(240, 0, 0, 0), 4)) return kReserved;
  return {};
}

uint32_t V4FromBytes(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

bool AllZero(const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

std::string_view V6Reason(const uint8_t* b) {
  // ::ffff:a.b.c.d (IPv4-mapped): what the kernel actually connects to is the IPv4 address.
  if (AllZero(b, 10) && b[10] == 0xff && b[11] == 0xff) return V4Reason(V4FromBytes(b + 12));
  // 64:ff9b::a.b.c.d (NAT64 well-known prefix): a NAT64 gateway forwards to the IPv4 address.
  static constexpr uint8_t kNat64[12] = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(b, kNat64, sizeof(kNat64)) == 0) return V4Reason(V4FromBytes(b + 12));
  if (AllZero(b, 12)) {
    const uint32_t low = V4FromBytes(b + 12);
    if (low == 0) return kUnspecified;
    if (low == 1) return kLoopback;
    return kIpv4Compatible;
  }
  // fd00:ec2::254, AWS's IPv6 instance metadata address.
  static constexpr uint8_t kAwsMetadata[16] = {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0,
                                               0,    0,    0,    0,    0, 0, 0x02, 0x54};
  if (std::memcmp(b, kAwsMetadata, sizeof(kAwsMetadata)) == 0) return kMetadata;
  if ((b[0] & 0xfe) == 0xfc) return kUniqueLocal;                  // fc00::/7
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return kLinkLocal;   // fe80::/10
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return kSiteLocal;   // fec0::/10
  if (b[0] == 0xff) return kMulticast;                             // ff00::/8
  return {};
}

}  // namespace

std::string_view ForbiddenAddressReason(const sockaddr* addr) {
  if (addr == nullptr) return kUnknownFamily;
  switch (addr->sa_family) {
    case AF_INET: {
      sockaddr_in in;
      std::memcpy(&in, addr, sizeof(in));  // `addr` need not be aligned for sockaddr_in
      return V4Reason(ntohl(in.sin_addr.s_addr));
    }
    case AF_INET6: {
      sockaddr_in6 in6;
      std::memcpy(&in6, addr, sizeof(in6));
      return V6Reason(in6.sin6_addr.s6_addr);
    }
    default:
      return kUnknownFamily;
  }
}

std::string FormatAddress(const sockaddr* addr) {
  if (addr == nullptr) return "(no address)";
  char text[INET6_ADDRSTRLEN] = {};
  switch (addr->sa_family) {
    case AF_INET: {
      sockaddr_in in;
      std::memcpy(&in, addr, sizeof(in));
      if (inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text)) != nullptr) return text;
      break;
    }
    case AF_INET6: {
      sockaddr_in6 in6;
      std::memcpy(&in6, addr, sizeof(in6));
      if (inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text)) != nullptr) return text;
      break;
    }
    default:
      break;
  }
  return absl::StrCat("(address family ", static_cast<int>(addr->sa_family), ")");
}

}  // namespace hookrelay::deliverer
