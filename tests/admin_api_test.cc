// The setup flow at run time (SPEC §9, docs/ADMIN_API.md) against the real binaries: a collector
// started with no --config, a deliverer, real receivers on 127.0.0.1. Through the JSON API:
// source + write key + destination → a delivered, signed event; limits refused naming the field
// and the limit with nothing changed; a revoked key refused at once; a disabled destination
// receives nothing; a changed URL takes effect for the next event; all of it survives a restart.
// Plus: the test event, authentication (token, loopback), file objects read-only, gRPC errors with
// BadRequest details, secrets absent from reads and logs.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <set>
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "deliverer/signer.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/admin.grpc.pb.h"
#include "hookrelay/v1/collector.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/collector_test_util.h"
#include "tests/test_engines.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {
namespace {

using receiver::WebhookReceiver;

constexpr char kToken[] = "adm1n-t0ken-for-tests";
constexpr char kSecret[] = "sh4red-s3cret-value";

// The admin HTTP API of one collector process.
class Admin {
 public:
  Admin(int port, std::string token) : port_(port), token_(std::move(token)) {}

  HttpResponse Call(std::string_view method, std::string_view target, std::string_view body = "",
                    std::optional<std::string> token = std::nullopt) {
    absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(port_);
    if (!c.ok()) {
      ADD_FAILURE() << c.status();
      return {};
    }
    HttpHeaders headers;
    const std::string t = token.value_or(token_);
    if (!t.empty()) headers.emplace_back("Authorization", absl::StrCat("Bearer ", t));
    if (!body.empty()) headers.emplace_back("Content-Type", "application/json");
    absl::StatusOr<HttpResponse> r = (*c)->Request(method, target, body, headers);
    if (!r.ok()) {
      ADD_FAILURE() << method << " " << target << ": " << r.status();
      return {};
    }
    return *std::move(r);
  }

 private:
  const int port_;
  const std::string token_;
};

std::string DestinationJson(const std::string& id, const std::string& url, bool enabled) {
  return absl::StrCat(R"({"id":")", id, R"(","type":"webhooks","sources":["shop"],"enabled":)",
                      enabled ? "true" : "false", R"(,"sharedSecret":")", kSecret,
                      R"(","urls":[{"url":")", url, R"(","headers":{"X-Api-Key":"k1"}}]})");
}

// Every test runs on both job-store engines (tests/test_engines.h).
class AdminApiTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_flags_ = CollectorEngineFlags(*engine);
    dir_ = MakeTempDir("admin-api");
    token_file_ = dir_ + "/admin-token";
    ASSERT_TRUE(WriteFile(token_file_, absl::StrCat(kToken, "\n")).ok());
    auto a = WebhookReceiver::Start(WebhookReceiver::Options{});
    ASSERT_TRUE(a.ok()) << a.status();
    receiver_a_ = *std::move(a);
    auto b = WebhookReceiver::Start(WebhookReceiver::Options{});
    ASSERT_TRUE(b.ok()) << b.status();
    receiver_b_ = *std::move(b);
  }

  void StartCollector(const std::string& config = "") {
    std::vector<std::string> flags = engine_flags_;
    flags.push_back(absl::StrCat("--admin_token_file=", token_file_));
    auto c = StartCollectorProcess(config, dir_ + "/data", flags);
    ASSERT_TRUE(c.ok()) << c.status();
    collector_ = *std::move(c);
    admin_ = std::make_unique<Admin>(collector_->IntField("admin_http_port"), kToken);
    ASSERT_GT(collector_->IntField("admin_http_port"), 0);
  }

  void StartDeliverer() {
    auto d = StartDelivererProcess({collector_->IntField("grpc_port")},
                                   {absl::StrCat("--admin_token_file=", token_file_)});
    ASSERT_TRUE(d.ok()) << d.status();
    deliverer_ = *std::move(d);
  }

  void StopAll() {
    if (deliverer_) {
      deliverer_->Signal(SIGTERM);
      EXPECT_EQ(deliverer_->Wait(), 0);
      deliverer_.reset();
    }
    if (collector_) {
      collector_->Signal(SIGTERM);
      EXPECT_EQ(collector_->Wait(), 0);
    }
  }

  void TearDown() override { StopAll(); }

  absl::StatusOr<HttpResponse> Track(const std::string& write_key, const std::string& message_id) {
    return HttpPost(collector_->IntField("http_port"), "/v1/track",
                    absl::StrCat(R"({"userId":"u1","event":"Ordered","messageId":")", message_id,
                                 R"("})"),
                    write_key);
  }

  // Waits until `receiver` got a request whose body has `message_id`; returns it.
  std::optional<receiver::ReceivedRequest> WaitFor(WebhookReceiver& receiver,
                                                   const std::string& message_id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      for (const auto& r : receiver.Requests()) {
        if (absl::StrContains(r.body, message_id)) return r;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return std::nullopt;
  }

  std::vector<std::string> engine_flags_;
  std::string dir_;
  std::string token_file_;
  std::unique_ptr<WebhookReceiver> receiver_a_;
  std::unique_ptr<WebhookReceiver> receiver_b_;
  std::unique_ptr<ChildProcess> collector_;
  std::unique_ptr<ChildProcess> deliverer_;
  std::unique_ptr<Admin> admin_;
};

