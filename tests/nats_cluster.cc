#include "tests/nats_cluster.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include <nats/nats.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace hookrelay::test {
namespace {

// A port the OS picks as free on 127.0.0.1 (bound, then released for the server to take).
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string error = strerror(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("choosing a port: ", error));
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace

absl::StatusOr<std::string> NatsServerPath() {
  if (const char* env = getenv("HOOKRELAY_NATS_SERVER"); env != nullptr && env[0] != '\0') {
    return std::string(env);
  }
  const char* home = getenv("HOME");
  const std::string path = absl::StrCat(home != nullptr ? home : "", "/.cache/hookrelay-nats/",
                                        kNatsServerVersion, "/nats-server");
  if (access(path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no nats-server at ", path, ": run tools/bootstrap.sh (it builds ",
                     kNatsServerVersion, ") or set HOOKRELAY_NATS_SERVER"));
  }
  return path;
}

absl::StatusOr<std::unique_ptr<NatsCluster>> NatsCluster::Start(int nodes) {
  auto cluster = std::unique_ptr<NatsCluster>(new NatsCluster());
  absl::StatusOr<std::string> server = NatsServerPath();
  if (!server.ok()) return server.status();
  cluster->server_ = *std::move(server);
  const char* tmp = getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/nats_cluster_XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  cluster->dir_ = pattern;
  cluster->nodes_.resize(nodes);
  for (int i = 0; i < nodes; ++i) {
    Node& n = cluster->nodes_[i];
    n.name = absl::StrCat("n", i + 1);
    absl::StatusOr<int> client = FreePort();
    absl::StatusOr<int> route = FreePort();
    if (!client.ok()) return client.status();
    if (!route.ok()) return route.status();
    n.client_port = *client;
    n.route_port = *route;
  }
  for (int i = 0; i < nodes; ++i) {
    Node& n = cluster->nodes_[i];
    std::vector<std::string> routes;
    for (int j = 0; j < nodes; ++j) {
      if (j != i) routes.push_back(absl::StrCat("nats-route://127.0.0.1:", cluster->nodes_[j].route_port));
    }
    n.config_path = absl::StrCat(cluster->dir_, "/", n.name, ".conf");
    std::ofstream conf(n.config_path);
    conf << "server_name: " << n.name << "\n"
         << "listen: 127.0.0.1:" << n.client_port << "\n"
         << "jetstream {\n  store_dir: \"" << cluster->dir_ << "/" << n.name << "\"\n"
         << "  max_memory_store: 64MB\n  max_file_store: 1GB\n}\n";
    if (nodes > 1) {
      conf << "cluster {\n  name: hookrelay-test\n  listen: 127.0.0.1:" << n.route_port << "\n"
           << "  routes: [" << absl::StrJoin(routes, ", ") << "]\n}\n";
    }
    if (!conf.good()) return absl::InternalError(absl::StrCat("writing ", n.config_path));
  }
  for (int i = 0; i < nodes; ++i) {
    if (absl::Status st = cluster->StartNode(i); !st.ok()) return st;
  }
  if (absl::Status st = cluster->WaitForPlacement(); !st.ok()) return st;
  return cluster;
}

absl::Status NatsCluster::WaitForPlacement() {
  // "Server is ready" on every node does not mean the metadata leader can place a replicated
  // stream yet: it learns its peers' JetStream state from their stats messages, and one sent
  // before the routes were up is only repeated later. A stream created too early is refused with
  // "no suitable peers for placement". So a probe stream with one replica per node is created
  // (and deleted) until it is accepted.
  natsConnection* nc = nullptr;
  const natsStatus s = natsConnection_ConnectTo(&nc, urls().c_str());  // Comma-separated URLs.
  const std::string config = absl::StrCat(
      R"({"name":"HR_TEST_PROBE","subjects":["hr_test_probe"],"storage":"memory","num_replicas":)",
      size(), "}");
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::string last = s == NATS_OK ? "" : natsStatus_GetText(s);
  bool placed = false;
  while (s == NATS_OK && !placed && absl::Now() < deadline) {
    natsMsg* reply = nullptr;
    const natsStatus r = natsConnection_RequestString(
        &reply, nc, "$JS.API.STREAM.CREATE.HR_TEST_PROBE", config.c_str(), 5000);
    if (r == NATS_OK) {
      const std::string body(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
      natsMsg_Destroy(reply);
      placed = !absl::StrContains(body, R"("error")");
      last = body;
    } else {
      last = natsStatus_GetText(r);
    }
    if (!placed) absl::SleepFor(absl::Milliseconds(250));
  }
  if (placed) {
    natsMsg* reply = nullptr;
    if (natsConnection_RequestString(&reply, nc, "$JS.API.STREAM.DELETE.HR_TEST_PROBE", "",
                                     5000) == NATS_OK) {
      natsMsg_Destroy(reply);
    }
  }
  if (nc != nullptr) natsConnection_Destroy(nc);
  if (placed) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("the ", size(),
                                             "-node cluster cannot place a replicated stream "
                                             "within 60 s: ", last));
}

absl::Status NatsCluster::StartNode(int node) {
  Node& n = nodes_[node];
  absl::StatusOr<std::unique_ptr<ChildProcess>> p = ChildProcess::StartWhen(
      absl::StrCat("nats-", n.name), {server_, "-c", n.config_path},
      [](const std::string& line) { return absl::StrContains(line, "Server is ready"); },
      "log \"Server is ready\"", /*merge_stderr=*/true);
  if (!p.ok()) return p.status();
  n.process = *std::move(p);
  return absl::OkStatus();
}

NatsCluster::~NatsCluster() {
  for (Node& n : nodes_) {
    if (n.process == nullptr) continue;
    n.process->Signal(SIGTERM);
    n.process->Wait();
    n.process.reset();
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string NatsCluster::url(int node) const {
  return absl::StrCat("nats://127.0.0.1:", nodes_[node].client_port);
}

std::string NatsCluster::urls() const {
  std::vector<std::string> out;
  for (int i = 0; i < size(); ++i) out.push_back(url(i));
  return absl::StrJoin(out, ",");
}

absl::Status NatsCluster::Kill(int node) {
  Node& n = nodes_[node];
  if (n.process == nullptr) return absl::FailedPreconditionError(absl::StrCat(n.name, " is not running"));
  n.process->Signal(SIGKILL);
  n.process->Wait();
  n.process.reset();
  return absl::OkStatus();
}

absl::Status NatsCluster::Restart(int node) {
  if (nodes_[node].process != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(nodes_[node].name, " is running"));
  }
  return StartNode(node);
}

}  // namespace hookrelay::test
