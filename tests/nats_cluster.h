// A NATS JetStream cluster on loopback for tests (issue 12): N nats-server processes with
// JetStream, routes between them, a temporary store directory each, client and route ports
// chosen by the OS. Nodes can be killed (SIGKILL) and restarted on the same ports and store.
// The server binary is $HOOKRELAY_NATS_SERVER, else the pinned release tools/bootstrap.sh builds
// under ~/.cache/hookrelay-nats/. Test-only.
#ifndef HOOKRELAY_TESTS_NATS_CLUSTER_H_
#define HOOKRELAY_TESTS_NATS_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/child_process.h"

namespace hookrelay::test {

// The nats-server release the tests run (tools/bootstrap.sh installs it).
inline constexpr char kNatsServerVersion[] = "v2.14.9";

// The nats-server binary to run, or an error saying how to install it.
absl::StatusOr<std::string> NatsServerPath();

class NatsCluster {
 public:
  // Starts `nodes` servers (1 = no routes), waits until each logs that it is ready and until the
  // cluster can place a stream replicated on all of them.
  static absl::StatusOr<std::unique_ptr<NatsCluster>> Start(int nodes = 3);
  // Stops every node (SIGTERM, then waits) and removes the store directories.
  ~NatsCluster();

  int size() const { return static_cast<int>(nodes_.size()); }
  int client_port(int node) const { return nodes_[node].client_port; }
  // The node's server_name ("n1", "n2", ...): what JetStream reports as a stream's leader.
  const std::string& name(int node) const { return nodes_[node].name; }
  // "nats://127.0.0.1:p1,nats://127.0.0.1:p2,..." (for --nats_url and natsOptions_SetServers).
  std::string urls() const;
  std::string url(int node) const;
  bool running(int node) const { return nodes_[node].process != nullptr; }

  // kill -9 one node; Restart brings it back with the same ports and store directory.
  absl::Status Kill(int node);
  absl::Status Restart(int node);

 private:
  struct Node {
    std::string name;
    int client_port = 0;
    int route_port = 0;
    std::string config_path;
    std::unique_ptr<ChildProcess> process;
  };
  NatsCluster() = default;
  absl::Status StartNode(int node);
  // Waits until the cluster accepts a stream replicated on every node (at most 60 s).
  absl::Status WaitForPlacement();

  std::string server_;
  std::string dir_;
  std::vector<Node> nodes_;
};

}  // namespace hookrelay::test

#endif  // HOOKRELAY_TESTS_NATS_CLUSTER_H_