TEST_P(AdminApiTest, SetupFlowFromAnEmptyCollector) {
  StartCollector();
  StartDeliverer();

  // Catalog.
  HttpResponse r = admin_->Call("GET", "/admin/v1/catalog");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/destinationTypes/0/name"), "Webhooks");
  EXPECT_EQ(JsonAt(r.body, "/destinationTypes/0/maxUrls"), "5");

  // A source; its write key is generated.
  r = admin_->Call("POST", "/admin/v1/sources", R"({"id":"shop","name":"Shop","kind":"server"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key = JsonStr(r.body, "/writeKeys/0");
  EXPECT_EQ(key.size(), 35u) << r.body;  // wk_ + 32
  EXPECT_EQ(JsonStr(r.body, "/managedBy"), "api");
  r = admin_->Call("POST", "/admin/v1/sources", R"({"id":"shop","name":"Again","kind":"web"})");
  EXPECT_EQ(r.status, 409) << r.body;

  // A destination, enabled, with a header and a shared secret.
  r = admin_->Call("POST", "/admin/v1/destinations",
                   DestinationJson("orders", receiver_a_->Url(), true));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonAt(r.body, "/sharedSecretSet"), "true");
  EXPECT_FALSE(absl::StrContains(r.body, kSecret)) << r.body;
  EXPECT_EQ(JsonAt(r.body, "/enabled"), "true");

  // An event is delivered, signed, with the static header.
  absl::StatusOr<HttpResponse> t = Track(key, "flow-1");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->status, 200) << t->body;
  std::optional<receiver::ReceivedRequest> got = WaitFor(*receiver_a_, "flow-1");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->Header("X-Signature"), deliverer::XSignature(kSecret, got->body));
  EXPECT_EQ(got->Header("X-Api-Key"), "k1");

  // The test event: each URL's status and latency; not an ingested event.
  r = admin_->Call("POST", "/admin/v1/destinations/orders:test", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/outcome"), "delivered") << r.body;
  EXPECT_EQ(JsonAt(r.body, "/results/0/status"), "200") << r.body;
  EXPECT_NE(JsonAt(r.body, "/results/0/latencyMs"), "<missing>") << r.body;
  const std::string test_id = JsonStr(r.body, "/messageId");
  std::optional<receiver::ReceivedRequest> test_request = WaitFor(*receiver_a_, test_id);
  ASSERT_TRUE(test_request.has_value());
  EXPECT_EQ(test_request->Header("X-Signature"),
            deliverer::XSignature(kSecret, test_request->body));

  // Stats count the delivery.
  r = admin_->Call("GET", "/admin/v1/destinations/orders");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/stats/delivered"), "1") << r.body;

  // A changed URL takes effect for the next event.
  r = admin_->Call("PATCH", "/admin/v1/destinations/orders",
                   absl::StrCat(R"({"urls":[{"url":")", receiver_b_->Url(), R"("}]})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonAt(r.body, "/sharedSecretSet"), "true");  // untouched by the PATCH
  t = Track(key, "flow-2");
  ASSERT_TRUE(t.ok() && t->status == 200);
  got = WaitFor(*receiver_b_, "flow-2");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->Header("X-Signature"), deliverer::XSignature(kSecret, got->body));

  // Disabled: nothing more arrives (the event is accepted, no job is made).
  r = admin_->Call("PATCH", "/admin/v1/destinations/orders", R"({"enabled":false})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonAt(r.body, "/enabled"), "false");
  // (Checked below, once flow-6, sent after the destination is enabled again, has arrived.)
  t = Track(key, "flow-3");
  ASSERT_TRUE(t.ok() && t->status == 200);

  // Rotate: a new key works, the revoked one is refused at once.
  r = admin_->Call("POST", "/admin/v1/sources/shop/write-keys", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key2 = JsonStr(r.body, "/writeKey");
  r = admin_->Call("DELETE", absl::StrCat("/admin/v1/sources/shop/write-keys/", key));
  ASSERT_EQ(r.status, 200) << r.body;
  const absl::Time revoked = absl::Now();
  t = Track(key, "flow-4");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->status, 401) << t->body;
  EXPECT_LT(absl::Now() - revoked, absl::Seconds(1));
  t = Track(key2, "flow-5");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->status, 200) << t->body;
  // The last key cannot be revoked.
  r = admin_->Call("DELETE", absl::StrCat("/admin/v1/sources/shop/write-keys/", key2));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/error/code"), "FAILED_PRECONDITION");

  // Enabled again, then a restart: everything is still there.
  r = admin_->Call("PATCH", "/admin/v1/destinations/orders", R"({"enabled":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  // Every change was audited; secrets never reached the log.
  EXPECT_TRUE(collector_->WaitForMsg("admin change", 7));
  EXPECT_FALSE(absl::StrContains(collector_->Output(), kSecret));
  EXPECT_FALSE(absl::StrContains(collector_->Output(), kToken));
  EXPECT_FALSE(absl::StrContains(collector_->Output(), key2));
  StopAll();
  StartCollector();
  StartDeliverer();
  r = admin_->Call("GET", "/admin/v1/sources/shop");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonAt(r.body, "/writeKeys"), absl::StrCat(R"([")", key2, R"("])"));
  r = admin_->Call("GET", "/admin/v1/destinations/orders");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/urls/0/url"), receiver_b_->Url());
  t = Track(key2, "flow-6");
  ASSERT_TRUE(t.ok() && t->status == 200);
  got = WaitFor(*receiver_b_, "flow-6");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->Header("X-Signature"), deliverer::XSignature(kSecret, got->body));
  // Accepted while the destination was disabled: no job was made, so nothing came before flow-6.
  for (const auto& request : receiver_b_->Requests()) {
    EXPECT_FALSE(absl::StrContains(request.body, "flow-3")) << request.body;
    EXPECT_FALSE(absl::StrContains(request.body, "flow-5")) << request.body;
  }
  t = Track(key, "flow-7");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->status, 401);
  EXPECT_FALSE(absl::StrContains(collector_->Output(), kSecret));
}

