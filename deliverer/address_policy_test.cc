#include "deliverer/address_policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace hookrelay::deliverer {
namespace {

// A parsed IPv4 or IPv6 literal, as curl hands it to the open-socket callback.
struct Address {
  sockaddr_storage storage{};
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

Address Parse(const std::string& text) {
  Address a;
  if (text.find(':') == std::string::npos) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(443);
    EXPECT_EQ(inet_pton(AF_INET, text.c_str(), &in.sin_addr), 1) << text;
    std::memcpy(&a.storage, &in, sizeof(in));
  } else {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(443);
    EXPECT_EQ(inet_pton(AF_INET6, text.c_str(), &in6.sin6_addr), 1) << text;
    std::memcpy(&a.storage, &in6, sizeof(in6));
  }
  return a;
}

struct Case {
  const char* address;
  const char* reason;  // "" = allowed
};

// Every refused range, at its edges, and the public neighbours just outside each.
TEST(AddressPolicyTest, ClassifiesEveryRange) {
  const Case cases[] = {
      // IPv4 refused.
      {"0.0.0.0", "unspecified address"},
      {"0.255.255.255", "unspecified address"},
      {"10.0.0.0", "private address (RFC 1918)"},
      {"10.255.255.255", "private address (RFC 1918)"},
      {"100.64.0.0", "shared address space (RFC 6598, carrier-grade NAT)"},
      {"100.127.255.255", "shared address space (RFC 6598, carrier-grade NAT)"},
      {"127.0.0.1", "loopback address"},
      {"127.255.255.254", "loopback address"},
      {"169.254.0.1", "link-local address"},
      {"169.254.169.254", "cloud metadata address"},
      {"172.16.0.0", "private address (RFC 1918)"},
      {"172.31.255.255", "private address (RFC 1918)"},
      {"192.168.0.1", "private address (RFC 1918)"},
      {"192.168.255.255", "private address (RFC 1918)"},
      {"224.0.0.1", "multicast address"},
      {"239.255.255.250", "multicast address"},
      {"240.0.0.1", "reserved address"},
      {"255.255.255.255", "reserved address"},
      // IPv4 allowed, including the neighbours of refused ranges.
      {"1.1.1.1", ""},
      {"8.8.8.8", ""},
      {"9.255.255.255", ""},
      {"11.0.0.0", ""},
      {"100.63.255.255", ""},
      {"100.128.0.0", ""},
      {"126.255.255.255", ""},
      {"128.0.0.0", ""},
      {"169.253.255.255", ""},
      {"169.255.0.0", ""},
      {"172.15.255.255", ""},
      {"172.32.0.0", ""},
      {"192.167.255.255", ""},
      {"192.169.0.0", ""},
      {"223.255.255.255", ""},
      // IPv6 refused.
      {"::", "unspecified address"},
      {"::1", "loopback address"},
      {"fc00::1", "unique local address"},
      {"fdff:ffff::1", "unique local address"},
      {"fd00:ec2::254", "cloud metadata address"},
      {"fe80::1", "link-local address"},
      {"febf:ffff::1", "link-local address"},
      {"fec0::1", "site-local address"},
      {"ff02::1", "multicast address"},
      {"::7f00:1", "IPv4-compatible IPv6 address (deprecated)"},
      // IPv4-mapped and NAT64 forms take the embedded IPv4 address's verdict.
      {"::ffff:127.0.0.1", "loopback address"},
      {"::ffff:10.1.2.3", "private address (RFC 1918)"},
      {"::ffff:172.20.0.1", "private address (RFC 1918)"},
      {"::ffff:192.168.1.1", "private address (RFC 1918)"},
      {"::ffff:169.254.169.254", "cloud metadata address"},
      {"::ffff:169.254.1.1", "link-local address"},
      {"::ffff:100.64.0.1", "shared address space (RFC 6598, carrier-grade NAT)"},
      {"::ffff:0.0.0.0", "unspecified address"},
      {"::ffff:224.0.0.1", "multicast address"},
      {"64:ff9b::127.0.0.1", "loopback address"},
      {"64:ff9b::10.0.0.1", "private address (RFC 1918)"},
      // IPv6 allowed.
      {"2001:4860:4860::8888", ""},
      {"2606:4700:4700::1111", ""},
      {"::ffff:8.8.8.8", ""},
      {"64:ff9b::8.8.8.8", ""},
      {"fbff:ffff::1", ""},
      {"fe00::1", ""},
      {"::2:0:0:1", ""},
  };
  for (const Case& c : cases) {
    const Address a = Parse(c.address);
    EXPECT_EQ(ForbiddenAddressReason(a.get()), std::string_view(c.reason)) << c.address;
    EXPECT_EQ(IsForbiddenAddress(a.get()), *c.reason != '\0') << c.address;
  }
}

// Families other than IPv4 and IPv6 are refused (fail closed), and so is a null address.
TEST(AddressPolicyTest, RefusesOtherFamilies) {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  EXPECT_TRUE(IsForbiddenAddress(reinterpret_cast<const sockaddr*>(&un)));
  EXPECT_EQ(ForbiddenAddressReason(reinterpret_cast<const sockaddr*>(&un)),
            "not an IPv4 or IPv6 address");
  EXPECT_TRUE(IsForbiddenAddress(nullptr));
}

// FormatAddress prints the address alone, in the usual text forms.
TEST(AddressPolicyTest, FormatsAddresses) {
  EXPECT_EQ(FormatAddress(Parse("127.0.0.1").get()), "127.0.0.1");
  EXPECT_EQ(FormatAddress(Parse("::1").get()), "::1");
  EXPECT_EQ(FormatAddress(Parse("::ffff:10.0.0.1").get()), "::ffff:10.0.0.1");
  EXPECT_EQ(FormatAddress(Parse("fd00:ec2::254").get()), "fd00:ec2::254");
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  EXPECT_EQ(FormatAddress(reinterpret_cast<const sockaddr*>(&un)), "(address family 1)");
}

}  // namespace
}  // namespace hookrelay::deliverer
