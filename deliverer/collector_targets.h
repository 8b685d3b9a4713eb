// Collector addresses as given to --collector, and their resolution into the endpoints a
// deliverer subscribes to.
//
// A plain `host:port` (or `[v6]:port`) is one collector: one stream, and gRPC resolves the
// name itself. `dns:///host:port` (also `dns:host:port`) stands for every address the name
// resolves to — on Kubernetes, the headless Service of the collector StatefulSet, one A/AAAA
// record per pod. The deliverer resolves such a target itself, opens one stream per address,
// and re-resolves it periodically, subscribing to new pods and dropping gone ones (SPEC §10).
// gRPC's own dns resolver would instead pick one address for one channel.
#ifndef HOOKRELAY_DELIVERER_COLLECTOR_TARGETS_H_
#define HOOKRELAY_DELIVERER_COLLECTOR_TARGETS_H_

#include <functional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace hookrelay::deliverer {

struct CollectorTarget {
  std::string spec;  // as given
  bool dynamic = false;
  // For a dynamic target: the name to resolve and the port every endpoint uses. For a static
  // one, `host:port` is the gRPC target.
  std::string host;
  std::string port;
};

// Parses one --collector entry. InvalidArgument naming the entry when it has no port, a port
// outside 1..65535, or an unsupported scheme.
absl::StatusOr<CollectorTarget> ParseCollectorTarget(absl::string_view spec);

// Resolves a name to endpoints `ip:port` / `[ip6]:port`, sorted, without duplicates.
using CollectorResolver =
    std::function<absl::StatusOr<std::vector<std::string>>(const std::string& host,
                                                           const std::string& port)>;

// The system resolver (getaddrinfo, TCP, IPv4 and IPv6). NotFound when the name has no address.
absl::StatusOr<std::vector<std::string>> ResolveWithSystem(const std::string& host,
                                                           const std::string& port);

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_COLLECTOR_TARGETS_H_
