// A Beast response parser that keeps only what the deliverer needs of a receiver's answer: the
// status, the HTTP version and the Retry-After value; the body is parsed (Content-Length, chunked,
// or up to the close) and discarded as it arrives. Unlike http::response_parser it stores no
// header fields, so parsing a response allocates nothing (Retry-After's value is copied into a
// string the caller reuses).
//
// One parser per response: construct it in place (std::optional::emplace) for each. Not
// thread-safe.
#ifndef HOOKRELAY_DELIVERER_HTTP_RESPONSE_PARSER_H_
#define HOOKRELAY_DELIVERER_HTTP_RESPONSE_PARSER_H_

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/field.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace hookrelay::deliverer::http {

class ResponseParser final : public boost::beast::http::basic_parser<false> {
 public:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  // `retry_after` receives the Retry-After value (surrounding spaces and tabs removed; the last
  // one when there are several); it is cleared here. It must outlive the parser.
  explicit ResponseParser(std::string& retry_after) : retry_after_(retry_after) {
    retry_after_.clear();
    body_limit(boost::none);  // discarded as it arrives; the exchange's deadline bounds it
    header_limit(64 * 1024);
  }

  int status() const { return status_; }
  // 10 or 11.
  int http_version() const { return version_; }

 private:
  void on_request_impl(boost::beast::http::verb, string_view, string_view, int,
                       error_code& ec) override {
    ec = boost::beast::http::error::bad_method;  // a response parser never sees a request
  }
  void on_response_impl(int code, string_view, int version, error_code&) override {
    status_ = code;
    version_ = version;
  }
  void on_field_impl(boost::beast::http::field name, string_view, string_view value,
                     error_code&) override {
    if (name != boost::beast::http::field::retry_after) return;
    size_t begin = 0;
    size_t end = value.size();
    while (begin < end && (value[begin] == ' ' || value[begin] == '\t')) ++begin;
    while (end > begin && (value[end - 1] == ' ' || value[end - 1] == '\t')) --end;
    retry_after_.assign(value.data() + begin, end - begin);
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(string_view body, error_code&) override { return body.size(); }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code&) override {
    return body.size();
  }
  void on_finish_impl(error_code&) override {}

  std::string& retry_after_;
  int status_ = 0;
  int version_ = 0;
};

}  // namespace hookrelay::deliverer::http

#endif  // HOOKRELAY_DELIVERER_HTTP_RESPONSE_PARSER_H_
