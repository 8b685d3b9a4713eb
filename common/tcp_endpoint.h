// "host:port" / "[v6]:port" into a Boost.Asio endpoint, for the Beast servers (common/http_listener).
#ifndef HOOKRELAY_COMMON_TCP_ENDPOINT_H_
#define HOOKRELAY_COMMON_TCP_ENDPOINT_H_

#include <boost/asio/ip/tcp.hpp>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace hookrelay::common {

// `what` names the address in errors ("metrics address"). Port 0 is allowed (a free port). The
// host must be an IP address; an empty one (":8080") is 0.0.0.0. INVALID_ARGUMENT naming the address and the problem.
absl::Status ParseTcpEndpoint(const std::string& address, absl::string_view what,
                              boost::asio::ip::tcp::endpoint* endpoint);

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_TCP_ENDPOINT_H_
