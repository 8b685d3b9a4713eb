// The JetStream engine against a NATS cluster that wants credentials and TLS (issue 24 §1): a
// 3-node loopback cluster with TLS on client and route connections (certificates made by the
// test), client certificates required, and an account whose users are a password user with
// hookrelay's permissions, an NKey user and the test's admin. The real collector binary, as
// users run it, with the right flags carries events to a receiver; with a wrong password, no
// credentials, an untrusted CA, a host name its certificate does not name or no client
// certificate it does not start, and its one error line says why (and holds no secret); bad
// flag combinations stop it before it connects; a password changed under a running collector
// shows in /readyz and gRPC health, then in /healthz once the client gives up. And decentralised
// auth: a cluster in operator mode (JWTs made by the test) takes the collector with a creds file
// of a user of its account, and refuses one of an account it does not know. Signed connects (an
// NKey, a creds file) succeed every time, not 255 times in 256 as with the client library alone.
#include <sys/wait.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nats/nats.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/nats_connect.h"
#include "collector/store/jetstream/nkey.h"
#include "deliverer/signer.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/collector_test_util.h"
#include "tests/nats_cluster.h"
#include "tests/nats_jwt.h"
#include "tests/pipeline_test_util.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {
namespace {

constexpr char kPassword[] = "hr-pass-7f3a9c";
constexpr char kAdminPassword[] = "admin-pass-19be";
constexpr char kSecret[] = "auth-s3cret";

// The account of the test: hookrelay's user may use JetStream's API, its own subjects (hr.>),
// its KV bucket and inboxes, nothing else.
std::string AuthConfig(const std::string& password, const std::string& nkey_user) {
  const std::string permissions =
      R"(permissions: { publish: { allow: ["$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$KV.hr_config.>", "hr.>"] }, subscribe: { allow: ["_INBOX.>", "hr.del.rec.>"] } })";
  return absl::StrCat("accounts {\n  HOOKRELAY {\n    jetstream: enabled\n    users: [\n",
                      "      { user: hookrelay, password: \"", password, "\", ", permissions, " }\n",
                      "      { nkey: ", nkey_user, ", ", permissions, " }\n",
                      "      { user: admin, password: \"", kAdminPassword, "\" }\n",
                      "    ]\n  }\n}\n");
}

// What a collector that must not start did: its exit code and its error line.
struct Refusal {
  int exit_code = -1;
  std::string line;
  std::string output;
};

Refusal RunRefused(const std::string& data_dir, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {RunfilesPath("collector/collector"), "--config=",
                                   absl::StrCat("--data_dir=", data_dir),
                                   "--grpc_address=127.0.0.1:0", "--http_address=127.0.0.1:0",
                                   "--metrics_address=127.0.0.1:0",
                                   "--admin_http_address=127.0.0.1:0"};
  args.insert(args.end(), flags.begin(), flags.end());
  Refusal r;
  auto p = ChildProcess::StartWhen(
      "refused-collector", args,
      [](const std::string& line) {
        return absl::StrContains(line, R"("level":"error")") ||
               absl::StrContains(line, "collector serving");
      },
      "an error line", /*merge_stderr=*/false);
  if (!p.ok()) {
    r.output = std::string(p.status().message());
    return r;
  }
  r.line = (*p)->ready_line();
  if (absl::StrContains(r.line, "collector serving")) (*p)->Signal(SIGKILL);
  const int status = (*p)->Wait();
  (*p)->WaitForEof();
  r.output = (*p)->Output();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(int grpc_port) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("hookrelay.v1.Collector");
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&context, request, &response);
  return s.ok() ? response.status() : grpc::health::v1::HealthCheckResponse::UNKNOWN;
}

HttpResponse Get(int port, const std::string& target) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(port);
  if (!c.ok()) return {};
  absl::StatusOr<HttpResponse> r = (*c)->Request("GET", target, "", {});
  return r.ok() ? *std::move(r) : HttpResponse{};
}

class JetStreamAuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<collector::NKeyPair> nkey = collector::NewNKey(collector::NKeyType::kUser);
    ASSERT_TRUE(nkey.ok()) << nkey.status();
    nkey_ = new collector::NKeyPair(*nkey);
    NatsClusterOptions options;
    options.nodes = 3;
    options.tls = true;
    options.verify_clients = true;
    // Only the address: a URL naming "localhost" does not match the certificate.
    options.server_names = "IP:127.0.0.1";
    options.auth_config = AuthConfig(kPassword, nkey_->public_key);
    options.admin_user = "admin";
    options.admin_password = kAdminPassword;
    absl::StatusOr<std::unique_ptr<NatsCluster>> cluster = NatsCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete nkey_;
    nkey_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    dir_ = MakeTempDir("jetstream-auth");
    ASSERT_TRUE(WriteFile(dir_ + "/password", absl::StrCat(kPassword, "\n")).ok());
    ASSERT_TRUE(WriteFile(dir_ + "/wrong-password", "not-the-password\n").ok());
    ASSERT_TRUE(WriteFile(dir_ + "/seed", nkey_->seed + "\n").ok());
  }

  // TLS flags with the client certificate the servers require.
  std::vector<std::string> Tls(const std::string& ca) const {
    return {absl::StrCat("--nats_tls_ca_file=", ca),
            absl::StrCat("--nats_tls_cert_file=", cluster_->client_cert_file()),
            absl::StrCat("--nats_tls_key_file=", cluster_->client_key_file())};
  }
  std::vector<std::string> Flags(std::vector<std::string> auth,
                                 std::vector<std::string> tls) const {
    std::vector<std::string> flags = {"--store=jetstream",
                                      absl::StrCat("--nats_url=", cluster_->urls()),
                                      "--nats_replicas=3"};
    flags.insert(flags.end(), auth.begin(), auth.end());
    flags.insert(flags.end(), tls.begin(), tls.end());
    return flags;
  }
  std::vector<std::string> PasswordAuth(const std::string& file) const {
    return {"--nats_user=hookrelay", absl::StrCat("--nats_password_file=", dir_, "/", file)};
  }

  static NatsCluster* cluster_;
  static collector::NKeyPair* nkey_;
  std::string dir_;
};

NatsCluster* JetStreamAuthTest::cluster_ = nullptr;
collector::NKeyPair* JetStreamAuthTest::nkey_ = nullptr;

