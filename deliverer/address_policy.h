// Which network addresses the deliverer refuses to POST to unless private networks are allowed
// (SPEC §5: a customer's receiver URL must not reach the deliverer's own network).
//
// The check is applied to the address a connection is actually opened to (after DNS), so a name
// that resolves differently between a check and the connect (DNS rebinding) gains nothing.
//
// Refused:
//   IPv4: 0.0.0.0/8 (unspecified), 10/8, 172.16/12, 192.168/16 (RFC 1918), 100.64/10 (shared
//         address space, carrier-grade NAT), 127/8 (loopback), 169.254/16 (link-local, including
//         the 169.254.169.254 cloud metadata address), 224/4 (multicast), 240/4 (reserved,
//         including the broadcast address).
//   IPv6: :: (unspecified), ::1 (loopback), fc00::/7 (unique local, including the fd00:ec2::254
//         metadata address), fe80::/10 (link-local), fec0::/10 (deprecated site-local),
//         ff00::/8 (multicast), and the IPv4 forms embedded in IPv6 whose IPv4 address is refused:
//         IPv4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::a.b.c.d; every other IPv4-compatible ::a.b.c.d
//         (deprecated) is refused outright.
//   Any address family other than AF_INET and AF_INET6 (fail closed).
//
// Pure functions, thread-safe, never allocate except FormatAddress.
#ifndef HOOKRELAY_DELIVERER_ADDRESS_POLICY_H_
#define HOOKRELAY_DELIVERER_ADDRESS_POLICY_H_

#include <sys/socket.h>

#include <string>
#include <string_view>

namespace hookrelay::deliverer {

// Why `addr` is refused ("loopback address", "private address (RFC 1918)", ...), or an empty view
// when it is allowed. The view refers to a static string. REQUIRES: `addr` points to a complete
// sockaddr_in or sockaddr_in6 when its family says so.
std::string_view ForbiddenAddressReason(const sockaddr* addr);

// ForbiddenAddressReason(addr) is non-empty.
inline bool IsForbiddenAddress(const sockaddr* addr) { return !ForbiddenAddressReason(addr).empty(); }

// The address without port: "127.0.0.1", "::ffff:10.0.0.1", "fe80::1"; "(address family N)" for
// another family.
std::string FormatAddress(const sockaddr* addr);

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_ADDRESS_POLICY_H_
