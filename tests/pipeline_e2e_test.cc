// End to end in one process: events of every type in over HTTP (/v1/batch) and gRPC (Ingest),
// out at a real receiver as SPEC §5.1 bodies with a signature the test recomputes itself;
// the integrations map and a disabled destination decide who gets what.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <set>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/collector.grpc.pb.h"
#include "tests/collector_test_util.h"
#include "tests/pipeline_test_util.h"
#include "tests/test_engines.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using receiver::ReceivedRequest;
using receiver::WebhookReceiver;

constexpr char kSecret[] = "s3cr3t";

// "hook" (enabled, signed, one static header) and "hook-off" (disabled), both on source web.
std::string Config(const WebhookReceiver& on, const WebhookReceiver& off) {
  return absl::StrCat(R"yaml(sources:
  - id: web
    name: Website
    kind: web
    write_keys: [)yaml",
                      kWebKey, R"yaml(]
destinations:
  - id: hook
    type: webhooks
    sources: [web]
    enabled: true
    shared_secret: )yaml",
                      kSecret, R"yaml(
    urls:
      - url: )yaml",
                      on.Url(), R"yaml(
        headers:
          X-Api-Key: demo
  - id: hook-off
    type: webhooks
    sources: [web]
    enabled: false
    urls:
      - url: )yaml",
                      off.Url(), "\n");
}

constexpr char kHttpBatch[] = R"json({"batch":[
 {"type":"track","userId":"u1","event":"Order Completed","messageId":"h-track",
  "timestamp":"2023-11-14T22:00:00.5Z","properties":{"total":19.99,"count":3,"name":"É"}},
 {"type":"identify","userId":"u1","anonymousId":"a1","messageId":"h-identify",
  "traits":{"email":"u1@example.com","plan":"pro"}},
 {"type":"page","userId":"u1","name":"Home","category":"Docs","messageId":"h-page",
  "properties":{"path":"/","title":"Home","url":"https://example.com/"}},
 {"type":"screen","userId":"u1","name":"Cart","messageId":"h-screen",
  "context":{"device":{"model":"iPhone15,2","type":"ios"},"os":{"name":"iOS","version":"17.1"},
             "app":{"build":"42","name":"Shop","version":"1.2"}}},
 {"type":"group","userId":"u1","groupId":"g1","messageId":"h-group",
  "traits":{"Company Name":"Initech","employees":120}},
 {"type":"alias","userId":"u1","previousId":"anon-9","messageId":"h-alias"},
 {"type":"track","userId":"u1","event":"Skipped","messageId":"h-off",
  "integrations":{"Webhooks":false}},
 {"type":"track","userId":"u1","event":"Skipped","messageId":"h-all-off",
  "integrations":{"All":false}},
 {"type":"track","userId":"u1","event":"Kept","messageId":"h-all-off-on",
  "integrations":{"All":false,"Webhooks":true}}
]})json";

Value Str(const std::string& s) {
  Value v;
  v.set_string_value(s);
  return v;
}

hookrelay::v1::Event GrpcEvent(hookrelay::v1::EventType type, const std::string& id) {
  hookrelay::v1::Event e;
  e.set_type(type);
  e.set_message_id(id);
  e.set_user_id("u2");
  return e;
}

std::vector<hookrelay::v1::Event> GrpcEvents() {
  std::vector<hookrelay::v1::Event> events;
  auto track = GrpcEvent(hookrelay::v1::TRACK, "g-track");
  track.set_event("Signed Up");
  (*track.mutable_properties()->mutable_fields())["plan"] = Str("pro");
  (*track.mutable_properties()->mutable_fields())["seats"].set_number_value(5);
  events.push_back(track);
  auto identify = GrpcEvent(hookrelay::v1::IDENTIFY, "g-identify");
  (*identify.mutable_traits()->mutable_fields())["name"] = Str("Ada");
  events.push_back(identify);
  auto page = GrpcEvent(hookrelay::v1::PAGE, "g-page");
  page.set_name("Pricing");
  events.push_back(page);
  auto screen = GrpcEvent(hookrelay::v1::SCREEN, "g-screen");
  screen.set_name("Settings");
  events.push_back(screen);
  auto group = GrpcEvent(hookrelay::v1::GROUP, "g-group");
  group.set_group_id("g2");
  events.push_back(group);
  auto alias = GrpcEvent(hookrelay::v1::ALIAS, "g-alias");
  alias.set_previous_id("anon-2");
  events.push_back(alias);
  return events;
}

