// The collector and deliverer on the JetStream engine (issue 12, preview) against a 3-node
// loopback cluster, as users run them: configuration made through one collector's admin API is
// read by a second one from the cluster's KV bucket; events sent to either collector are
// delivered, signed, by either deliverer (one shared consumer); a receiver's 503 is retried
// through a message schedule; a collector killed with kill -9 loses nothing acknowledged.
#include <signal.h>

#include <memory>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "deliverer/signer.h"
#include "tests/child_process.h"
#include "tests/collector_test_util.h"
#include "tests/nats_cluster.h"
#include "tests/pipeline_test_util.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {
namespace {

constexpr char kSecret[] = "js-s3cret";

HttpResponse Admin(int port, std::string_view method, std::string_view target,
                   std::string_view body = "") {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(port);
  if (!c.ok()) return {};
  HttpHeaders headers;
  if (!body.empty()) headers.emplace_back("Content-Type", "application/json");
  absl::StatusOr<HttpResponse> r = (*c)->Request(method, target, body, headers);
  return r.ok() ? *std::move(r) : HttpResponse{};
}

TEST(JetStreamEndToEndTest, TwoCollectorsTwoDeliverersOneCluster) {
  absl::StatusOr<std::unique_ptr<NatsCluster>> cluster = NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string dir = MakeTempDir("jetstream-e2e");

  // The receiver answers 503 to the first attempt of every "retry-*" event.
  absl::Mutex mu;
  absl::flat_hash_set<std::string> refused_once;
  auto receiver = receiver::WebhookReceiver::Start(
      receiver::WebhookReceiver::Options{}, [&](const receiver::ReceivedRequest& r) {
        const std::string id = JsonStr(r.body, "/messageId");
        receiver::Response answer;
        absl::MutexLock lock(&mu);
        if (absl::StartsWith(id, "retry-") && refused_once.insert(id).second) answer.status = 503;
        return answer;
      });
  ASSERT_TRUE(receiver.ok()) << receiver.status();

  const std::vector<std::string> engine = {"--store=jetstream",
                                           absl::StrCat("--nats_url=", (*cluster)->urls()),
                                           "--nats_replicas=3", "--lease_duration=5s"};
  auto a = StartCollectorProcess("", dir + "/a", engine);
  ASSERT_TRUE(a.ok()) << a.status();
  const int admin_a = (*a)->IntField("admin_http_port");
  HttpResponse r = Admin(admin_a, "POST", "/admin/v1/sources",
                         R"({"id":"shop","name":"Shop","kind":"server"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key = JsonStr(r.body, "/writeKeys/0");
  r = Admin(admin_a, "POST", "/admin/v1/destinations",
            absl::StrCat(R"({"id":"orders","sources":["shop"],"enabled":true,"sharedSecret":")",
                         kSecret, R"(","urls":[{"url":")", (*receiver)->Url(), R"("}],)",
                         R"("options":{"initialBackoffMs":500,"timeoutMs":3000}})"));
  ASSERT_EQ(r.status, 200) << r.body;

  // A second collector reads that configuration from the cluster.
  auto b = StartCollectorProcess("", dir + "/b", engine);
  ASSERT_TRUE(b.ok()) << b.status();
  r = Admin((*b)->IntField("admin_http_port"), "GET", "/admin/v1/destinations/orders");
  ASSERT_EQ(r.status, 200) << r.body;

  auto d1 = StartDelivererProcess({(*a)->IntField("grpc_port")}, {});
  ASSERT_TRUE(d1.ok()) << d1.status();
  auto d2 = StartDelivererProcess({(*b)->IntField("grpc_port")}, {});
  ASSERT_TRUE(d2.ok()) << d2.status();

  std::vector<std::string> sent;
  auto send = [&](ChildProcess& collector, const std::string& id) {
    absl::StatusOr<HttpResponse> t =
        HttpPost(collector.IntField("http_port"), "/v1/track",
                 absl::StrCat(R"({"userId":"u1","event":"Ordered","messageId":")", id, R"("})"),
                 key);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->status, 200) << t->body;
    sent.push_back(id);
  };
  for (int i = 0; i < 20; ++i) send(**a, absl::StrCat("a-", i));
  for (int i = 0; i < 20; ++i) send(**b, absl::StrCat("b-", i));
  for (int i = 0; i < 5; ++i) send(**a, absl::StrCat("retry-", i));
  // Collector a dies: what it acknowledged is in the cluster; b and the deliverers go on.
  (*a)->Signal(SIGKILL);
  (*a)->Wait();
  for (int i = 0; i < 20; ++i) send(**b, absl::StrCat("after-", i));

  // Delivered = answered 200: a retry-* event needs its second request (the first got 503).
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::flat_hash_map<std::string, int> requests;
  int deliveries = 0;
  auto delivered = [&](const std::string& id) {
    auto it = requests.find(id);
    return it != requests.end() && it->second >= (absl::StartsWith(id, "retry-") ? 2 : 1);
  };
  while (absl::Now() < deadline) {
    requests.clear();
    deliveries = 0;
    for (const receiver::ReceivedRequest& req : (*receiver)->Requests()) {
      ++deliveries;
      EXPECT_EQ(req.Header("X-Signature"), deliverer::XSignature(kSecret, req.body));
      ++requests[JsonStr(req.body, "/messageId")];
    }
    bool all = true;
    for (const std::string& id : sent) all = all && delivered(id);
    if (all) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  for (const std::string& id : sent) EXPECT_TRUE(delivered(id)) << id << " never delivered";
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(refused_once.size(), 5u);  // Each retry-* was refused once.
  }
  // At-least-once: duplicates are allowed (a lease of the killed collector), counted here.
  RecordProperty("duplicates", deliveries - static_cast<int>(sent.size()) - 5);

  for (auto* p : {&*d1, &*d2}) {
    (*p)->Signal(SIGTERM);
    EXPECT_EQ((*p)->Wait(), 0);
  }
  (*b)->Signal(SIGTERM);
  EXPECT_EQ((*b)->Wait(), 0);
}