// SPEC §6 through the real processes: an audience created through the API sends one signed
// identify per member with context.personas; a later sync only the change; a deletion sends the
// delete body exactly, purges, and the member count drops with no identify following.
TEST_P(AdminApiTest, AudiencesAndDeletionsEndToEnd) {
  StartCollector();
  StartDeliverer();
  HttpResponse r =
      admin_->Call("POST", "/admin/v1/sources", R"({"id":"shop","name":"Shop","kind":"server"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key = JsonStr(r.body, "/writeKeys/0");
  r = admin_->Call("POST", "/admin/v1/destinations",
                   DestinationJson("orders", receiver_a_->Url(), true));
  ASSERT_EQ(r.status, 200) << r.body;
  auto post = [&](const std::string& path, const std::string& body) {
    absl::StatusOr<HttpResponse> t = HttpPost(collector_->IntField("http_port"), path, body, key);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->status, 200) << t->body;
  };
  post("/v1/identify", R"({"userId":"ada","traits":{"plan":"pro"},"messageId":"id-ada"})");
  post("/v1/identify", R"({"userId":"bob","traits":{"plan":"free"},"messageId":"id-bob"})");
  ASSERT_TRUE(WaitFor(*receiver_a_, "id-bob").has_value());

  // Bad input names the field.
  r = admin_->Call("POST", "/admin/v1/audiences",
                   R"({"name":"Pro","sources":["shop"],"rule":{"match":"all","conditions":[)"
                   R"({"trait":"plan","op":"like","value":"pro"}]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, "rule.conditions[0].op")) << r.body;
  r = admin_->Call("POST", "/admin/v1/audiences",
                   R"({"name":"Pro","sources":["nope"],"rule":{"match":"all","conditions":[)"
                   R"({"trait":"plan","op":"eq","value":"pro"}]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, R"(unknown source \"nope\")")) << r.body;

  // validate_only: the audience as it would be, its trait included; the same errors; nothing saved.
  r = admin_->Call("POST", "/admin/v1/audiences?validate_only=true",
                   R"({"name":"Pro Customers!","sources":["shop"],"rule":{"match":"all",)"
                   R"("conditions":[{"trait":"plan","op":"eq","value":"pro"}]}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/trait"), "pro_customers");
  EXPECT_EQ(JsonStr(r.body, "/id"), "") << r.body;  // None chosen: the create picks one.
  EXPECT_EQ(JsonAt(r.body, "/lastSync"), "<missing>") << r.body;
  r = admin_->Call("POST", "/admin/v1/audiences?validate_only=true",
                   R"({"name":"!!","sources":["shop"],"rule":{"match":"all",)"
                   R"("conditions":[{"trait":"plan","op":"eq","value":"pro"}]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, R"("field":"name")")) << r.body;
  r = admin_->Call("POST", "/admin/v1/audiences?validate_only=maybe", "{}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, "validateOnly")) << r.body;
  r = admin_->Call("GET", "/admin/v1/audiences");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string listed = JsonAt(r.body, "/audiences");
  EXPECT_TRUE(listed == "<missing>" || listed == "[]") << r.body;  // Nothing saved.

  r = admin_->Call("POST", "/admin/v1/audiences",
                   R"({"id":"pro","name":"Pro Customers!","sources":["shop"],"rule":{"match":"all",)"
                   R"("conditions":[{"trait":"plan","op":"eq","value":"pro"}]}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/trait"), "pro_customers");
  EXPECT_EQ(JsonStr(r.body, "/members"), "1");
  EXPECT_EQ(JsonAt(r.body, "/lastSync/first"), "true");
  std::optional<receiver::ReceivedRequest> identify = WaitFor(*receiver_a_, "pro_customers");
  ASSERT_TRUE(identify.has_value());
  EXPECT_EQ(JsonStr(identify->body, "/type"), "identify");
  EXPECT_EQ(JsonStr(identify->body, "/userId"), "ada");
  EXPECT_EQ(JsonAt(identify->body, "/traits/pro_customers"), "true");
  EXPECT_EQ(JsonStr(identify->body, "/context/personas/computation_class"), "audience");
  EXPECT_EQ(JsonStr(identify->body, "/context/personas/computation_key"), "pro_customers");
  EXPECT_EQ(JsonStr(identify->body, "/context/personas/computation_id"), "pro");
  EXPECT_EQ(identify->Header("X-Signature"), deliverer::XSignature(kSecret, identify->body));

  // bob upgrades: the next sync (on demand) sends bob only.
  post("/v1/identify", R"({"userId":"bob","traits":{"plan":"pro"},"messageId":"id-bob-2"})");
  ASSERT_TRUE(WaitFor(*receiver_a_, "id-bob-2").has_value());
  const int64_t before_sync = receiver_a_->request_count();
  r = admin_->Call("POST", "/admin/v1/audiences/pro:sync", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/members"), "2");
  EXPECT_EQ(JsonStr(r.body, "/lastSync/evaluated"), "1");
  EXPECT_EQ(JsonStr(r.body, "/lastSync/entered"), "1");
  // A track sent after the sync is the barrier: the sync's identifies were enqueued before it.
  post("/v1/track", R"({"userId":"carol","event":"Barrier","messageId":"barrier-1"})");
  ASSERT_TRUE(WaitFor(*receiver_a_, "barrier-1").has_value());
  std::vector<std::string> synced;
  {
    const auto requests = receiver_a_->Requests();
    for (size_t i = static_cast<size_t>(before_sync); i < requests.size(); ++i) {
      if (absl::StrContains(requests[i].body, "computation_key")) synced.push_back(requests[i].body);
    }
  }
  ASSERT_EQ(synced.size(), 1u);
  EXPECT_TRUE(absl::StrContains(synced[0], R"("userId":"bob")")) << synced[0];

  // Deleting ada: one delete notification (body exactly type/userId/timestamp), the member
  // count drops, and no identify follows on the next sync.
  r = admin_->Call("POST", "/admin/v1/deletions", R"({"userId":"ada","requestId":"gdpr-1"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/state"), "COMPLETED");
  EXPECT_EQ(JsonStr(r.body, "/notifications"), "1");
  EXPECT_EQ(JsonAt(r.body, "/sourceIds"), R"(["shop"])");
  EXPECT_EQ(JsonAt(r.body, "/purgedProfile"), "true");
  const std::string deletion = JsonStr(r.body, "/id");
  std::optional<receiver::ReceivedRequest> deleted = WaitFor(*receiver_a_, R"("type":"delete")");
  ASSERT_TRUE(deleted.has_value());
  EXPECT_TRUE(absl::StartsWith(deleted->body, R"({"type":"delete","userId":"ada","timestamp":")"))
      << deleted->body;
  EXPECT_EQ(JsonAt(deleted->body, "/version"), "<missing>");
  EXPECT_EQ(deleted->Header("X-Signature"), deliverer::XSignature(kSecret, deleted->body));
  r = admin_->Call("POST", "/admin/v1/deletions", R"({"userId":"ada","requestId":"gdpr-1"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/id"), deletion);  // Idempotent.
  r = admin_->Call("GET", absl::StrCat("/admin/v1/deletions/", deletion));
  ASSERT_EQ(r.status, 200) << r.body;
  r = admin_->Call("GET", "/admin/v1/audiences/pro");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/members"), "1");
  const int64_t before_last = receiver_a_->request_count();
  r = admin_->Call("POST", "/admin/v1/audiences/pro:sync", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/lastSync/exited"), "0");
  // Barrier as above: the only request after the sync is the track sent after it.
  post("/v1/track", R"({"userId":"carol","event":"Barrier","messageId":"barrier-2"})");
  ASSERT_TRUE(WaitFor(*receiver_a_, "barrier-2").has_value());
  {
    const auto requests = receiver_a_->Requests();
    ASSERT_EQ(requests.size(), static_cast<size_t>(before_last) + 1);
    EXPECT_TRUE(absl::StrContains(requests.back().body, "barrier-2")) << requests.back().body;
  }
  // The user id is not logged at info level.
  EXPECT_FALSE(absl::StrContains(collector_->Output(), R"("user_id":"ada")"));

  // Metrics users' dashboards rely on.
  absl::StatusOr<std::unique_ptr<HttpConnection>> c =
      HttpConnection::Connect(collector_->IntField("metrics_port"));
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<HttpResponse> metrics = (*c)->Request("GET", "/metrics", "", {});
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  for (const char* line : {"hookrelay_deletions_total 1", "hookrelay_purged_jobs_total ",
                           "hookrelay_audience_members{audience=\"pro\"} 1",
                           "hookrelay_audience_changes_total{audience=\"pro\",direction=\"entered\"} 2",
                           "hookrelay_audience_sync_seconds_count "}) {
    EXPECT_TRUE(absl::StrContains(metrics->body, line)) << line;
  }

  // Deleting the audience sends nothing; it is gone.
  r = admin_->Call("DELETE", "/admin/v1/audiences/pro");
  ASSERT_EQ(r.status, 200) << r.body;
  r = admin_->Call("GET", "/admin/v1/audiences/pro");
  EXPECT_EQ(r.status, 404) << r.body;
}

// Every limit violation names the field and the limit; nothing is stored.
TEST_P(AdminApiTest, LimitsAreRefusedNamingTheFieldAndNothingChanges) {
  StartCollector();
  HttpResponse r =
      admin_->Call("POST", "/admin/v1/sources", R"({"id":"shop","name":"Shop","kind":"web"})");
  ASSERT_EQ(r.status, 200) << r.body;
  r = admin_->Call("POST", "/admin/v1/destinations",
                   DestinationJson("orders", receiver_a_->Url(), true));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string before = admin_->Call("GET", "/admin/v1/destinations/orders").body;

  struct Case {
    std::string body;
    std::string field;
    std::string words;
  };
  std::string six = R"({"urls":[)";
  for (int i = 0; i < 6; ++i) {
    absl::StrAppend(&six, i ? "," : "", R"({"url":"https://h)", i, R"(.example/x"})");
  }
  absl::StrAppend(&six, "]}");
  std::string six_headers = R"({"urls":[{"url":"https://h.example/x","headers":{)";
  for (int i = 0; i < 6; ++i) absl::StrAppend(&six_headers, i ? "," : "", "\"X-H", i, "\":\"v\"");
  absl::StrAppend(&six_headers, "}}]}");
  const std::vector<Case> cases = {
      {six, "urls", "at most 5"},
      {six_headers, "urls[0].headers", "at most 5"},
      {R"({"urls":[{"url":"https://h.example/x","headers":{"Content-Type":"x"}}]})",
       "urls[0].headers[\"Content-Type\"]", "reserved"},
      {R"({"urls":[{"url":"ftp://h.example/x"}]})", "urls[0].url", "http"},
      {R"({"urls":[]})", "urls", "at least 1"},
      {R"({"sources":["nope"]})", "sources", "unknown source"},
      {R"({"options":{"timeoutMs":999999}})", "options.timeoutMs", "60000"},
      {R"({"options":{"rateLimitPerSecond":100001}})", "options.rateLimitPerSecond", "100000"},
      {R"({"options":{"circuitBreaker":{"pauseMs":1000}}})", "options.circuitBreaker.failures",
       "between 1 and 1000"},
      {R"({"options":{"circuitBreaker":{"failures":3,"pauseMs":9000,"maxPauseMs":1000}}})",
       "options.circuitBreaker.maxPauseMs", "at least pause_ms (9000)"},
      {R"({"filter":{"where":[{"path":"properties.plan","op":"like","value":"x"}]}})",
       "filter.where[0].op", "unknown op \"like\", one of eq neq in exists gt gte lt lte contains"},
      {R"({"filter":{"types":["tv"]}})", "filter.types[0]", "unknown type \"tv\""},
      {R"({"filter":{"where":[{"path":"properties.n","op":"in","value":[]}]}})",
       "filter.where[0].value", "empty list"},
  };
  for (const Case& c : cases) {
    r = admin_->Call("PATCH", "/admin/v1/destinations/orders", c.body);
    EXPECT_EQ(r.status, 400) << c.body << " → " << r.body;
    EXPECT_EQ(JsonStr(r.body, "/error/code"), "INVALID_ARGUMENT") << r.body;
    EXPECT_EQ(JsonStr(r.body, "/error/fieldViolations/0/field"), c.field) << r.body;
    EXPECT_TRUE(absl::StrContains(JsonStr(r.body, "/error/fieldViolations/0/description"), c.words))
        << r.body;
    EXPECT_EQ(admin_->Call("GET", "/admin/v1/destinations/orders").body, before);
  }
  // Creating with a bad id or an unknown JSON field.
  r = admin_->Call("POST", "/admin/v1/sources", R"({"id":"bad id!","name":"x","kind":"web"})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/error/fieldViolations/0/field"), "id") << r.body;
  r = admin_->Call("POST", "/admin/v1/sources", R"({"id":"s2","kind":"tv"})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/error/fieldViolations/0/field"), "kind") << r.body;
  r = admin_->Call("POST", "/admin/v1/destinations", R"({"id":"d2","colour":"red"})");
  EXPECT_EQ(r.status, 400) << r.body;
  r = admin_->Call("GET", "/admin/v1/destinations/nope");
  EXPECT_EQ(r.status, 404) << r.body;
  r = admin_->Call("GET", "/admin/v1/sources");
  EXPECT_EQ(JsonAt(r.body, "/sources/1"), "<missing>") << r.body;  // only "shop"
}

// A receiver answering 410 Gone disables its destination through the admin path: the API shows
// it disabled, it stays disabled after a restart, and the collector counts it by reason.
TEST_P(AdminApiTest, GoneReceiverDisablesTheDestination) {
  auto gone = WebhookReceiver::Start(WebhookReceiver::Options{},
                                     [](const receiver::ReceivedRequest&) {
                                       receiver::Response r;
                                       r.status = 410;
                                       return r;
                                     });
  ASSERT_TRUE(gone.ok()) << gone.status();
  StartCollector();
  StartDeliverer();
  HttpResponse r =
      admin_->Call("POST", "/admin/v1/sources", R"({"id":"shop","name":"Shop","kind":"web"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key = JsonStr(r.body, "/writeKeys/0");
  r = admin_->Call("POST", "/admin/v1/destinations",
                   DestinationJson("orders", (*gone)->Url(), true));
  ASSERT_EQ(r.status, 200) << r.body;
  absl::StatusOr<HttpResponse> t = Track(key, "gone-1");
  ASSERT_TRUE(t.ok() && t->status == 200);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  std::string enabled;
  while (absl::Now() < deadline) {
    enabled = JsonAt(admin_->Call("GET", "/admin/v1/destinations/orders").body, "/enabled");
    if (enabled == "false") break;
    absl::SleepFor(absl::Milliseconds(20));  // Polls another process's state.
  }
  EXPECT_EQ(enabled, "false");
  EXPECT_GE((*gone)->request_count(), 1);
  // The log line and the counter follow the saved change (on JetStream the API may answer from
  // the saved configuration first): wait for them.
  EXPECT_TRUE(collector_->WaitForMsg("destination disabled")) << collector_->Output();
  EXPECT_TRUE(absl::StrContains(collector_->Output(), "receiver answered 410 Gone"));
  std::string metrics;
  const absl::Time metrics_deadline = absl::Now() + absl::Seconds(20);
  while (!absl::StrContains(metrics, "hookrelay_destination_disabled_total{reason=\"gone\"} 1") &&
         absl::Now() < metrics_deadline) {
    auto connection = HttpConnection::Connect(collector_->IntField("metrics_port"));
    ASSERT_TRUE(connection.ok()) << connection.status();
    absl::StatusOr<HttpResponse> got = (*connection)->Request("GET", "/metrics", "", {});
    ASSERT_TRUE(got.ok()) << got.status();
    metrics = got->body;
    if (!absl::StrContains(metrics, "hookrelay_destination_disabled_total{reason=\"gone\"} 1")) {
      absl::SleepFor(absl::Milliseconds(20));  // Polls another process's state.
    }
  }
  EXPECT_TRUE(absl::StrContains(metrics,
                                "hookrelay_destination_disabled_total{reason=\"gone\"} 1"))
      << metrics;
  // Durable: still disabled after a restart.
  StopAll();
  StartCollector();
  EXPECT_EQ(JsonAt(admin_->Call("GET", "/admin/v1/destinations/orders").body, "/enabled"),
            "false");
}

// Without the token: 401 for the admin API and Subscribe; the JSON API refuses cross-origin
// requests and non-JSON bodies.
TEST_P(AdminApiTest, AuthenticationForAdminAndSubscribe) {
  StartCollector();
  EXPECT_EQ(admin_->Call("GET", "/admin/v1/sources", "", std::string()).status, 401);
  EXPECT_EQ(admin_->Call("GET", "/admin/v1/sources", "", std::string("wrong")).status, 401);
  EXPECT_EQ(admin_->Call("GET", "/admin/v1/sources").status, 200);

  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", collector_->IntField("grpc_port")),
                                     grpc::InsecureChannelCredentials());
  {
    auto stub = hookrelay::v1::Collector::NewStub(channel);
    grpc::ClientContext context;
    auto stream = stub->Subscribe(&context);
    hookrelay::v1::SubscribeRequest hello;
    hello.mutable_hello()->set_credits(1);
    stream->Write(hello);
    hookrelay::v1::SubscribeResponse response;
    EXPECT_FALSE(stream->Read(&response));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    auto stub = hookrelay::v1::Admin::NewStub(channel);
    grpc::ClientContext context;
    hookrelay::v1::ListSourcesResponse response;
    EXPECT_EQ(stub->ListSources(&context, {}, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // gRPC Admin with the token: an invalid source answers INVALID_ARGUMENT with BadRequest.
  {
    auto stub = hookrelay::v1::Admin::NewStub(channel);
    grpc::ClientContext context;
    context.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
    hookrelay::v1::CreateSourceRequest request;
    request.mutable_source()->set_id("shop");
    request.mutable_source()->set_kind("web");
    request.mutable_source()->add_write_keys("bad key with spaces");
    hookrelay::v1::SourceResource response;
    grpc::Status st = stub->CreateSource(&context, request, &response);
    ASSERT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    google::rpc::Status details;
    ASSERT_TRUE(details.ParseFromString(st.error_details()));
    google::rpc::BadRequest bad_request;
    ASSERT_EQ(details.details_size(), 1);
    ASSERT_TRUE(details.details(0).UnpackTo(&bad_request));
    ASSERT_EQ(bad_request.field_violations_size(), 1);
    EXPECT_EQ(bad_request.field_violations(0).field(), "writeKeys[0]");
  }

  absl::StatusOr<std::unique_ptr<HttpConnection>> c =
      HttpConnection::Connect(collector_->IntField("admin_http_port"));
  ASSERT_TRUE(c.ok());
  absl::StatusOr<HttpResponse> r = (*c)->Request(
      "POST", "/admin/v1/sources", R"({"id":"x","kind":"web"})",
      {{"Authorization", absl::StrCat("Bearer ", kToken)},
       {"Content-Type", "application/json"},
       {"Origin", "https://evil.example"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 403) << r->body;
  r = (*c)->Request("POST", "/admin/v1/sources", R"({"id":"x","kind":"web"})",
                    {{"Authorization", absl::StrCat("Bearer ", kToken)},
                     {"Content-Type", "text/plain"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 415) << r->body;
  // The console is served with a strict CSP.
  r = (*c)->Request("GET", "/", "", {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(absl::StrContains(r->Header("Content-Security-Policy"), "default-src 'self'"));
  EXPECT_TRUE(absl::StrContains(r->Header("Content-Type"), "text/html"));
}

// Objects of the --config file are read-only through the API and marked as such; API objects
// live beside them.
TEST_P(AdminApiTest, FileObjectsAreReadOnly) {
  const std::string config = dir_ + "/config.yaml";
  ASSERT_TRUE(WriteFile(config, absl::StrCat(R"(sources:
  - {id: web, name: Web, kind: web, write_keys: [wk_file_key]}
destinations:
  - id: file-hook
    type: webhooks
    sources: [web]
    enabled: true
    urls: [{url: ")", receiver_a_->Url(), R"("}]
)")).ok());
  StartCollector(config);
  HttpResponse r = admin_->Call("GET", "/admin/v1/destinations/file-hook");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/managedBy"), absl::StrCat("file:", config));
  r = admin_->Call("PATCH", "/admin/v1/destinations/file-hook", R"({"enabled":false})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/error/code"), "FAILED_PRECONDITION");
  EXPECT_TRUE(absl::StrContains(JsonStr(r.body, "/error/message"), config)) << r.body;
  r = admin_->Call("DELETE", "/admin/v1/sources/web");
  EXPECT_EQ(r.status, 400) << r.body;
  // An API destination on the file's source works.
  r = admin_->Call("POST", "/admin/v1/destinations",
                   absl::StrCat(R"({"id":"api-hook","sources":["web"],"enabled":true,"urls":[{"url":")",
                                receiver_b_->Url(), R"("}]})"));
  ASSERT_EQ(r.status, 200) << r.body;
  StartDeliverer();
  absl::StatusOr<HttpResponse> t = Track("wk_file_key", "file-1");
  ASSERT_TRUE(t.ok() && t->status == 200);
  EXPECT_TRUE(WaitFor(*receiver_a_, "file-1").has_value());
  EXPECT_TRUE(WaitFor(*receiver_b_, "file-1").has_value());
}

// An audience rule has one shape: the YAML file's `match` + `conditions` and its `all:` / `any:`
// shorthand read as the same rule, and the admin API takes the canonical JSON and the shorthand
// {"all":[...]} alike, always answering the canonical {"match":...,"conditions":[...]}.
TEST_P(AdminApiTest, AudienceRuleHasOneShape) {
  const std::string config = dir_ + "/config.yaml";
  ASSERT_TRUE(WriteFile(config, R"(sources:
  - {id: web, name: Web, kind: web, write_keys: [wk_rule_key]}
audiences:
  - id: canonical
    name: Canonical
    sources: [web]
    rule:
      match: any
      conditions:
        - {trait: plan, op: eq, value: pro}
        - {event: Order Completed, count_gte: 3, within: 30d}
  - id: shorthand
    name: Shorthand
    sources: [web]
    rule:
      any:
        - {trait: plan, op: eq, value: pro}
        - {event: Order Completed, count_gte: 3, within: 30d}
)").ok());
  StartCollector(config);
  const std::string kRule =
      R"({"match":"any","conditions":[{"trait":"plan","op":"eq","value":"pro"},)"
      R"({"event":"Order Completed","countGte":3,"within":"30d"}]})";
  HttpResponse r = admin_->Call("GET", "/admin/v1/audiences/canonical");
  ASSERT_EQ(r.status, 200) << r.body;
  // The API prints every field (empty ones included): that text is the reference.
  const std::string printed = JsonAt(r.body, "/rule");
  EXPECT_EQ(JsonStr(printed, "/match"), "any");
  EXPECT_EQ(JsonStr(printed, "/conditions/0/trait"), "plan");
  EXPECT_EQ(JsonStr(printed, "/conditions/1/event"), "Order Completed");
  EXPECT_EQ(JsonAt(printed, "/conditions/1/countGte"), "3");
  r = admin_->Call("GET", "/admin/v1/audiences/shorthand");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonAt(r.body, "/rule"), printed);

  // Through the API: the canonical JSON, the API's own output fed back, and the shorthand give
  // one rule.
  const std::string conditions =
      R"([{"trait":"plan","op":"eq","value":"pro"},)"
      R"({"event":"Order Completed","countGte":3,"within":"30d"}])";
  for (const std::string& rule :
       {std::string(kRule), printed, absl::StrCat(R"({"any":)", conditions, "}")}) {
    r = admin_->Call("POST", "/admin/v1/audiences?validate_only=true",
                     absl::StrCat(R"({"name":"Pro","sources":["web"],"rule":)", rule, "}"));
    ASSERT_EQ(r.status, 200) << rule << ": " << r.body;
    EXPECT_EQ(JsonAt(r.body, "/rule"), printed) << rule;
  }
  r = admin_->Call(
      "POST", "/admin/v1/audiences",
      absl::StrCat(R"({"id":"api","name":"Api","sources":["web"],"rule":{"all":)", conditions,
                   "}}"));
  ASSERT_EQ(r.status, 200) << r.body;
  r = admin_->Call("GET", "/admin/v1/audiences/api");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/rule/match"), "all");
  EXPECT_EQ(JsonAt(r.body, "/rule/conditions"), JsonAt(printed, "/conditions"));

  // Both spellings at once are ambiguous: refused, naming the rule.
  r = admin_->Call("POST", "/admin/v1/audiences?validate_only=true",
                   absl::StrCat(R"({"name":"Pro","sources":["web"],"rule":{"match":"all","all":)",
                                conditions, "}}"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/error/fieldViolations/0/field"), "rule") << r.body;
}

// A filter set through the API (SPEC §5.4): read back as given, applied to the next events (a
// refused event makes no job, counted per destination and reason; the barrier event sent after it
// passes and is the only one delivered), and the test call says whether the sample passes.
TEST_P(AdminApiTest, FilterSetThroughTheApiHoldsBackEvents) {
  StartCollector();
  StartDeliverer();
  HttpResponse r =
      admin_->Call("POST", "/admin/v1/sources", R"({"id":"shop","name":"Shop","kind":"server"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key = JsonStr(r.body, "/writeKeys/0");
  r = admin_->Call("POST", "/admin/v1/destinations",
                   DestinationJson("orders", receiver_a_->Url(), true));
  ASSERT_EQ(r.status, 200) << r.body;
  r = admin_->Call("PATCH", "/admin/v1/destinations/orders",
                   R"({"filter":{"types":["track"],"events":["Order *"],)"
                   R"("where":[{"path":"properties.plan","op":"in","value":["pro","team"]}]}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonAt(r.body, "/filter/events"), R"(["Order *"])") << r.body;
  r = admin_->Call("GET", "/admin/v1/destinations/orders");
  EXPECT_EQ(JsonAt(r.body, "/filter/where/0/value"), R"(["pro","team"])") << r.body;
  EXPECT_EQ(JsonStr(r.body, "/filter/where/0/op"), "in") << r.body;

  // The filtered destination's series exist at 0 as soon as the filter is set.
  {
    absl::StatusOr<std::unique_ptr<HttpConnection>> c =
        HttpConnection::Connect(collector_->IntField("metrics_port"));
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<HttpResponse> metrics = (*c)->Request("GET", "/metrics", "", {});
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    for (const char* reason : {"type", "event", "where"}) {
      const std::string line = absl::StrCat(
          "hookrelay_ingest_filtered_total{destination=\"orders\",reason=\"", reason, "\"} 0");
      EXPECT_TRUE(absl::StrContains(metrics->body, line)) << line;
    }
  }

  auto send = [&](const std::string& path, const std::string& body) {
    absl::StatusOr<HttpResponse> t = HttpPost(collector_->IntField("http_port"), path, body, key);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->status, 200) << t->body;
  };
  // Refused: wrong event name, plan not in the list, plan absent, an identify call.
  send("/v1/track", R"({"userId":"u","event":"Signed Up","messageId":"f-name","properties":{"plan":"pro"}})");
  send("/v1/track", R"({"userId":"u","event":"Order Done","messageId":"f-plan","properties":{"plan":"free"}})");
  send("/v1/track", R"({"userId":"u","event":"Order Done","messageId":"f-none"})");
  send("/v1/identify", R"({"userId":"u","messageId":"f-type","traits":{"plan":"pro"}})");
  // Passes: the barrier.
  send("/v1/track", R"({"userId":"u","event":"Order Done","messageId":"f-pass","properties":{"plan":"team"}})");
  ASSERT_TRUE(WaitFor(*receiver_a_, "f-pass").has_value());
  int delivered = 0;
  for (const auto& request : receiver_a_->Requests()) {
    for (const char* refused : {"f-name", "f-plan", "f-none", "f-type"}) {
      EXPECT_FALSE(absl::StrContains(request.body, refused)) << request.body;
    }
    delivered += absl::StrContains(request.body, "f-pass") ? 1 : 0;
  }
  EXPECT_EQ(delivered, 1);
  EXPECT_EQ(receiver_a_->Requests().size(), 1u);

  absl::StatusOr<std::unique_ptr<HttpConnection>> c =
      HttpConnection::Connect(collector_->IntField("metrics_port"));
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<HttpResponse> metrics = (*c)->Request("GET", "/metrics", "", {});
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  for (const char* line :
       {R"(hookrelay_ingest_filtered_total{destination="orders",reason="event"} 1)",
        R"(hookrelay_ingest_filtered_total{destination="orders",reason="where"} 2)",
        R"(hookrelay_ingest_filtered_total{destination="orders",reason="type"} 1)"}) {
    EXPECT_TRUE(absl::StrContains(metrics->body, line)) << line << "\n" << metrics->body;
  }

  // The test call delivers its sample anyway, and says which part of the filter refuses it.
  r = admin_->Call("POST", "/admin/v1/destinations/orders:test", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonStr(r.body, "/outcome"), "delivered") << r.body;
  EXPECT_EQ(JsonAt(r.body, "/filter/passed"), "false") << r.body;
  EXPECT_EQ(JsonStr(r.body, "/filter/failed"), "events") << r.body;
  EXPECT_TRUE(absl::StrContains(JsonStr(r.body, "/filter/reason"), "\"Test Event\" matches none"))
      << r.body;
  r = admin_->Call("PATCH", "/admin/v1/destinations/orders",
                   R"({"filter":{"events":["Test *"],"where":[{"path":"properties.test","op":"eq","value":true}]}})");
  ASSERT_EQ(r.status, 200) << r.body;
  r = admin_->Call("POST", "/admin/v1/destinations/orders:test", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonAt(r.body, "/filter/passed"), "true") << r.body;
  // Removing the filter: an empty object lets everything through again.
  r = admin_->Call("PATCH", "/admin/v1/destinations/orders", R"({"filter":{}})");
  ASSERT_EQ(r.status, 200) << r.body;
  send("/v1/identify", R"({"userId":"u","messageId":"f-after","traits":{"plan":"pro"}})");
  EXPECT_TRUE(WaitFor(*receiver_a_, "f-after").has_value());
}

// RotateSecret (SPEC §5.4): the new secret signs at once; during the overlap X-Signature keeps
// the previous secret and webhook-signature carries both; an overlap of 0 switches at once. The
// read shows the end of the overlap and never a secret; bad calls name the field.
TEST_P(AdminApiTest, RotateSecretSignsWithBothDuringTheOverlap) {
  constexpr char kNew[] = "n3w-s3cret-value";
  constexpr char kNewest[] = "n3west-s3cret-value";
  StartCollector();
  StartDeliverer();
  HttpResponse r =
      admin_->Call("POST", "/admin/v1/sources", R"({"id":"shop","name":"Shop","kind":"server"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key = JsonStr(r.body, "/writeKeys/0");
  r = admin_->Call("POST", "/admin/v1/destinations",
                   absl::StrCat(R"({"id":"orders","sources":["shop"],"enabled":true,)",
                                R"("sharedSecret":")", kSecret, R"(","urls":[{"url":")",
                                receiver_a_->Url(), R"("}],"options":{"standardWebhooks":true}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  r = admin_->Call("POST", "/admin/v1/destinations",
                   absl::StrCat(R"({"id":"unsigned","sources":["shop"],"urls":[{"url":")",
                                receiver_b_->Url(), R"("}]})"));
  ASSERT_EQ(r.status, 200) << r.body;

  // Refused, naming the field; nothing changes.
  const std::vector<std::tuple<std::string, std::string, int, std::string>> refused = {
      {"orders", "{}", 400, "sharedSecret: missing"},
      {"orders", absl::StrCat(R"({"sharedSecret":")", kSecret, R"("})"), 400,
       "sharedSecret: the same as the secret in use"},
      {"orders", absl::StrCat(R"({"sharedSecret":")", kNew, R"(","overlap":"2592001s"})"), 400,
       "overlap: 720h1s is outside 0s..720h (30 days)"},
      {"orders", absl::StrCat(R"({"sharedSecret":")", kNew, R"(","overlap":"-5s"})"), 400,
       "overlap: -5s is outside"},
      {"unsigned", absl::StrCat(R"({"sharedSecret":")", kNew, R"("})"), 400,
       "destination unsigned has no shared secret, so there is nothing to overlap with"},
      {"nope", absl::StrCat(R"({"sharedSecret":")", kNew, R"("})"), 404, "nope"},
  };
  for (const auto& [id, body, status, message] : refused) {
    r = admin_->Call("POST", absl::StrCat("/admin/v1/destinations/", id, ":rotateSecret"), body);
    EXPECT_EQ(r.status, status) << body << " " << r.body;
    EXPECT_TRUE(absl::StrContains(r.body, message)) << body << " " << r.body;
    EXPECT_FALSE(absl::StrContains(r.body, kNew)) << r.body;
  }
  r = admin_->Call("PATCH", "/admin/v1/destinations/orders", R"({"rotation":{}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, "rotation: output only")) << r.body;

  const absl::Time before = absl::Now();
  r = admin_->Call("POST", "/admin/v1/destinations/orders:rotateSecret",
                   absl::StrCat(R"({"sharedSecret":")", kNew, R"(","overlap":"3600s"})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(absl::StrContains(r.body, kNew)) << r.body;
  EXPECT_FALSE(absl::StrContains(r.body, kSecret)) << r.body;
  absl::Time ends;
  std::string error;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, JsonStr(r.body, "/rotation/endsAt"), &ends,
                              &error))
      << r.body;
  EXPECT_GE(ends, before + absl::Hours(1) - absl::Seconds(1));
  EXPECT_LE(ends, absl::Now() + absl::Hours(1));
  r = admin_->Call("GET", "/admin/v1/destinations/orders");
  EXPECT_TRUE(absl::StrContains(r.body, R"("rotation":{"endsAt")")) << r.body;

  ASSERT_EQ(Track(key, "rot-during")->status, 200);
  std::optional<receiver::ReceivedRequest> during = WaitFor(*receiver_a_, "rot-during");
  ASSERT_TRUE(during.has_value());
  int64_t ts = 0;
  ASSERT_TRUE(absl::SimpleAtoi(during->Header("webhook-timestamp"), &ts));
  const std::string id = during->Header("webhook-id");
  EXPECT_EQ(during->Header("X-Signature"), deliverer::XSignature(kSecret, during->body));
  EXPECT_EQ(during->Header("webhook-signature"),
            absl::StrCat(deliverer::StandardWebhookHeaders(kNew, id, ts, during->body).signature,
                         " ",
                         deliverer::StandardWebhookHeaders(kSecret, id, ts, during->body).signature));

  // A rotation with no overlap: the newest secret alone signs from now on.
  r = admin_->Call("POST", "/admin/v1/destinations/orders:rotateSecret",
                   absl::StrCat(R"({"sharedSecret":")", kNewest, R"(","overlap":"0s"})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(absl::StrContains(r.body, "rotation")) << r.body;
  ASSERT_EQ(Track(key, "rot-after")->status, 200);
  std::optional<receiver::ReceivedRequest> after = WaitFor(*receiver_a_, "rot-after");
  ASSERT_TRUE(after.has_value());
  ASSERT_TRUE(absl::SimpleAtoi(after->Header("webhook-timestamp"), &ts));
  EXPECT_EQ(after->Header("X-Signature"), deliverer::XSignature(kNewest, after->body));
  EXPECT_EQ(after->Header("webhook-signature"),
            deliverer::StandardWebhookHeaders(kNewest, after->Header("webhook-id"), ts,
                                              after->body)
                .signature);
}

// Batched webhooks (SPEC §5.4) through the whole pipeline: a destination with options.batch gets
// its events several per request, {"batch":[…]} signed once; a refused batch makes one dead
// letter per job, and those replay per job.
TEST_P(AdminApiTest, BatchedDestinationGetsEventsTogether) {
  std::atomic<bool> refuse{true};
  std::atomic<bool> again_refused{false};
  auto receiver = WebhookReceiver::Start(
      WebhookReceiver::Options{}, [&](const receiver::ReceivedRequest& r) {
        receiver::Response answer;
        if (refuse.load() && absl::StrContains(r.body, "refused-")) answer.status = 400;
        if (absl::StrContains(r.body, "again-") && !again_refused.exchange(true)) {
          answer.status = 503;
        }
        return answer;
      });
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  StartCollector();
  StartDeliverer();
  HttpResponse r =
      admin_->Call("POST", "/admin/v1/sources", R"({"id":"shop","name":"Shop","kind":"server"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key = JsonStr(r.body, "/writeKeys/0");
  r = admin_->Call("POST", "/admin/v1/destinations",
                   absl::StrCat(R"({"id":"batched","sources":["shop"],"enabled":true,)",
                                R"("sharedSecret":")", kSecret, R"(","urls":[{"url":")",
                                (*receiver)->Url(), R"("}],)",
                                R"("options":{"batch":{"maxEvents":10,"maxWaitMs":200}}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonAt(r.body, "/options/batch"),
            R"({"maxEvents":10,"maxBytes":500000,"maxWaitMs":200})")
      << r.body;
  r = admin_->Call("PATCH", "/admin/v1/destinations/batched",
                   R"({"options":{"batch":{"maxEvents":1001}}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, "options.batch.maxEvents: 1001, must be between 1 and 1000"))
      << r.body;

  auto send_batch = [&](const std::string& prefix, int n) {
    std::string body = R"({"batch":[)";
    for (int i = 0; i < n; ++i) {
      absl::StrAppend(&body, i > 0 ? "," : "",
                      R"({"type":"track","userId":"u1","event":"Ordered","messageId":")", prefix,
                      i, R"("})");
    }
    body += "]}";
    absl::StatusOr<HttpResponse> t = HttpPost(collector_->IntField("http_port"), "/v1/batch", body, key);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->status, 200) << t->body;
  };
  send_batch("ok-", 25);
  std::set<std::string> seen;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::vector<receiver::ReceivedRequest> requests;
  while (seen.size() < 25 && absl::Now() < deadline) {
    requests = (*receiver)->Requests();
    seen.clear();
    for (const auto& q : requests) {
      for (int i = 0; i < 25; ++i) {
        if (absl::StrContains(q.body, absl::StrCat("\"ok-", i, "\""))) seen.insert(absl::StrCat(i));
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(seen.size(), 25u);
  size_t members = 0;
  for (const auto& q : requests) {
    EXPECT_TRUE(absl::StartsWith(q.body, R"({"batch":[{)")) << q.body;
    EXPECT_EQ(q.Header("X-Signature"), deliverer::XSignature(kSecret, q.body));
    EXPECT_TRUE(absl::StartsWith(q.Header("Idempotency-Key"), "batch_")) << q.Header("Idempotency-Key");
    size_t in_this = 0;
    for (size_t at = q.body.find("\"messageId\""); at != std::string::npos;
         at = q.body.find("\"messageId\"", at + 1)) {
      ++in_this;
    }
    EXPECT_LE(in_this, 10u) << q.body;
    members += in_this;
  }
  EXPECT_EQ(members, 25u);
  EXPECT_GE(requests.size(), 3u);
  EXPECT_LT(requests.size(), 25u);  // Together, not one by one.

  // A batch answered 503 comes back as the same batch: same members, body and key.
  send_batch("again-", 3);
  std::vector<receiver::ReceivedRequest> again;
  for (absl::Time until = absl::Now() + absl::Seconds(30); again.size() < 2 && absl::Now() < until;) {
    again.clear();
    for (const auto& q : (*receiver)->Requests()) {
      if (absl::StrContains(q.body, "again-")) again.push_back(q);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].Header("Idempotency-Key"), again[1].Header("Idempotency-Key"));
  EXPECT_EQ(again[0].body, again[1].body);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(absl::StrContains(again[1].body, absl::StrCat("\"again-", i, "\""))) << again[1].body;
  }

  // A refused batch: each job is its own dead letter, and replays on its own.
  send_batch("refused-", 2);
  std::string dead;
  for (absl::Time until = absl::Now() + absl::Seconds(30); absl::Now() < until;) {
    dead = admin_->Call("GET", "/admin/v1/dead-letters?destination_id=batched").body;
    if (absl::StrContains(dead, "refused-0") && absl::StrContains(dead, "refused-1")) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(absl::StrContains(dead, "refused-0") && absl::StrContains(dead, "refused-1")) << dead;
  EXPECT_EQ(JsonAt(dead, "/jobs/2"), "<missing>") << dead;  // exactly two jobs
  refuse.store(false);
  r = admin_->Call("POST", "/admin/v1/dead-letters:replay", R"({"filter":{"destinationId":"batched"}})");
  ASSERT_EQ(r.status, 200) << r.body;
  std::set<std::string> replayed;
  for (absl::Time until = absl::Now() + absl::Seconds(30);
       replayed.size() < 2 && absl::Now() < until;) {
    for (const auto& q : (*receiver)->Requests()) {
      for (const char* id : {"refused-0", "refused-1"}) {
        if (absl::StrContains(q.body, id)) replayed.insert(id);
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(replayed.size(), 2u);
  for (absl::Time until = absl::Now() + absl::Seconds(30); absl::Now() < until;) {
    dead = admin_->Call("GET", "/admin/v1/dead-letters?destination_id=batched").body;
    if (!absl::StrContains(dead, "refused-")) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(absl::StrContains(dead, "refused-")) << dead;
}

INSTANTIATE_TEST_SUITE_P(Engines, AdminApiTest, EngineParams(), EngineParamName);

}  // namespace
}  // namespace hookrelay::test
