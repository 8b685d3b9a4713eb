#include "deliverer/http/url.h"

#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace hookrelay::deliverer::http {
namespace {

// The parts are views into `url`: string literals outlive them.
UrlParts MustParse(std::string_view url) {
  UrlParts parts;
  std::string error;
  EXPECT_TRUE(ParseUrl(url, &parts, &error)) << url << ": " << error;
  return parts;
}

std::string ErrorOf(const std::string& url) {
  UrlParts parts;
  std::string error;
  EXPECT_FALSE(ParseUrl(url, &parts, &error)) << url;
  return error;
}

std::string KeyOf(std::string_view url) {
  std::string key = "left over";
  HostKey(MustParse(url), &key);
  return key;
}

// Host, port, target and Host header of the usual shapes; the fragment is dropped.
TEST(UrlTest, SplitsTheParts) {
  UrlParts p = MustParse("https://hooks.example.com/a/b?x=1#frag");
  EXPECT_TRUE(p.tls);
  EXPECT_EQ(p.host, "hooks.example.com");
  EXPECT_EQ(p.port, 443);
  EXPECT_EQ(p.host_header, "hooks.example.com");
  EXPECT_EQ(p.target, "/a/b?x=1");

  p = MustParse("http://127.0.0.1:8080");
  EXPECT_FALSE(p.tls);
  EXPECT_EQ(p.host, "127.0.0.1");
  EXPECT_EQ(p.port, 8080);
  EXPECT_EQ(p.host_header, "127.0.0.1:8080");
  EXPECT_EQ(p.target, "");

  p = MustParse("HTTP://user:pa%40ss@[::1]:9000?q");
  EXPECT_EQ(p.host, "::1");
  EXPECT_EQ(p.port, 9000);
  EXPECT_EQ(p.host_header, "[::1]:9000");
  EXPECT_EQ(p.user_info, "user:pa%40ss");
  EXPECT_EQ(p.target, "?q");
}

// An explicit default port is left out of the Host header, as clients usually do.
TEST(UrlTest, DefaultPortLeftOutOfHostHeader) {
  EXPECT_EQ(MustParse("http://a.example:80/x").host_header, "a.example");
  EXPECT_EQ(MustParse("https://[2001:db8::1]:443/x").host_header, "[2001:db8::1]");
  EXPECT_EQ(MustParse("https://a.example:80/x").host_header, "a.example:80");
}

// Other schemes, empty hosts, bad ports and control bytes are refused with a reason.
TEST(UrlTest, RefusesWhatCannotBeSent) {
  EXPECT_EQ(ErrorOf("ftp://a.example/x"), "unsupported protocol \"ftp\": only http and https");
  EXPECT_EQ(ErrorOf("a.example/x"), "invalid URL: no scheme");
  EXPECT_EQ(ErrorOf("http:///x"), "invalid URL: no host");
  EXPECT_EQ(ErrorOf("http://a.example:0/"), "invalid URL: bad port");
  EXPECT_EQ(ErrorOf("http://a.example:65536/"), "invalid URL: bad port");
  EXPECT_EQ(ErrorOf("http://a.example:12x/"), "invalid URL: bad port");
  EXPECT_EQ(ErrorOf("http://[::1/"), "invalid URL: unterminated IPv6 address");
  EXPECT_EQ(ErrorOf("http://a.example/x y"), "invalid URL: contains a space or a control byte");
  EXPECT_EQ(ErrorOf(std::string("http://a.example/\r\nX: 1")),
            "invalid URL: contains a space or a control byte");
}

// The slot key: lower case, default port filled in, user info and path dropped.
TEST(UrlTest, HostKeyNormalises) {
  EXPECT_EQ(KeyOf("HTTPS://Hooks.Example.COM/a"), "https://hooks.example.com:443");
  EXPECT_EQ(KeyOf("http://user@127.0.0.1:8080/hooks"), "http://127.0.0.1:8080");
  EXPECT_EQ(KeyOf("http://[::1]/"), "http://[::1]:80");
  EXPECT_EQ(KeyOf("http://a.example:80/"), KeyOf("http://A.example/other"));
}

}  // namespace
}  // namespace hookrelay::deliverer::http