// Configuration lives in the cluster's KV bucket and every collector watches it: a change made
// through one collector is in effect on another within a second (and so for the deliverers it
// feeds); changes made through two collectors at once are all kept (compare-and-set on the KV
// revision, re-applied on a conflict).
TEST(JetStreamEndToEndTest, ConfigChangesReachEveryCollectorWithinASecond) {
  absl::StatusOr<std::unique_ptr<NatsCluster>> cluster = NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string dir = MakeTempDir("jetstream-config");
  auto first = receiver::WebhookReceiver::Start(receiver::WebhookReceiver::Options{}, nullptr);
  auto second = receiver::WebhookReceiver::Start(receiver::WebhookReceiver::Options{}, nullptr);
  ASSERT_TRUE(first.ok() && second.ok());
  const std::vector<std::string> engine = {"--store=jetstream",
                                           absl::StrCat("--nats_url=", (*cluster)->urls()),
                                           "--nats_replicas=3"};
  auto a = StartCollectorProcess("", dir + "/a", engine);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = StartCollectorProcess("", dir + "/b", engine);
  ASSERT_TRUE(b.ok()) << b.status();
  const int admin_a = (*a)->IntField("admin_http_port");
  const int admin_b = (*b)->IntField("admin_http_port");
  auto d = StartDelivererProcess({(*b)->IntField("grpc_port")}, {});
  ASSERT_TRUE(d.ok()) << d.status();

  // Waits until `get` on collector b answers 200 with `want` in the body; how long it took.
  auto seen_on_b = [&](const std::string& target, const std::string& want) -> absl::Duration {
    const absl::Time start = absl::Now();
    while (absl::Now() - start < absl::Seconds(10)) {
      HttpResponse r = Admin(admin_b, "GET", target);
      if (r.status == 200 && absl::StrContains(r.body, want)) return absl::Now() - start;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return absl::InfiniteDuration();
  };

  HttpResponse r = Admin(admin_a, "POST", "/admin/v1/sources",
                         R"({"id":"shop","name":"Shop","kind":"server"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key = JsonStr(r.body, "/writeKeys/0");
  EXPECT_LT(seen_on_b("/admin/v1/sources/shop", key), absl::Seconds(1));
  r = Admin(admin_a, "POST", "/admin/v1/destinations",
            absl::StrCat(R"({"id":"orders","sources":["shop"],"enabled":true,"urls":[{"url":")",
                         (*first)->Url(), R"("}]})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LT(seen_on_b("/admin/v1/destinations/orders", (*first)->Url()), absl::Seconds(1));

  auto track = [&](const std::string& id) {
    absl::StatusOr<HttpResponse> t =
        HttpPost((*b)->IntField("http_port"), "/v1/track",
                 absl::StrCat(R"({"userId":"u1","event":"Ordered","messageId":")", id, R"("})"),
                 key);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->status, 200) << t->body;
  };
  track("before-change");
  ASSERT_TRUE((*first)->WaitForRequests(1, absl::Seconds(20)));

  // The URL changed through a: b's deliverer posts the next event to the new one.
  r = Admin(admin_a, "PATCH", "/admin/v1/destinations/orders",
            absl::StrCat(R"({"urls":[{"url":")", (*second)->Url(), R"("}]})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LT(seen_on_b("/admin/v1/destinations/orders", (*second)->Url()), absl::Seconds(1));
  track("after-change");
  ASSERT_TRUE((*second)->WaitForRequests(1, absl::Seconds(20)));
  EXPECT_EQ(JsonStr((*second)->Requests()[0].body, "/messageId"), "after-change");
  EXPECT_EQ((*first)->request_count(), 1);

  // Ten sources created through a and b at the same time: none is lost.
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 5; ++i) {
        const HttpResponse created =
            Admin(w == 0 ? admin_a : admin_b, "POST", "/admin/v1/sources",
                  absl::StrCat(R"({"id":"s)", w, "-", i, R"(","name":"S","kind":"server"})"));
        EXPECT_EQ(created.status, 200) << created.body;
      }
    });
  }
  for (std::thread& t : writers) t.join();
  for (int admin : {admin_a, admin_b}) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    int found = 0;
    while (absl::Now() < deadline) {
      const HttpResponse list = Admin(admin, "GET", "/admin/v1/sources?pageSize=100");
      found = 0;
      for (int w = 0; w < 2; ++w) {
        for (int i = 0; i < 5; ++i) {
          found += absl::StrContains(list.body, absl::StrCat("\"s", w, "-", i, "\"")) ? 1 : 0;
        }
      }
      if (found == 10) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_EQ(found, 10) << "collector on admin port " << admin;
  }

  (*d)->Signal(SIGTERM);
  EXPECT_EQ((*d)->Wait(), 0);
  for (auto* c : {&*a, &*b}) {
    (*c)->Signal(SIGTERM);
    EXPECT_EQ((*c)->Wait(), 0);
  }
}