// On both job-store engines (tests/test_engines.h).
class PipelineE2eTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineE2eTest, EveryTypeOverHttpAndGrpcReachesTheReceiverSigned) {
  auto on = WebhookReceiver::Start({});
  auto off = WebhookReceiver::Start({});
  ASSERT_TRUE(on.ok() && off.ok());
  absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
  ASSERT_TRUE(engine.ok()) << engine.status();
  InProcessPipeline::Options options;
  options.engine = *engine;
  InProcessPipeline p("e2e", Config(**on, **off), options);
  ASSERT_TRUE(p.Start().ok());

  absl::StatusOr<HttpResponse> http = HttpPost(p.collector().http_port(), "/v1/batch",
                                               kHttpBatch, kWebKey);
  ASSERT_TRUE(http.ok()) << http.status();
  ASSERT_EQ(http->status, 200) << http->body;

  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", p.collector().grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = hookrelay::v1::Collector::NewStub(channel);
  hookrelay::v1::IngestRequest request;
  for (auto& e : GrpcEvents()) *request.add_events() = e;
  hookrelay::v1::IngestResponse response;
  grpc::ClientContext context;
  context.AddMetadata("x-write-key", kWebKey);
  const grpc::Status st = stub->Ingest(&context, request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(response.accepted(), 6);

  // 7 HTTP events routed to "hook" (two switched off by integrations) + 6 over gRPC.
  ASSERT_TRUE((*on)->WaitForRequests(13, kPipelineWait)) << (*on)->request_count();
  ASSERT_TRUE(p.WaitForCounts([](const collector::JobCounts& c) {
    return c.ready == 0 && c.leased == 0 && c.scheduled == 0 && c.dead == 0;
  }));
  // Nothing more is sent, even hours later.
  ASSERT_TRUE(p.AdvanceAndWaitForDispatch(absl::Hours(5)));
  EXPECT_EQ((*on)->request_count(), 13);
  EXPECT_EQ((*off)->request_count(), 0);

  std::map<std::string, ReceivedRequest> by_id;
  const std::regex iso_millis(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$)");
  for (const ReceivedRequest& r : (*on)->Requests()) {
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.target, "/hooks");
    EXPECT_EQ(r.Header("User-Agent"), "hookrelay/1.0");
    EXPECT_EQ(r.Header("Content-Type"), "application/json");
    EXPECT_EQ(r.Header("X-Api-Key"), "demo");
    EXPECT_EQ(r.Header("X-Signature"), HmacSha1HexForTest(kSecret, r.body));
    const std::string id = JsonStr(r.body, "/messageId");
    EXPECT_EQ(r.Header("Idempotency-Key"), id);
    EXPECT_TRUE(std::regex_match(JsonStr(r.body, "/timestamp"), iso_millis)) << r.body;
    EXPECT_EQ(JsonAt(r.body, "/version"), "1") << r.body;
    by_id[id] = r;
  }
  ASSERT_EQ(by_id.size(), 13u);
  EXPECT_FALSE(by_id.count("h-off"));
  EXPECT_FALSE(by_id.count("h-all-off"));
  EXPECT_TRUE(by_id.count("h-all-off-on"));

  const std::string& track = by_id["h-track"].body;
  EXPECT_EQ(JsonStr(track, "/type"), "track");
  EXPECT_EQ(JsonStr(track, "/event"), "Order Completed");
  EXPECT_EQ(JsonAt(track, "/properties"), R"({"total":19.99,"count":3,"name":"É"})");
  EXPECT_EQ(JsonStr(track, "/timestamp"), "2023-11-14T22:00:00.500Z");
  EXPECT_EQ(JsonAt(by_id["h-identify"].body, "/traits/plan"), "\"pro\"");
  EXPECT_EQ(JsonStr(by_id["h-identify"].body, "/anonymousId"), "a1");
  EXPECT_EQ(JsonStr(by_id["h-page"].body, "/properties/path"), "/");
  EXPECT_EQ(JsonStr(by_id["h-page"].body, "/category"), "Docs");
  const std::string& screen = by_id["h-screen"].body;
  EXPECT_EQ(JsonStr(screen, "/name"), "Cart");
  EXPECT_EQ(JsonStr(screen, "/context/device/model"), "iPhone15,2");
  EXPECT_EQ(JsonStr(screen, "/context/os/version"), "17.1");
  EXPECT_EQ(JsonStr(screen, "/context/app/build"), "42");
  EXPECT_EQ(JsonAt(by_id["h-group"].body, "/traits"), R"({"Company Name":"Initech","employees":120})");
  const std::string& alias = by_id["h-alias"].body;
  EXPECT_EQ(JsonStr(alias, "/previousId"), "anon-9");
  EXPECT_EQ(JsonStr(alias, "/userId"), "u1");
  EXPECT_EQ(JsonStr(alias, "/Previous ID"), "anon-9");
  EXPECT_EQ(JsonStr(alias, "/User ID"), "u1");

