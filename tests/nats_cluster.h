// A NATS JetStream cluster on loopback for tests (issue 12): N nats-server processes with
// JetStream, routes between them, a temporary store directory each, client and route ports
// chosen by the OS. Nodes can be killed (SIGKILL) and restarted on the same ports and store.
// Optionally with TLS on client and route connections (certificates made by the cluster) and
// with accounts, users and permissions (NatsClusterOptions). The server binary is
// $HOOKRELAY_NATS_SERVER, else the pinned release tools/bootstrap.sh builds
// under ~/.cache/hookrelay-nats/. Test-only.
#ifndef HOOKRELAY_TESTS_NATS_CLUSTER_H_
#define HOOKRELAY_TESTS_NATS_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/child_process.h"

struct __natsConnection;
typedef struct __natsConnection natsConnection;

namespace hookrelay::test {

// The nats-server release the tests run (tools/bootstrap.sh installs it).
inline constexpr char kNatsServerVersion[] = "v2.14.9";

// The nats-server binary to run, or an error saying how to install it.
absl::StatusOr<std::string> NatsServerPath();

struct NatsClusterOptions {
  int nodes = 3;
  // TLS on the client and the route ports, with certificates the cluster makes at start (the
  // `openssl` command): a CA (ca_file()), each server's certificate naming `server_names`
  // (subjectAltName syntax) and good for routes too, a client certificate (client_cert_file()),
  // and a second CA that signed nothing the servers use (other_ca_file()).
  bool tls = false;
  // With tls: clients must present a certificate signed by the CA.
  bool verify_clients = false;
  std::string server_names = "DNS:localhost,IP:127.0.0.1";
  // nats-server configuration added to every server (accounts, authorization); replaced at run
  // time by Reconfigure.
  std::string auth_config;
  // How the cluster's own connections (the placement probe, Connect()) authenticate when
  // auth_config asks for credentials: a user and password allowed everything JetStream needs.
  std::string admin_user;
  std::string admin_password;
  // Or a creds file (operator mode: tests/nats_jwt.h).
  std::string admin_creds_file;
  // The servers do not tell clients about each other (cluster `no_advertise`): a client given
  // one server's URL reconnects to that server only, so killing it cuts the client off.
  bool no_advertise = false;
};

class NatsCluster {
 public:
  // Starts `nodes` servers (1 = no routes), waits until each logs that it is ready and until the
  // cluster can place a stream replicated on all of them.
  static absl::StatusOr<std::unique_ptr<NatsCluster>> Start(int nodes = 3);
  static absl::StatusOr<std::unique_ptr<NatsCluster>> Start(NatsClusterOptions options);
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

  // With tls: PEM files made at start (see NatsClusterOptions::tls).
  std::string ca_file() const { return dir_ + "/pki/ca.pem"; }
  std::string other_ca_file() const { return dir_ + "/pki/other-ca.pem"; }
  std::string client_cert_file() const { return dir_ + "/pki/client.pem"; }
  std::string client_key_file() const { return dir_ + "/pki/client.key"; }
  // The cluster's temporary directory (removed with the cluster): a place for test files.
  const std::string& dir() const { return dir_; }

  // A connection as the admin user, over TLS when the cluster has it. The caller destroys it.
  absl::StatusOr<natsConnection*> Connect() const;

  // Replaces auth_config on every server and reloads it (SIGHUP), waiting until each logged the
  // reload. Clients no longer allowed are disconnected by the servers.
  absl::Status Reconfigure(std::string auth_config);

 private:
  struct Node {
    std::string name;
    int client_port = 0;
    int route_port = 0;
    std::string config_path;
    std::unique_ptr<ChildProcess> process;
  };
  NatsCluster() = default;
  absl::Status MakePki();
  absl::Status WriteConfig(int node);
  absl::Status StartNode(int node);
  // Chooses ports, writes the configs, starts every node and waits for placement.
  absl::Status StartAllNodes();
  void StopAllNodes();
  // Waits until the cluster accepts a stream replicated on every node (at most 60 s).
  absl::Status WaitForPlacement();

  NatsClusterOptions options_;
  std::string server_;
  std::string dir_;
  std::vector<Node> nodes_;
};

}  // namespace hookrelay::test

#endif  // HOOKRELAY_TESTS_NATS_CLUSTER_H_