// The cluster unreachable (its only server killed): ingest answers 503 with Retry-After, /healthz
// and /readyz say so; the server back on the same port and store: the collector reconnects by
// itself, every event acknowledged before and after is delivered.
TEST(JetStreamEndToEndTest, UnreachableClusterRefusesThenRecovers) {
  absl::StatusOr<std::unique_ptr<NatsCluster>> cluster = NatsCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string dir = MakeTempDir("jetstream-unreachable");
  auto receiver = receiver::WebhookReceiver::Start(receiver::WebhookReceiver::Options{}, nullptr);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  auto c = StartCollectorProcess("", dir + "/c",
                                 {"--store=jetstream",
                                  absl::StrCat("--nats_url=", (*cluster)->urls()),
                                  "--nats_replicas=1"});
  ASSERT_TRUE(c.ok()) << c.status();
  const int admin = (*c)->IntField("admin_http_port");
  const int http = (*c)->IntField("http_port");
  const int metrics = (*c)->IntField("metrics_port");
  HttpResponse r = Admin(admin, "POST", "/admin/v1/sources",
                         R"({"id":"shop","name":"Shop","kind":"server"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key = JsonStr(r.body, "/writeKeys/0");
  r = Admin(admin, "POST", "/admin/v1/destinations",
            absl::StrCat(R"({"id":"orders","sources":["shop"],"enabled":true,"urls":[{"url":")",
                         (*receiver)->Url(), R"("}]})"));
  ASSERT_EQ(r.status, 200) << r.body;
  auto d = StartDelivererProcess({(*c)->IntField("grpc_port")}, {});
  ASSERT_TRUE(d.ok()) << d.status();

  auto track = [&](const std::string& id) {
    absl::StatusOr<HttpResponse> t =
        HttpPost(http, "/v1/track",
                 absl::StrCat(R"({"userId":"u1","event":"Ordered","messageId":")", id, R"("})"),
                 key);
    return t.ok() ? *std::move(t) : HttpResponse{};
  };
  auto status_of = [](int port, const std::string& target) {
    return Admin(port, "GET", target).status;
  };
  std::set<std::string> acked;
  for (int i = 0; i < 20; ++i) {
    const std::string id = absl::StrCat("before-", i);
    ASSERT_EQ(track(id).status, 200);
    acked.insert(id);
  }

  ASSERT_TRUE((*cluster)->Kill(0).ok());
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline &&
         (status_of(http, "/healthz") != 503 || status_of(metrics, "/readyz") != 503)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(status_of(http, "/healthz"), 503);
  EXPECT_EQ(status_of(metrics, "/readyz"), 503);
  const HttpResponse refused = track("while-down");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_FALSE(refused.Header("Retry-After").empty());
  EXPECT_TRUE(absl::StrContains(refused.body, "JetStream cluster is unreachable")) << refused.body;

  ASSERT_TRUE((*cluster)->Restart(0).ok());
  deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline && status_of(http, "/healthz") != 200) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(status_of(http, "/healthz"), 200);
  EXPECT_EQ(status_of(metrics, "/readyz"), 200);
  // Right after the restart the server may still be recovering its streams: a refusal then is
  // allowed (not acknowledged), not a lost event.
  for (int i = 0; i < 20; ++i) {
    const std::string id = absl::StrCat("after-", i);
    HttpResponse answer = track(id);
    for (int attempt = 0; answer.status != 200 && attempt < 50; ++attempt) {
      absl::SleepFor(absl::Milliseconds(200));
      answer = track(id);
    }
    ASSERT_EQ(answer.status, 200) << answer.body;
    acked.insert(id);
  }
  EXPECT_TRUE(WaitDelivered(**receiver, acked, absl::Seconds(60)))
      << DeliveredIds(**receiver).size() << " of " << acked.size();

  (*d)->Signal(SIGTERM);
  EXPECT_EQ((*d)->Wait(), 0);
  (*c)->Signal(SIGTERM);
  EXPECT_EQ((*c)->Wait(), 0);
}

}  // namespace
}  // namespace hookrelay::test
