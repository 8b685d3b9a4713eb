#include "collector/ingest/ingestor.h"

#include <stdlib.h>

#include <memory>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"
#include "common/clock.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace hookrelay::collector {
namespace {

constexpr char kConfig[] = R"(
sources:
  - id: web
    name: Website
    kind: web
    write_keys: [wk_web]
  - id: ios
    name: App
    kind: mobile
    write_keys: [wk_ios]
destinations:
  - id: a
    type: webhooks
    sources: [web, ios]
    enabled: true
    urls: [{url: "http://127.0.0.1:9/a"}]
  - id: b
    type: webhooks
    sources: [web]
    enabled: true
    urls: [{url: "http://127.0.0.1:9/b"}]
  - id: off
    type: webhooks
    sources: [web, ios]
    enabled: false
    urls: [{url: "http://127.0.0.1:9/off"}]
)";

class IngestorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/ingestor_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto config = common::ParseConfigYaml(kConfig);
    ASSERT_TRUE(config.ok()) << config.status();
    ASSERT_TRUE(common::ValidateConfig(*config).ok());
    routing_ = std::make_unique<RoutingHolder>(std::make_shared<const Routing>(*config));
    RocksDbJobStore::Options options;
    options.path = dir_;
    options.clock = &clock_;
    auto store = RocksDbJobStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    metrics_ = std::make_unique<IngestMetrics>(registry_);
    ingestor_ = std::make_unique<Ingestor>(Ingestor::Options{}, *routing_, *store_, clock_,
                                           metrics_.get());
  }

  // A request's `done` runs on the store's write thread before the Ingestor's own bookkeeping
  // for it (under mu_): waiting for `done` is not enough before destroying the Ingestor. Like
  // Server::Shutdown, wait until every request is finished (TSan caught the use-after-free).
  void TearDown() override {
    if (ingestor_ != nullptr) ingestor_->WaitIdle();
  }

  absl::StatusOr<IngestOutcome> Ingest(std::string_view key, std::vector<RawEvent> events) {
    absl::StatusOr<IngestOutcome> result;
    absl::Notification done;
    ingestor_->Ingest(key, std::move(events), [&](absl::StatusOr<IngestOutcome> r) {
      result = std::move(r);
      done.Notify();
    });
    done.WaitForNotification();
    return result;
  }

  std::vector<hookrelay::v1::Job> LeaseAll() {
    auto leased = store_->Lease(100000);
    EXPECT_TRUE(leased.ok()) << leased.status();
    std::vector<hookrelay::v1::Job> jobs;
    if (leased.ok()) {
      for (auto& l : *leased) jobs.push_back(std::move(l.job));
    }
    return jobs;
  }

  std::string Metrics() {
    return prometheus::TextSerializer().Serialize(registry_.Collect());
  }

  static RawEvent Track(std::string user, std::string message_id = "") {
    RawEvent e;
    e.type = hookrelay::v1::TRACK;
    e.user_id = std::move(user);
    e.event = "Signed Up";
    e.message_id = std::move(message_id);
    e.json_bytes = 80;
    return e;
  }

  common::ManualClock clock_;
  std::string dir_;
  prometheus::Registry registry_;
  std::unique_ptr<RoutingHolder> routing_;
  std::unique_ptr<RocksDbJobStore> store_;
  std::unique_ptr<IngestMetrics> metrics_;
  std::unique_ptr<Ingestor> ingestor_;
};

// One job per (event, enabled destination); the disabled destination gets none.
TEST_F(IngestorTest, FansOutToEnabledDestinations) {
  auto r = Ingest("wk_web", {Track("u1", "m1")});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->accepted, 1u);
  auto jobs = LeaseAll();
  ASSERT_EQ(jobs.size(), 2u);
  std::set<std::string> destinations;
  for (const auto& j : jobs) {
    destinations.insert(j.destination_id());
    EXPECT_EQ(j.source_id(), "web");
    EXPECT_EQ(j.message_id(), "m1");
    EXPECT_EQ(j.user_id(), "u1");
    EXPECT_EQ(j.received_at_unix_ms(), absl::ToUnixMillis(clock_.Now()));
    EXPECT_NE(j.event_json().find(R"("event":"Signed Up")"), std::string::npos);
  }
  EXPECT_EQ(destinations, (std::set<std::string>{"a", "b"}));

  auto ios = Ingest("wk_ios", {Track("u2")});
  ASSERT_TRUE(ios.ok());
  jobs = LeaseAll();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].destination_id(), "a");
}

