#include "common/redact.h"

#include <string>

#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

// User info and query values are replaced; scheme, host, port, path, parameter names and the
// fragment are kept; plain URLs and non-URLs pass unchanged; redacting twice changes nothing.
TEST(RedactUrlTest, HidesUserInfoAndQueryValues) {
  struct Case {
    std::string in, want;
  };
  const Case cases[] = {
      {"https://hooks.example.com/in", "https://hooks.example.com/in"},
      {"https://user:pw@hooks.example.com/in", "https://redacted@hooks.example.com/in"},
      {"http://token@10.0.0.1:8080", "http://redacted@10.0.0.1:8080"},
      {"https://h/p?token=abc&v=2", "https://h/p?token=redacted&v=redacted"},
      {"https://h/p?flag&k=", "https://h/p?flag&k=redacted"},
      {"https://u:p@h:1/a/b?x=1#frag", "https://redacted@h:1/a/b?x=redacted#frag"},
      {"https://h?k=v", "https://h?k=redacted"},
      {"https://h/p#only-fragment", "https://h/p#only-fragment"},
      {"https://a@b@h/p", "https://redacted@h/p"},
      {"", ""},
      {"not a url", "not a url"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(RedactUrl(c.in), c.want) << c.in;
    EXPECT_EQ(RedactUrl(RedactUrl(c.in)), c.want) << c.in;
  }
}

}  // namespace
}  // namespace hookrelay::common