// With the right password, CA and client certificate (and, on a second collector, the NKey
// seed) events go in and come out to the receiver, signed; then the servers change the password:
// the collector that used it reports itself not ready (/readyz, gRPC health) with the reason,
// and once its client stops reconnecting, not live (/healthz) either.
TEST_F(JetStreamAuthTest, RightCredentialsDeliverAndAChangedPasswordShowsInHealth) {
  auto receiver = receiver::WebhookReceiver::Start(receiver::WebhookReceiver::Options{}, nullptr);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  const std::string config = dir_ + "/config.yaml";
  ASSERT_TRUE(WriteFile(config, PipelineConfig({(*receiver)->Url()}, kSecret)).ok());

  auto by_password = StartCollectorProcess(
      config, dir_ + "/a", Flags(PasswordAuth("password"), Tls(cluster_->ca_file())));
  ASSERT_TRUE(by_password.ok()) << by_password.status();
  auto by_nkey = StartCollectorProcess(
      config, dir_ + "/b",
      Flags({absl::StrCat("--nats_nkey_seed_file=", dir_, "/seed")}, Tls(cluster_->ca_file())));
  ASSERT_TRUE(by_nkey.ok()) << by_nkey.status();
  auto deliverer = StartDelivererProcess(
      {(*by_password)->IntField("grpc_port"), (*by_nkey)->IntField("grpc_port")});
  ASSERT_TRUE(deliverer.ok()) << deliverer.status();

  std::set<std::string> sent;
  for (ChildProcess* c : {by_password->get(), by_nkey->get()}) {
    for (int i = 0; i < 10; ++i) {
      const std::string id = absl::StrCat("auth-", c->pid(), "-", i);
      absl::StatusOr<HttpResponse> r = HttpPost(
          c->IntField("http_port"), "/v1/track",
          absl::StrCat(R"({"userId":"u1","event":"Ordered","messageId":")", id, R"("})"), kWebKey);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->status, 200) << r->body;
      sent.insert(id);
    }
  }
  EXPECT_TRUE(WaitDelivered(**receiver, sent, absl::Seconds(30)))
      << DeliveredIds(**receiver).size() << " of " << sent.size();
  for (const receiver::ReceivedRequest& req : (*receiver)->Requests()) {
    EXPECT_EQ(req.Header("X-Signature"), deliverer::XSignature(kSecret, req.body));
  }
  const std::string started = (*by_password)->FindLine("job store opened");
  EXPECT_TRUE(absl::StrContains(started, "user hookrelay")) << started;
  EXPECT_FALSE(absl::StrContains((*by_password)->Output(), kPassword));

  // The servers now want another password: they drop the connection, and every reconnect is
  // refused. /readyz names the reason; gRPC health turns NOT_SERVING.
  const int http = (*by_password)->IntField("http_port");
  const int grpc_port = (*by_password)->IntField("grpc_port");
  ASSERT_EQ(Health(grpc_port), grpc::health::v1::HealthCheckResponse::SERVING);
  ASSERT_EQ(Get((*by_password)->IntField("metrics_port"), "/healthz").status, 200);
  ASSERT_TRUE(cluster_->Reconfigure(AuthConfig("a-new-password", nkey_->public_key)).ok());
  const int metrics = (*by_password)->IntField("metrics_port");
  auto refused = [&] {
    return Get(http, "/readyz").status == 503 && Get(metrics, "/readyz").status == 503 &&
           Health(grpc_port) == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline && !refused()) absl::SleepFor(absl::Milliseconds(50));
  const HttpResponse ready = Get(http, "/readyz");
  EXPECT_EQ(ready.status, 503) << ready.body;
  EXPECT_TRUE(absl::StrContains(absl::AsciiStrToLower(ready.body), "authorization")) << ready.body;
  EXPECT_EQ(Get(metrics, "/readyz").status, 503);
  EXPECT_EQ(Health(grpc_port), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  // The NKey user was not changed: that collector still serves.
  EXPECT_EQ(Get((*by_nkey)->IntField("http_port"), "/readyz").status, 200);
  EXPECT_FALSE(absl::StrContains((*by_password)->Output(), "a-new-password"));
  // Refused twice in a row by a server, the client stops reconnecting: only a restart mends
  // that, so the liveness probe (/healthz on the metrics address) fails; the other stays live.
  const std::string gave_up =
      "the NATS client closed the connection to the JetStream cluster and stopped reconnecting: "
      "the collector cannot store events until it is restarted";
  const absl::Time gave_up_by = absl::Now() + absl::Seconds(30);
  while (absl::Now() < gave_up_by && (*by_password)->FindLine(gave_up).empty()) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_FALSE((*by_password)->FindLine(gave_up).empty()) << (*by_password)->Output();
  const HttpResponse live = Get(metrics, "/healthz");
  EXPECT_EQ(live.status, 503) << live.body;
  EXPECT_TRUE(absl::StrContains(live.body, "restart the collector")) << live.body;
  EXPECT_EQ(Get((*by_nkey)->IntField("metrics_port"), "/healthz").status, 200);
  ASSERT_TRUE(cluster_->Reconfigure(AuthConfig(kPassword, nkey_->public_key)).ok());

  (*deliverer)->Signal(SIGTERM);
  EXPECT_EQ((*deliverer)->Wait(), 0);
  for (ChildProcess* c : {by_password->get(), by_nkey->get()}) {
    c->Signal(SIGTERM);
    EXPECT_EQ(c->Wait(), 0) << c->Output();
  }
}