// The integrations map switches the Webhooks destinations off and on per event.
TEST_F(IngestorTest, IntegrationsMap) {
  std::vector<RawEvent> events;
  events.push_back(Track("off1"));
  events.back().flags.all = false;
  events.push_back(Track("on1"));
  events.back().flags = {.all = false, .webhooks = true};
  events.push_back(Track("off2"));
  events.back().flags.webhooks = false;
  auto r = Ingest("wk_ios", std::move(events));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 3u);
  auto jobs = LeaseAll();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].user_id(), "on1");
}

// Unknown and missing write keys are refused before anything is stored.
TEST_F(IngestorTest, Unauthenticated) {
  auto r = Ingest("nope", {Track("u")});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated);
  r = Ingest("", {Track("u")});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(LeaseAll().empty());
  EXPECT_NE(Metrics().find(R"(hookrelay_ingest_rejected_total{reason="unauthenticated"} 2)"),
            std::string::npos);
}

// Invalid events are reported with index and field; the valid ones beside them are stored.
TEST_F(IngestorTest, MixedBatchKeepsGoodEvents) {
  std::vector<RawEvent> events;
  events.push_back(Track("u1"));
  events.push_back(Track(""));
  events.push_back(Track("u3"));
  auto r = Ingest("wk_ios", std::move(events));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 2u);
  ASSERT_EQ(r->rejected.size(), 1u);
  EXPECT_EQ(r->rejected[0].index, 1u);
  EXPECT_EQ(r->rejected[0].field, "userId");
  EXPECT_TRUE(r->message_ids[1].empty());
  EXPECT_FALSE(r->message_ids[0].empty());
  EXPECT_EQ(LeaseAll().size(), 2u);
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find(R"(hookrelay_ingest_events_total{source="ios",type="track"} 2)"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(hookrelay_ingest_rejected_total{reason="invalid_userId"} 1)"),
            std::string::npos);
}

// The same messageId from the same source is stored once.
TEST_F(IngestorTest, DeduplicatesByMessageId) {
  ASSERT_TRUE(Ingest("wk_ios", {Track("u", "dup")}).ok());
  auto again = Ingest("wk_ios", {Track("u", "dup")});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->accepted, 1u);  // a duplicate is acknowledged, not stored twice
  EXPECT_EQ(LeaseAll().size(), 1u);
}

// Beyond max_pending_events requests are refused with RESOURCE_EXHAUSTED instead of queueing.
TEST_F(IngestorTest, OverloadIsRefused) {
  Ingestor small(Ingestor::Options{.max_pending_events = 3}, *routing_, *store_, clock_, nullptr);
  // Hold the first request un-answered by blocking inside its callback.
  absl::Notification first_in_callback, release;
  std::vector<RawEvent> three = {Track("a"), Track("b"), Track("c")};
  small.Ingest("wk_ios", std::move(three), [&](absl::StatusOr<IngestOutcome> r) {
    EXPECT_TRUE(r.ok());
    first_in_callback.Notify();
    release.WaitForNotification();
  });
  first_in_callback.WaitForNotification();
  absl::StatusOr<IngestOutcome> refused;
  small.Ingest("wk_ios", {Track("d")}, [&](absl::StatusOr<IngestOutcome> r) { refused = r; });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  release.Notify();
  small.WaitIdle();
}

// After BeginShutdown new requests get UNAVAILABLE; WaitIdle returns once answered.
TEST_F(IngestorTest, ShutdownRefusesNewRequests) {
  ingestor_->BeginShutdown();
  auto r = Ingest("wk_ios", {Track("u")});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  ingestor_->WaitIdle();
}

// A config reload takes effect for the next request.
TEST_F(IngestorTest, ReloadSwitchesKeys) {
  auto config = common::ParseConfigYaml(R"(
sources:
  - {id: web, name: W, kind: web, write_keys: [wk_new]}
destinations: []
)");
  ASSERT_TRUE(config.ok()) << config.status();
  routing_->Set(std::make_shared<const Routing>(*config));
  EXPECT_EQ(Ingest("wk_web", {Track("u")}).status().code(), absl::StatusCode::kUnauthenticated);
  auto r = Ingest("wk_new", {Track("u")});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(LeaseAll().empty());  // no destinations: acknowledged, nothing to deliver
}

