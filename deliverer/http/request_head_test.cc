#include "deliverer/http/request_head.h"

#include <string>

#include "gtest/gtest.h"

#include "deliverer/http/url.h"

namespace hookrelay::deliverer::http {
namespace {

std::string Head(const HttpRequest& request, size_t body_size) {
  UrlParts url;
  std::string error;
  EXPECT_TRUE(ParseUrl(request.url, &url, &error)) << error;
  std::string out = "kept:";
  AppendRequestHead(url, request, body_size, &out);
  return out;
}

// The defaults, the caller's headers in order (an empty value as "Name:"), Content-Length last.
TEST(RequestHeadTest, DefaultsThenCallerHeaders) {
  HttpRequest request;
  request.url = "http://127.0.0.1:8080/hooks?a=1";
  request.headers = {{"X-Signature", "abc"}, {"X-Empty", ""}};
  EXPECT_EQ(Head(request, 17),
            "kept:POST /hooks?a=1 HTTP/1.1\r\n"
            "Host: 127.0.0.1:8080\r\n"
            "User-Agent: hookrelay/1.0\r\n"
            "Accept: */*\r\n"
            "Content-Type: application/json\r\n"
            "X-Signature: abc\r\n"
            "X-Empty:\r\n"
            "Content-Length: 17\r\n\r\n");
}

// The caller's User-Agent and Content-Type replace the sender's; framing headers and Expect of
// the caller are dropped; an empty path is "/".
TEST(RequestHeadTest, CallerReplacesDefaultsAndCannotFrame) {
  HttpRequest request;
  request.url = "https://a.example";
  request.headers = {{"content-type", "application/grpc"},
                     {"User-Agent", "custom"},
                     {"Content-Length", "5"},
                     {"Transfer-Encoding", "chunked"},
                     {"Expect", "100-continue"}};
  EXPECT_EQ(Head(request, 0),
            "kept:POST / HTTP/1.1\r\n"
            "Host: a.example\r\n"
            "Accept: */*\r\n"
            "content-type: application/grpc\r\n"
            "User-Agent: custom\r\n"
            "Content-Length: 0\r\n\r\n");
}

// User info in the URL becomes Basic authorization (percent-decoded; a missing password is empty).
TEST(RequestHeadTest, UserInfoIsBasicAuth) {
  HttpRequest request;
  request.url = "http://us%3Aer:p%40ss@a.example/x";
  EXPECT_NE(Head(request, 0).find("Authorization: Basic dXM6ZXI6cEBzcw==\r\n"), std::string::npos);
  request.url = "http://user@a.example/x";
  EXPECT_NE(Head(request, 0).find("Authorization: Basic dXNlcjo=\r\n"), std::string::npos);
  request.headers = {{"Authorization", "Bearer t"}};
  const std::string head = Head(request, 0);
  EXPECT_EQ(head.find("Basic"), std::string::npos);
  EXPECT_NE(head.find("Authorization: Bearer t\r\n"), std::string::npos);
}

// Header injection and malformed names are refused, naming the header.
TEST(RequestHeadTest, CheckHeadersRefusesInjection) {
  HttpRequest request;
  request.headers = {{"X-Ok", "fine"}};
  EXPECT_EQ(CheckHeaders(request), "");
  request.headers = {{"X-Evil", "a\r\nX-Injected: 1"}};
  EXPECT_EQ(CheckHeaders(request), "invalid header name or value for header \"X-Evil\"");
  request.headers = {{"X:Bad", "v"}};
  EXPECT_NE(CheckHeaders(request), "");
  request.headers = {{"", "v"}};
  EXPECT_NE(CheckHeaders(request), "");
  request.headers = {{"X-Nul", std::string("a\0b", 3)}};
  EXPECT_NE(CheckHeaders(request), "");
}

}  // namespace
}  // namespace hookrelay::deliverer::http
