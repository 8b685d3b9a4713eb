#include "deliverer/http/response_parser.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

#include <string>

#include "gtest/gtest.h"

namespace hookrelay::deliverer::http {
namespace {

// Feeds `bytes` in pieces of `piece` bytes (as reads would deliver them); returns the error.
boost::beast::error_code Feed(ResponseParser& parser, const std::string& bytes, size_t piece,
                              bool eof = false) {
  boost::beast::error_code ec;
  std::string pending;
  for (size_t i = 0; i < bytes.size() && !parser.is_done(); i += piece) {
    pending += bytes.substr(i, piece);
    const size_t used = parser.put(boost::asio::buffer(pending), ec);
    if (ec == boost::beast::http::error::need_more) {
      ec = {};
      continue;
    }
    if (ec) return ec;
    pending.erase(0, used);
  }
  if (eof && !parser.is_done()) parser.put_eof(ec);
  return ec;
}

// A Content-Length response: status, version and Retry-After (spaces trimmed, any case) kept.
TEST(ResponseParserTest, ContentLength) {
  std::string retry_after = "stale";
  ResponseParser parser(retry_after);
  EXPECT_EQ(retry_after, "");
  EXPECT_FALSE(Feed(parser,
                    "HTTP/1.1 503 Busy\r\nretry-AFTER:  120 \t\r\nContent-Length: 4\r\n\r\nbusy",
                    7));
  ASSERT_TRUE(parser.is_done());
  EXPECT_EQ(parser.status(), 503);
  EXPECT_EQ(parser.http_version(), 11);
  EXPECT_EQ(retry_after, "120");
  EXPECT_TRUE(parser.keep_alive());
}

// A chunked body is parsed and discarded; an HTTP-date Retry-After is kept as sent.
TEST(ResponseParserTest, Chunked) {
  std::string retry_after;
  ResponseParser parser(retry_after);
  EXPECT_FALSE(Feed(parser,
                    "HTTP/1.1 429 Too Many\r\nTransfer-Encoding: chunked\r\n"
                    "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n"
                    "5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n",
                    5));
  ASSERT_TRUE(parser.is_done());
  EXPECT_EQ(parser.status(), 429);
  EXPECT_EQ(retry_after, "Wed, 21 Oct 2015 07:28:00 GMT");
}

// A body far larger than any buffer (and than Beast's default limit) is accepted and dropped.
TEST(ResponseParserTest, LargeBodyHasNoLimit) {
  std::string retry_after;
  ResponseParser parser(retry_after);
  const std::string body(20 << 20, 'x');
  EXPECT_FALSE(Feed(parser,
                    "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                        "\r\n\r\n" + body,
                    64 * 1024));
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(parser.status(), 200);
}

// HTTP/1.0 without a length ends at the close and does not keep the connection.
TEST(ResponseParserTest, Http10UntilClose) {
  std::string retry_after;
  ResponseParser parser(retry_after);
  EXPECT_FALSE(Feed(parser, "HTTP/1.0 200 OK\r\n\r\nbody to the end", 4, /*eof=*/true));
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(parser.http_version(), 10);
  EXPECT_FALSE(parser.keep_alive());
}

// Garbage is an error, not a status.
TEST(ResponseParserTest, MalformedIsAnError) {
  std::string retry_after;
  ResponseParser parser(retry_after);
  EXPECT_TRUE(Feed(parser, "HTTP/9 banana\r\n\r\n", 64));
}

}  // namespace
}  // namespace hookrelay::deliverer::http