// Filters (SPEC §5.4): a refused event makes no job for that destination, the others still get
// theirs, and each refusal is counted per destination and failing part, for stored events only.
TEST_F(IngestorTest, FiltersHoldBackJobsAndAreCounted) {
  auto config = common::ParseConfigYaml(R"(
sources:
  - {id: web, write_keys: [wk_f]}
destinations:
  - id: orders
    type: webhooks
    sources: [web]
    enabled: true
    urls: [{url: "http://127.0.0.1:9/o"}]
    filter: {events: ["Order *"], where: [{path: properties.plan, op: eq, value: pro}]}
  - id: people
    type: webhooks
    sources: [web]
    enabled: true
    urls: [{url: "http://127.0.0.1:9/p"}]
    filter: {types: [identify]}
  - id: all
    type: webhooks
    sources: [web]
    enabled: true
    urls: [{url: "http://127.0.0.1:9/a"}]
)");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(common::ValidateConfig(*config).ok()) << common::ValidateConfig(*config);
  routing_->Set(std::make_shared<const Routing>(*config));
  metrics_->DeclareFilteredDestinations({"orders", "people"});

  std::vector<RawEvent> events;
  events.push_back(Track("u1", "pro-order"));
  events.back().event = "Order Completed";
  events.back().properties = R"({"plan":"pro","total":10})";
  events.push_back(Track("u2", "free-order"));
  events.back().event = "Order Completed";
  events.back().properties = R"({"plan":"free"})";
  events.push_back(Track("u3", "signup"));
  RawEvent identify;
  identify.type = hookrelay::v1::IDENTIFY;
  identify.user_id = "u4";
  identify.message_id = "identify";
  identify.traits = R"({"plan":"pro"})";
  identify.json_bytes = 60;
  events.push_back(std::move(identify));
  auto r = Ingest("wk_f", std::move(events));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->accepted, 4u);
  // A duplicate makes no jobs and is not counted again.
  std::vector<RawEvent> again;
  again.push_back(Track("u2", "free-order"));
  again.back().event = "Order Completed";
  ASSERT_TRUE(Ingest("wk_f", std::move(again)).ok());

  std::set<std::pair<std::string, std::string>> jobs;  // (destination, messageId)
  for (const auto& j : LeaseAll()) {
    jobs.emplace(j.destination_id(), j.message_id());
    EXPECT_NE(j.event_json().find(absl::StrCat("\"messageId\":\"", j.message_id(), "\"")),
              std::string::npos);
  }
  EXPECT_EQ(jobs, (std::set<std::pair<std::string, std::string>>{
                      {"orders", "pro-order"},
                      {"people", "identify"},
                      {"all", "pro-order"},
                      {"all", "free-order"},
                      {"all", "signup"},
                      {"all", "identify"}}));
  const std::string metrics = Metrics();
  for (const char* line : {
           R"(hookrelay_ingest_filtered_total{destination="orders",reason="where"} 1)",
           R"(hookrelay_ingest_filtered_total{destination="orders",reason="event"} 2)",
           R"(hookrelay_ingest_filtered_total{destination="orders",reason="type"} 0)",
           R"(hookrelay_ingest_filtered_total{destination="people",reason="type"} 3)",
           R"(hookrelay_ingest_filtered_total{destination="people",reason="where"} 0)",
       }) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line << "\n" << metrics;
  }
  EXPECT_EQ(metrics.find(R"(destination="all")"), std::string::npos);
  EXPECT_NE(metrics.find(R"(hookrelay_ingest_events_total{source="web",type="track"} 3)"),
            std::string::npos);
}

// The integrations map is applied before filters: an event switched off is not counted as
// filtered.
TEST_F(IngestorTest, IntegrationsOffIsNotCountedAsFiltered) {
  auto config = common::ParseConfigYaml(R"(
sources: [{id: web, write_keys: [wk_f]}]
destinations:
  - {id: only-pages, type: webhooks, sources: [web], enabled: true,
     urls: [{url: "http://127.0.0.1:9/o"}], filter: {types: [page]}}
)");
  ASSERT_TRUE(config.ok()) << config.status();
  routing_->Set(std::make_shared<const Routing>(*config));
  std::vector<RawEvent> events;
  events.push_back(Track("u1"));
  events.back().flags.webhooks = false;
  events.push_back(Track("u2"));
  ASSERT_TRUE(Ingest("wk_f", std::move(events)).ok());
  EXPECT_TRUE(LeaseAll().empty());
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find(
                R"(hookrelay_ingest_filtered_total{destination="only-pages",reason="type"} 1)"),
            std::string::npos)
      << metrics;
}

}  // namespace
}  // namespace hookrelay::collector
