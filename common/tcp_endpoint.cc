#include "common/tcp_endpoint.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace hookrelay::common {

absl::Status ParseTcpEndpoint(const std::string& address, absl::string_view what,
                              boost::asio::ip::tcp::endpoint* endpoint) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", address, "\": expected host:port"));
  }
  int port = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " \"", address, "\": port must be a number from 0 to 65535"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  boost::system::error_code ec;
  const boost::asio::ip::address ip = boost::asio::ip::make_address(host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(what, " \"", address, "\": ", ec.message()));
  *endpoint = boost::asio::ip::tcp::endpoint(ip, static_cast<unsigned short>(port));
  return absl::OkStatus();
}

}  // namespace hookrelay::common