  EXPECT_EQ(JsonAt(by_id["g-track"].body, "/properties/seats"), "5");
  EXPECT_EQ(JsonStr(by_id["g-identify"].body, "/traits/name"), "Ada");
  EXPECT_EQ(JsonStr(by_id["g-page"].body, "/name"), "Pricing");
  EXPECT_EQ(JsonStr(by_id["g-screen"].body, "/type"), "screen");
  EXPECT_EQ(JsonStr(by_id["g-group"].body, "/groupId"), "g2");
  EXPECT_EQ(JsonStr(by_id["g-alias"].body, "/Previous ID"), "anon-2");
}

// A W3C traceparent sent with an ingest request (HTTP header or gRPC metadata) reaches the
// receiver on every attempt of its job, a retry included: the same trace id and flags, a new
// parent id each attempt, the tracestate unchanged. An event sent without one gets none.
TEST_P(PipelineE2eTest, TraceparentTravelsFromIngestToEveryAttempt) {
  // Every message's first attempt fails (503), its second is delivered.
  absl::Mutex mu;
  std::map<std::string, int> seen;
  auto on = WebhookReceiver::Start({}, [&](const ReceivedRequest& r) {
    absl::MutexLock lock(&mu);
    receiver::Response response;
    if (seen[r.Header("Idempotency-Key")]++ == 0) response.status = 503;
    return response;
  });
  ASSERT_TRUE(on.ok()) << on.status();
  absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
  ASSERT_TRUE(engine.ok()) << engine.status();
  InProcessPipeline::Options options;
  options.engine = *engine;
  InProcessPipeline p("e2e_trace", PipelineConfig({(*on)->Url()}, kSecret), options);
  ASSERT_TRUE(p.Start().ok());

  constexpr char kHttpParent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  constexpr char kGrpcParent[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
  absl::StatusOr<HttpResponse> http = HttpPost(
      p.collector().http_port(), "/v1/track",
      R"({"type":"track","userId":"u1","event":"E","messageId":"t-http"})", kWebKey,
      {{"traceparent", kHttpParent}, {"tracestate", "rojo=00f067aa0ba902b7"}});
  ASSERT_TRUE(http.ok()) << http.status();
  ASSERT_EQ(http->status, 200) << http->body;
  http = HttpPost(p.collector().http_port(), "/v1/track",
                  R"({"type":"track","userId":"u1","event":"E","messageId":"t-none"})", kWebKey);
  ASSERT_TRUE(http.ok()) << http.status();
  ASSERT_EQ(http->status, 200) << http->body;

  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", p.collector().grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = hookrelay::v1::Collector::NewStub(channel);
  hookrelay::v1::IngestRequest request;
  hookrelay::v1::Event event = GrpcEvent(hookrelay::v1::TRACK, "t-grpc");
  event.set_event("E");
  *request.add_events() = event;
  hookrelay::v1::IngestResponse response;
  grpc::ClientContext context;
  context.AddMetadata("x-write-key", kWebKey);
  context.AddMetadata("traceparent", kGrpcParent);
  const grpc::Status st = stub->Ingest(&context, request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();

  // Three failed first attempts, then the retries once they are due.
  ASSERT_TRUE((*on)->WaitForRequests(3, kPipelineWait)) << (*on)->request_count();
  ASSERT_TRUE(p.WaitForCounts([](const collector::JobCounts& c) {
    return c.ready == 0 && c.leased == 0 && c.scheduled == 3;
  }));
  while (p.store().Counts().scheduled > 0) {
    ASSERT_TRUE(p.AdvanceToNextDue());
    ASSERT_TRUE(p.WaitForCounts([](const collector::JobCounts& c) {
      return c.ready == 0 && c.leased == 0;
    }));
  }
  ASSERT_TRUE(WaitDelivered(**on, {"t-http", "t-grpc", "t-none"}, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts([](const collector::JobCounts& c) {
    return c.ready == 0 && c.leased == 0 && c.scheduled == 0 && c.dead == 0;
  }));

  std::map<std::string, std::vector<ReceivedRequest>> by_id;
  for (const ReceivedRequest& r : (*on)->Requests()) by_id[r.Header("Idempotency-Key")].push_back(r);
  ASSERT_EQ(by_id.size(), 3u);
  const std::vector<std::pair<std::string, std::string>> traced = {{"t-http", kHttpParent},
                                                                   {"t-grpc", kGrpcParent}};
  for (const auto& [id, parent] : traced) {
    ASSERT_EQ(by_id[id].size(), 2u) << id;
    const std::string trace_id = parent.substr(3, 32);
    const std::string flags = parent.substr(53);
    std::vector<std::string> parent_ids;
    for (const ReceivedRequest& r : by_id[id]) {
      const std::string sent = r.Header("traceparent");
      ASSERT_EQ(sent.size(), 55u) << id << ": " << sent;
      EXPECT_EQ(sent.substr(0, 3), "00-") << id;
      EXPECT_EQ(sent.substr(3, 32), trace_id) << id;
      EXPECT_EQ(sent.substr(53), flags) << id;
      EXPECT_NE(sent.substr(36, 16), parent.substr(36, 16)) << id;
      parent_ids.push_back(sent.substr(36, 16));
    }
    EXPECT_NE(parent_ids[0], parent_ids[1]) << id;
  }
  for (const ReceivedRequest& r : by_id["t-http"]) {
    EXPECT_EQ(r.Header("tracestate"), "rojo=00f067aa0ba902b7");
  }
  for (const ReceivedRequest& r : by_id["t-grpc"]) EXPECT_EQ(r.Header("tracestate"), "");
  ASSERT_EQ(by_id["t-none"].size(), 2u);
  for (const ReceivedRequest& r : by_id["t-none"]) {
    EXPECT_EQ(r.Header("traceparent"), "");
    EXPECT_EQ(r.Header("tracestate"), "");
  }
}

// Destination filters (SPEC §5.4) over both front ends: an event refused by "pro-orders"'s
// filter makes no job for it (the unfiltered destination beside it gets every event); a barrier
// event that passes is sent last, and once it has arrived the filtered receiver holds exactly the
// passing events.
TEST_P(PipelineE2eTest, FilteredEventsMakeNoJobOnEitherFrontEnd) {
  auto pro = WebhookReceiver::Start({});
  auto all = WebhookReceiver::Start({});
  ASSERT_TRUE(pro.ok() && all.ok());
  absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
  ASSERT_TRUE(engine.ok()) << engine.status();
  InProcessPipeline::Options options;
  options.engine = *engine;
  const std::string config = absl::StrCat(
      "sources: [{id: web, write_keys: [", kWebKey, "]}]\n",
      "destinations:\n"
      "  - id: pro-orders\n"
      "    type: webhooks\n"
      "    sources: [web]\n"
      "    enabled: true\n"
      "    urls: [{url: '", (*pro)->Url(), "'}]\n",
      "    filter:\n"
      "      events: ['Order *']\n"
      "      where:\n"
      "        - {path: properties.plan, op: eq, value: pro}\n"
      "        - {path: properties.total, op: gte, value: 10}\n"
      "  - {id: everything, type: webhooks, sources: [web], enabled: true,\n"
      "     urls: [{url: '", (*all)->Url(), "'}]}\n");
  InProcessPipeline p("e2e_filter", config, options);
  ASSERT_TRUE(p.Start().ok());

  absl::StatusOr<HttpResponse> http = HttpPost(p.collector().http_port(), "/v1/batch", R"json({"batch":[
 {"type":"track","userId":"u1","event":"Order Completed","messageId":"h-pass",
  "properties":{"plan":"pro","total":12}},
 {"type":"track","userId":"u1","event":"Order Completed","messageId":"h-free",
  "properties":{"plan":"free","total":12}},
 {"type":"track","userId":"u1","event":"Order Completed","messageId":"h-small",
  "properties":{"plan":"pro","total":9.5}},
 {"type":"track","userId":"u1","event":"Order Completed","messageId":"h-total-string",
  "properties":{"plan":"pro","total":"12"}},
 {"type":"track","userId":"u1","event":"Signed Up","messageId":"h-name",
  "properties":{"plan":"pro","total":12}},
 {"type":"identify","userId":"u1","messageId":"h-identify","traits":{"plan":"pro"}}
]})json", kWebKey);
  ASSERT_TRUE(http.ok()) << http.status();
  ASSERT_EQ(http->status, 200) << http->body;

  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", p.collector().grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = hookrelay::v1::Collector::NewStub(channel);
  hookrelay::v1::IngestRequest request;
  auto grpc_order = [&](const std::string& id, const std::string& plan) {
    hookrelay::v1::Event e = GrpcEvent(hookrelay::v1::TRACK, id);
    e.set_event("Order Shipped");
    (*e.mutable_properties()->mutable_fields())["plan"] = Str(plan);
    (*e.mutable_properties()->mutable_fields())["total"].set_number_value(100);
    *request.add_events() = e;
  };
  grpc_order("g-pass", "pro");
  grpc_order("g-free", "free");
  hookrelay::v1::IngestResponse response;
  grpc::ClientContext context;
  context.AddMetadata("x-write-key", kWebKey);
  const grpc::Status st = stub->Ingest(&context, request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(response.accepted(), 2);

  // The barrier: accepted after everything above, and it passes the filter.
  http = HttpPost(p.collector().http_port(), "/v1/track",
                  R"({"userId":"u1","event":"Order Refunded","messageId":"barrier",)"
                  R"("properties":{"plan":"pro","total":10}})",
                  kWebKey);
  ASSERT_TRUE(http.ok() && http->status == 200);
  ASSERT_TRUE(WaitDelivered(**pro, {"barrier"}, kPipelineWait));
  ASSERT_TRUE(WaitDelivered(**all, {"barrier"}, kPipelineWait));
  ASSERT_TRUE(p.WaitSettled());
  EXPECT_EQ(DeliveredIds(**pro), (std::set<std::string>{"h-pass", "g-pass", "barrier"}));
  EXPECT_EQ(DeliveredIds(**all),
            (std::set<std::string>{"h-pass", "h-free", "h-small", "h-total-string", "h-name",
                                   "h-identify", "g-pass", "g-free", "barrier"}));
  EXPECT_EQ((*pro)->request_count(), 3);
}

// Batched webhooks through the real collector and deliverer: a batch request's outcome settles
// every member on the engine (the deliverer sends it once for all of them, SubscribeResponse.
// grouped_outcomes): a 503 schedules all five for the same retry, which goes again as the same
// request and delivers them; a 400 dead-letters each member as its own job.
TEST_P(PipelineE2eTest, BatchOutcomeSettlesEveryMember) {
  std::atomic<int> requests{0};
  auto receiver = WebhookReceiver::Start({}, [&](const ReceivedRequest&) {
    receiver::Response answer;
    const int n = requests.fetch_add(1);
    if (n == 0) answer.status = 503;
    if (n >= 2) answer.status = 400;
    return answer;
  });
  ASSERT_TRUE(receiver.ok());
  absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
  ASSERT_TRUE(engine.ok()) << engine.status();
  InProcessPipeline::Options options;
  options.engine = *engine;
  const std::string config = absl::StrCat(
      "sources: [{id: web, write_keys: [", kWebKey, "]}]\n",
      "destinations:\n"
      "  - id: batched\n"
      "    type: webhooks\n"
      "    sources: [web]\n"
      "    enabled: true\n"
      "    urls: [{url: '", (*receiver)->Url(), "'}]\n",
      "    options: {batch: {max_events: 5, max_bytes: 500000, max_wait_ms: 10000}}\n");
  InProcessPipeline p("e2e_batch", config, options);
  ASSERT_TRUE(p.Start().ok());
  auto send = [&](int first) {
    std::string body = R"({"batch":[)";
    for (int i = first; i < first + 5; ++i) {
      absl::StrAppend(&body, i == first ? "" : ",",
                      R"({"type":"track","userId":"u1","event":"E","messageId":"m-)", i, R"("})");
    }
    body += "]}";
    absl::StatusOr<HttpResponse> http = HttpPost(p.collector().http_port(), "/v1/batch", body,
                                                 kWebKey);
    return http.ok() && http->status == 200;
  };

  ASSERT_TRUE(send(1));
  ASSERT_TRUE((*receiver)->WaitForRequests(1, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts([](const collector::JobCounts& c) {
    return c.scheduled == 5 && c.ready == 0 && c.leased == 0;
  })) << p.store().Counts().scheduled;
  ASSERT_TRUE(p.AdvanceToNextDue());
  ASSERT_TRUE((*receiver)->WaitForRequests(2, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts([](const collector::JobCounts& c) {
    return c.ready == 0 && c.leased == 0 && c.scheduled == 0 && c.dead == 0;
  }));
  std::vector<ReceivedRequest> got = (*receiver)->Requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].body, got[0].body);
  EXPECT_EQ(got[1].Header("Idempotency-Key"), got[0].Header("Idempotency-Key"));
  for (int i = 1; i <= 5; ++i) {
    EXPECT_NE(got[1].body.find(absl::StrCat(R"("messageId":"m-)", i, R"(")")),
              std::string::npos) << got[1].body;
  }

  ASSERT_TRUE(send(6));
  ASSERT_TRUE((*receiver)->WaitForRequests(3, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts([](const collector::JobCounts& c) {
    return c.dead == 5 && c.ready == 0 && c.leased == 0 && c.scheduled == 0;
  })) << p.store().Counts().dead;
  EXPECT_EQ((*receiver)->request_count(), 3);
}

INSTANTIATE_TEST_SUITE_P(Engines, PipelineE2eTest, EngineParams(), EngineParamName);

// Several collectors, one deliverer: jobs from each come back settled on their own stream.
// Embedded engine only: collectors on the JetStream engine share one store (and de-duplicate
// each other's events), which tests/jetstream_e2e_test.cc covers.
TEST(PipelineE2eTwoStoresTest, OneDelivererServesTwoCollectors) {
  auto on = WebhookReceiver::Start({});
  ASSERT_TRUE(on.ok());
  InProcessCollector a("e2e_two_a", PipelineConfig({(*on)->Url("/a")}, ""));
  InProcessCollector b("e2e_two_b", PipelineConfig({(*on)->Url("/b")}, ""));
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  prometheus::Registry registry;
  deliverer::DeliveryMetrics metrics(registry);
  auto sender = deliverer::HttpSender::Create({.allow_private_networks = true});
  ASSERT_TRUE(sender.ok());
  deliverer::Deliverer::Options options;
  options.collectors = {absl::StrCat("127.0.0.1:", a.grpc_port()),
                        absl::StrCat("127.0.0.1:", b.grpc_port())};
  deliverer::Deliverer d(options, **sender, common::Clock::Real(), &metrics);
  ASSERT_TRUE(d.Start().ok());
  for (int i = 0; i < 5; ++i) {
    const std::string body = absl::StrCat(R"({"userId":"u","event":"e","messageId":"m)", i, "\"}");
    ASSERT_EQ(HttpPost(a.http_port(), "/v1/track", body, kWebKey)->status, 200);
    ASSERT_EQ(HttpPost(b.http_port(), "/v1/track", body, kWebKey)->status, 200);
  }
  ASSERT_TRUE((*on)->WaitForRequests(10, kPipelineWait));
  int to_a = 0;
  for (const ReceivedRequest& r : (*on)->Requests()) to_a += r.target == "/a" ? 1 : 0;
  EXPECT_EQ(to_a, 5);
  const absl::Time deadline = absl::Now() + kPipelineWait;
  auto settled = [](InProcessCollector& c) {
    const collector::JobCounts n = c.server().job_store()->Counts();
    return n.ready + n.leased + n.scheduled + n.dead == 0;
  };
  while (absl::Now() < deadline && !(settled(a) && settled(b))) {
    absl::SleepFor(absl::Milliseconds(5));  // Polls two stores fed over real sockets.
  }
  EXPECT_TRUE(settled(a));
  EXPECT_TRUE(settled(b));
  EXPECT_EQ(d.connected_streams(), 2);
  d.Shutdown();
  sender->reset();  // before the deliverer goes out of scope
}

}  // namespace
}  // namespace hookrelay::test
