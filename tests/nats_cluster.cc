#include "tests/nats_cluster.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include <nats/nats.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collector/store/jetstream/nats_connect.h"

namespace hookrelay::test {
namespace {

// `count` ports the OS picks as free on 127.0.0.1, all different: every socket stays bound until
// all are chosen (a port released and picked again would give two servers one port), then all
// are released for the servers to take. Another process may still take one in between: Start
// then begins again on new ports.
absl::StatusOr<std::vector<int>> FreePorts(int count) {
  std::vector<int> fds;
  std::vector<int> ports;
  absl::Status status;
  for (int i = 0; i < count && status.ok(); ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      status = absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status = absl::InternalError(absl::StrCat("choosing a port: ", strerror(errno)));
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) close(fd);
  if (!status.ok()) return status;
  return ports;
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
  NatsClusterOptions options;
  options.nodes = nodes;
  return Start(std::move(options));
}

absl::StatusOr<std::unique_ptr<NatsCluster>> NatsCluster::Start(NatsClusterOptions options) {
  auto cluster = std::unique_ptr<NatsCluster>(new NatsCluster());
  cluster->options_ = std::move(options);
  const int nodes = cluster->options_.nodes;
  absl::StatusOr<std::string> server = NatsServerPath();
  if (!server.ok()) return server.status();
  cluster->server_ = *std::move(server);
  const char* tmp = getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/nats_cluster_XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  cluster->dir_ = pattern;
  if (cluster->options_.tls) {
    if (absl::Status st = cluster->MakePki(); !st.ok()) return st;
  }
  cluster->nodes_.resize(nodes);
  for (int i = 0; i < nodes; ++i) {
    Node& n = cluster->nodes_[i];
    n.name = absl::StrCat("n", i + 1);
    n.config_path = absl::StrCat(cluster->dir_, "/", n.name, ".conf");
  }
  // A node that cannot bind its ports (taken by another process since they were chosen) exits
  // before it is ready: the whole cluster starts again on new ports, a few times.
  constexpr int kAttempts = 3;
  absl::Status started;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    started = cluster->StartAllNodes();
    if (started.ok()) return cluster;
    cluster->StopAllNodes();
  }
  return absl::Status(started.code(), absl::StrCat("starting a ", nodes, "-node NATS cluster (",
                                                   kAttempts, " attempts): ", started.message()));
}

absl::Status NatsCluster::StartAllNodes() {
  const int nodes = size();
  absl::StatusOr<std::vector<int>> ports = FreePorts(2 * nodes);
  if (!ports.ok()) return ports.status();
  for (int i = 0; i < nodes; ++i) {
    nodes_[i].client_port = (*ports)[2 * i];
    nodes_[i].route_port = (*ports)[2 * i + 1];
    // A store left by an attempt that failed belongs to servers of other ports: start clean.
    std::error_code ignored;
    std::filesystem::remove_all(absl::StrCat(dir_, "/", nodes_[i].name), ignored);
  }
  for (int i = 0; i < nodes; ++i) {
    if (absl::Status st = WriteConfig(i); !st.ok()) return st;
  }
  for (int i = 0; i < nodes; ++i) {
    if (absl::Status st = StartNode(i); !st.ok()) return st;
  }
  return WaitForPlacement();
}

void NatsCluster::StopAllNodes() {
  for (Node& n : nodes_) {
    if (n.process == nullptr) continue;
    n.process->Signal(SIGKILL);
    n.process->Wait();
    n.process.reset();
  }
}

absl::Status NatsCluster::MakePki() {
  // One shell script of `openssl` commands, its output kept for errors. EC P-256 keys: fast.
  const std::string pki = absl::StrCat(dir_, "/pki");
  std::error_code ignored;
  std::filesystem::create_directories(pki, ignored);
  const std::string script = absl::StrCat(pki, "/make.sh");
  {
    std::ofstream out(script);
    out << "set -e\ncd '" << pki << "'\n"
        << "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out \"$1\"; }\n"
        << "ca() { key $1.key; openssl req -x509 -new -key $1.key -out $1.pem -days 2 "
           "-subj \"/CN=hookrelay test $1\" -addext basicConstraints=critical,CA:TRUE "
           "-addext keyUsage=critical,keyCertSign,cRLSign; }\n"
        << "leaf() { key $1.key; openssl req -new -key $1.key -out $1.csr -subj \"/CN=$1\";\n"
        << "  printf 'subjectAltName=%s\\nextendedKeyUsage=serverAuth,clientAuth\\n' \"$2\" "
           "> $1.ext;\n"
        << "  openssl x509 -req -in $1.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
           "-extfile $1.ext -out $1.pem; }\n"
        << "ca ca\nca other-ca\n"
        << "leaf server '" << options_.server_names << "'\n"
        << "leaf client 'DNS:hookrelay-collector'\n";
    if (!out.good()) return absl::InternalError(absl::StrCat("writing ", script));
  }
  const std::string log = absl::StrCat(pki, "/make.log");
  const int rc = std::system(absl::StrCat("sh '", script, "' >'", log, "' 2>&1").c_str());
  if (rc != 0) {
    std::ifstream in(log);
    const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return absl::InternalError(absl::StrCat("making test certificates with openssl failed: ",
                                            output));
  }
  return absl::OkStatus();
}

absl::Status NatsCluster::WriteConfig(int node) {
  const Node& n = nodes_[node];
  const int nodes = size();
  std::vector<std::string> routes;
  for (int j = 0; j < nodes; ++j) {
    if (j != node) routes.push_back(absl::StrCat("nats-route://127.0.0.1:", nodes_[j].route_port));
  }
  const std::string pki = absl::StrCat(dir_, "/pki");
  const std::string tls_block =
      absl::StrCat("  tls {\n    cert_file: \"", pki, "/server.pem\"\n    key_file: \"", pki,
                   "/server.key\"\n    ca_file: \"", pki, "/ca.pem\"\n    timeout: 5\n");
  // Written to a new file then renamed: a reload never reads half a file.
  const std::string tmp = n.config_path + ".new";
  std::ofstream conf(tmp);
  conf << "server_name: " << n.name << "\n"
       << "listen: 127.0.0.1:" << n.client_port << "\n"
       << "jetstream {\n  store_dir: \"" << dir_ << "/" << n.name << "\"\n"
       << "  max_memory_store: 64MB\n  max_file_store: 1GB\n}\n";
  if (options_.tls) {
    conf << "tls {\n" << tls_block.substr(tls_block.find('\n') + 1)
         << "    verify: " << (options_.verify_clients ? "true" : "false") << "\n}\n";
  }
  if (nodes > 1) {
    conf << "cluster {\n  name: hookrelay-test\n  listen: 127.0.0.1:" << n.route_port << "\n"
         << "  routes: [" << absl::StrJoin(routes, ", ") << "]\n";
    if (options_.no_advertise) conf << "  no_advertise: true\n";
    // Routes verify each other's certificates both ways.
    if (options_.tls) conf << tls_block << "  }\n";
    conf << "}\n";
  }
  conf << options_.auth_config << "\n";
  conf.close();
  if (!conf.good()) return absl::InternalError(absl::StrCat("writing ", tmp));
  std::error_code error;
  std::filesystem::rename(tmp, n.config_path, error);
  if (error) return absl::InternalError(absl::StrCat("renaming ", tmp, ": ", error.message()));
  return absl::OkStatus();
}

absl::StatusOr<natsConnection*> NatsCluster::Connect() const {
  natsOptions* opts = nullptr;
  natsStatus s = natsOptions_Create(&opts);
  std::vector<std::string> urls;
  for (int i = 0; i < size(); ++i) urls.push_back(url(i));
  std::vector<const char*> servers;
  for (const std::string& u : urls) servers.push_back(u.c_str());
  if (s == NATS_OK) s = natsOptions_SetServers(opts, servers.data(), static_cast<int>(servers.size()));
  if (s == NATS_OK && !options_.admin_user.empty()) {
    s = natsOptions_SetUserInfo(opts, options_.admin_user.c_str(),
                                options_.admin_password.c_str());
  }
  if (s == NATS_OK && !options_.admin_creds_file.empty()) {
    s = natsOptions_SetUserCredentialsFromFiles(opts, options_.admin_creds_file.c_str(), nullptr);
  }
  if (s == NATS_OK && options_.tls) {
    s = natsOptions_SetSecure(opts, true);
    if (s == NATS_OK) s = natsOptions_LoadCATrustedCertificates(opts, ca_file().c_str());
    if (s == NATS_OK && options_.verify_clients) {
      s = natsOptions_LoadCertificatesChain(opts, client_cert_file().c_str(),
                                            client_key_file().c_str());
    }
  }
  natsConnection* nc = nullptr;
  // A signed connect is retried as the collector's is (ConnectNats says why).
  collector::NatsConnectOptions signing;
  signing.creds_file = options_.admin_creds_file;
  if (s == NATS_OK) s = collector::ConnectNats(&nc, opts, signing);
  if (opts != nullptr) natsOptions_Destroy(opts);
  if (s != NATS_OK) {
    const char* detail = nats_GetLastError(nullptr);
    return absl::UnavailableError(absl::StrCat("connecting to the test cluster: ",
                                               natsStatus_GetText(s), " ",
                                               detail != nullptr ? detail : ""));
  }
  return nc;
}

absl::Status NatsCluster::Reconfigure(std::string auth_config) {
  options_.auth_config = std::move(auth_config);
  for (int i = 0; i < size(); ++i) {
    if (absl::Status st = WriteConfig(i); !st.ok()) return st;
  }
  for (Node& n : nodes_) {
    if (n.process == nullptr) continue;
    auto reloaded = [](const std::string& line) {
      return absl::StrContains(line, "Reloaded server configuration");
    };
    int before = 0;
    // Count the reloads logged so far, then wait for one more.
    const std::string output = n.process->Output();
    for (size_t at = output.find("Reloaded server configuration"); at != std::string::npos;
         at = output.find("Reloaded server configuration", at + 1)) {
      ++before;
    }
    n.process->Signal(SIGHUP);
    if (!n.process->WaitForLine(reloaded, before + 1)) {
      return absl::InternalError(absl::StrCat(n.name, " did not log a reload: ", n.process->Output()));
    }
  }
  return absl::OkStatus();
}

absl::Status NatsCluster::WaitForPlacement() {
  // "Server is ready" on every node does not mean the metadata leader can place a replicated
  // stream yet: it learns its peers' JetStream state from their stats messages, and one sent
  // before the routes were up is only repeated later. A stream created too early is refused with
  // "no suitable peers for placement". So a probe stream with one replica per node is created
  // (and deleted) until it is accepted.
  absl::StatusOr<natsConnection*> connected = Connect();
  natsConnection* nc = connected.ok() ? *connected : nullptr;
  const natsStatus s = connected.ok() ? NATS_OK : NATS_NO_SERVER;
  const std::string config = absl::StrCat(
      R"({"name":"HR_TEST_PROBE","subjects":["hr_test_probe"],"storage":"memory","num_replicas":)",
      size(), "}");
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::string last = connected.ok() ? "" : std::string(connected.status().message());
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
      // A clustered node is ready once its route listener is up: the client listener comes
      // first, and a route port already taken makes the server exit after "Server is ready".
      [clustered = size() > 1](const std::string& line) {
        return absl::StrContains(line, clustered ? "Listening for route connections"
                                                 : "Server is ready");
      },
      size() > 1 ? "log \"Listening for route connections\"" : "log \"Server is ready\"",
      /*merge_stderr=*/true);
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