// Refused at start, each with exit code 1 and one error line saying why, without the secret.
TEST_F(JetStreamAuthTest, RefusedConnectionsStopTheCollectorWithTheReason) {
  struct Case {
    std::string name;
    std::vector<std::string> flags;
    std::string reason;
  };
  std::string localhost_urls;
  for (int i = 0; i < cluster_->size(); ++i) {
    if (i > 0) localhost_urls += ",";
    localhost_urls += absl::StrCat("nats://localhost:", cluster_->client_port(i));
  }
  std::vector<std::string> wrong_host = Flags(PasswordAuth("password"), Tls(cluster_->ca_file()));
  wrong_host[1] = absl::StrCat("--nats_url=", localhost_urls);
  const std::vector<Case> cases = {
      {"wrong password", Flags(PasswordAuth("wrong-password"), Tls(cluster_->ca_file())),
       "the servers refused the credentials"},
      {"no credentials", Flags({}, Tls(cluster_->ca_file())),
       "the servers ask for credentials and none were given"},
      {"untrusted CA", Flags(PasswordAuth("password"), Tls(cluster_->other_ca_file())),
       "not signed by a trusted CA"},
      {"wrong host name", wrong_host, "does not name the host"},
      {"no client certificate",
       Flags(PasswordAuth("password"), {absl::StrCat("--nats_tls_ca_file=", cluster_->ca_file())}),
       "client certificate"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Refusal r = RunRefused(dir_ + "/refused", c.flags);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(absl::StrContains(r.line, "collector failed to start")) << r.line;
    EXPECT_TRUE(absl::StrContains(r.line, c.reason)) << r.line;
    EXPECT_FALSE(absl::StrContains(r.output, kPassword)) << r.output;
    EXPECT_FALSE(absl::StrContains(r.output, "not-the-password")) << r.output;
  }
}

// Flags that cannot work stop the collector before it connects: exit code 2 and a line naming
// the flag.
TEST_F(JetStreamAuthTest, BadFlagCombinationsAndFilesStopTheCollectorAtOnce) {
  ASSERT_TRUE(WriteFile(dir_ + "/empty", "").ok());
  ASSERT_TRUE(WriteFile(dir_ + "/not-creds", "just some text\n").ok());
  const std::string password = absl::StrCat("--nats_password_file=", dir_, "/password");
  struct Case {
    std::vector<std::string> flags;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {{password}, "--nats_password_file needs --nats_user"},
      {{"--nats_user=hookrelay"}, "--nats_user needs --nats_password_file"},
      {{"--nats_user=hookrelay", password, absl::StrCat("--nats_nkey_seed_file=", dir_, "/seed")},
       "give one way to authenticate"},
      {{absl::StrCat("--nats_tls_cert_file=", cluster_->client_cert_file())},
       "--nats_tls_cert_file needs --nats_tls_key_file"},
      {{absl::StrCat("--nats_token_file=", dir_, "/empty")}, "--nats_token_file"},
      {{"--nats_user=hookrelay", absl::StrCat("--nats_password_file=", dir_, "/missing")},
       "--nats_password_file"},
      {{absl::StrCat("--nats_creds_file=", dir_, "/missing.creds")}, "--nats_creds_file"},
      {{absl::StrCat("--nats_creds_file=", dir_, "/not-creds")},
       "is not a NATS credentials file"},
      {{absl::StrCat("--nats_nkey_seed_file=", dir_, "/password")}, "--nats_nkey_seed_file"},
      {{"--nats_user=hookrelay", password, absl::StrCat("--nats_tls_ca_file=", dir_, "/empty")},
       "--nats_tls_ca_file"},
      // Not about NATS, refused as early: the de-duplication window's range.
      {{"--nats_user=hookrelay", password, "--dedup_window=30s"},
       "--dedup_window=30s: allowed 1m to 30d"},
      {{"--nats_user=hookrelay", password, "--dedup_window=800h"},
       "--dedup_window=800h: allowed 1m to 30d"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    const Refusal r = RunRefused(dir_ + "/bad-flags", Flags(c.flags, {}));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(absl::StrContains(r.line, c.reason)) << r.line;
    EXPECT_FALSE(absl::StrContains(r.output, kPassword)) << r.output;
  }
}

// Operator mode (JWTs, a memory resolver): with --nats_creds_file of a user of the JetStream
// account the collector carries events to the receiver; with the creds of a user of an account
// the servers do not trust it does not start, and says the credentials were refused.
TEST(JetStreamCredsTest, CredsFileDeliversAndAnUntrustedOneIsRefused) {
  absl::StatusOr<NatsJwtSetup> jwt = MakeNatsJwtSetup();
  ASSERT_TRUE(jwt.ok()) << jwt.status();
  const std::string dir = MakeTempDir("jetstream-creds");
  ASSERT_TRUE(WriteFile(dir + "/hookrelay.creds", jwt->creds).ok());
  ASSERT_TRUE(WriteFile(dir + "/stranger.creds", jwt->foreign_creds).ok());
  NatsClusterOptions options;
  options.nodes = 1;
  options.auth_config = jwt->server_config;
  options.admin_creds_file = dir + "/hookrelay.creds";
  absl::StatusOr<std::unique_ptr<NatsCluster>> cluster = NatsCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto flags = [&](const std::string& creds) {
    return std::vector<std::string>{"--store=jetstream",
                                    absl::StrCat("--nats_url=", (*cluster)->urls()),
                                    "--nats_replicas=1", absl::StrCat("--nats_creds_file=", creds)};
  };

  auto receiver = receiver::WebhookReceiver::Start(receiver::WebhookReceiver::Options{}, nullptr);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  const std::string config = dir + "/config.yaml";
  ASSERT_TRUE(WriteFile(config, PipelineConfig({(*receiver)->Url()}, kSecret)).ok());
  auto collector = StartCollectorProcess(config, dir + "/c", flags(dir + "/hookrelay.creds"));
  ASSERT_TRUE(collector.ok()) << collector.status();
  auto deliverer = StartDelivererProcess({(*collector)->IntField("grpc_port")});
  ASSERT_TRUE(deliverer.ok()) << deliverer.status();
  std::set<std::string> sent;
  for (int i = 0; i < 10; ++i) {
    const std::string id = absl::StrCat("creds-", i);
    absl::StatusOr<HttpResponse> r = HttpPost(
        (*collector)->IntField("http_port"), "/v1/track",
        absl::StrCat(R"({"userId":"u1","event":"Ordered","messageId":")", id, R"("})"), kWebKey);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
    sent.insert(id);
  }
  EXPECT_TRUE(WaitDelivered(**receiver, sent, absl::Seconds(30)))
      << DeliveredIds(**receiver).size() << " of " << sent.size();

  const Refusal refused = RunRefused(dir + "/refused", flags(dir + "/stranger.creds"));
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(absl::StrContains(refused.line, "the servers refused the credentials"))
      << refused.line;
  const std::string marker = "-----BEGIN USER NKEY SEED-----\n";
  const size_t at = jwt->foreign_creds.find(marker) + marker.size();
  const std::string seed = jwt->foreign_creds.substr(at, jwt->foreign_creds.find('\n', at) - at);
  ASSERT_TRUE(absl::StartsWith(seed, "SU")) << seed;
  EXPECT_FALSE(absl::StrContains(refused.output, seed)) << refused.output;

  (*deliverer)->Signal(SIGTERM);
  EXPECT_EQ((*deliverer)->Wait(), 0);
  (*collector)->Signal(SIGTERM);
  EXPECT_EQ((*collector)->Wait(), 0);
}

// Debian's client library drops a nonce signature that starts with a 0 byte from CONNECT, so one
// signed connect in 256 is refused with good credentials (ConnectNats). 1,000 connects with an
// NKey to one server: without the retry at least one would be refused 98 times in 100.
TEST(JetStreamSignedConnectTest, EveryConnectWithAnNKeySucceeds) {
  absl::StatusOr<collector::NKeyPair> nkey = collector::NewNKey(collector::NKeyType::kUser);
  ASSERT_TRUE(nkey.ok()) << nkey.status();
  NatsClusterOptions options;
  options.nodes = 1;
  options.auth_config = absl::StrCat(
      "accounts {\n  A {\n    jetstream: enabled\n    users: [\n      { nkey: ", nkey->public_key,
      " }\n      { user: admin, password: \"", kAdminPassword, "\" }\n    ]\n  }\n}\n");
  options.admin_user = "admin";
  options.admin_password = kAdminPassword;
  absl::StatusOr<std::unique_ptr<NatsCluster>> cluster = NatsCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string dir = MakeTempDir("signed-connect");
  collector::NatsConnectOptions connect;
  connect.nkey_seed_file = dir + "/seed";
  ASSERT_TRUE(WriteFile(connect.nkey_seed_file, nkey->seed + "\n").ok());
  natsOptions* opts = nullptr;
  ASSERT_EQ(natsOptions_Create(&opts), NATS_OK);
  std::unique_ptr<natsOptions, decltype(&natsOptions_Destroy)> owned(opts, &natsOptions_Destroy);
  ASSERT_EQ(natsOptions_SetURL(opts, (*cluster)->url(0).c_str()), NATS_OK);
  ASSERT_TRUE(collector::ApplyNatsConnectOptions(connect, opts).ok());
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    natsConnection* nc = nullptr;
    const natsStatus s = collector::ConnectNats(&nc, opts, connect);
    if (s != NATS_OK) {
      ++refused;
      ADD_FAILURE() << "connect " << i << ": " << natsStatus_GetText(s);
    }
    if (nc != nullptr) natsConnection_Destroy(nc);
  }
  EXPECT_EQ(refused, 0);
}

}  // namespace
}  // namespace hookrelay::test
