#include "collector/dispatch/dispatcher.h"

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collector/dispatch/subscribe_stream.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"
#include "collector/routing/routing.h"
#include "common/clock.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/collector.grpc.pb.h"
#include "prometheus/registry.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Delivery;
using hookrelay::v1::Outcome;
using hookrelay::v1::SubscribeRequest;
using hookrelay::v1::SubscribeResponse;

constexpr char kConfig[] = R"yaml(
sources:
  - {id: web, name: Web, kind: web, write_keys: [wk]}
destinations:
  - {id: hook, type: webhooks, sources: [web], enabled: true, urls: [{url: "https://h.example/a"}]}
  - {id: off, type: webhooks, sources: [web], enabled: false, urls: [{url: "https://h.example/b"}]}
)yaml";
constexpr absl::Duration kLease = absl::Seconds(30);
constexpr absl::Duration kWait = absl::Seconds(20);

// Serves only Subscribe, from the dispatcher under test.
class SubscribeService final : public hookrelay::v1::Collector::CallbackService {
 public:
  explicit SubscribeService(Dispatcher& dispatcher) : dispatcher_(dispatcher) {}
  grpc::ServerBidiReactor<SubscribeRequest, SubscribeResponse>* Subscribe(
      grpc::CallbackServerContext* context) override {
    return NewSubscribeStream(dispatcher_, context);
  }

 private:
  Dispatcher& dispatcher_;
};

// A real store on a temp dir, a real gRPC server on 127.0.0.1, the dispatcher on a manual clock.
class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RocksDbJobStore::Options store_options;
    store_options.path =
        absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    store_options.clock = &clock_;
    store_options.lease_duration = kLease;
    auto store = RocksDbJobStore::Open(store_options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto config = common::ParseConfigYaml(kConfig);
    ASSERT_TRUE(config.ok()) << config.status();
    routing_ = std::make_unique<RoutingHolder>(std::make_shared<const Routing>(*config));
    Dispatcher::Options options;
    options.max_batch = 4;
    options.drain_timeout = absl::Milliseconds(200);
    // As the server does: the destination is disabled in the configuration (here: the routing)
    // before the call returns.
    options.on_destination_gone = [this](const std::string& id, const std::string& reason) {
      {
        absl::MutexLock lock(&gone_mu_);
        gone_.push_back({id, reason});
      }
      auto config = common::ParseConfigYaml(kConfig);
      for (auto& d : *config->mutable_destinations()) {
        if (d.id() == id) d.set_enabled(false);
      }
      routing_->Set(std::make_shared<const Routing>(*config));
      return absl::OkStatus();
    };
    dispatcher_ = std::make_unique<Dispatcher>(options, *store_, *routing_, clock_, &registry_);
    // As the server does: the store's ready signal is what wakes the dispatcher for jobs.
    store_->SetReadyCallback([d = dispatcher_.get()] { d->Notify(); });
    dispatcher_->Start();
    service_ = std::make_unique<SubscribeService>(*dispatcher_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = hookrelay::v1::Collector::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (store_) store_->SetReadyCallback(nullptr);
    if (dispatcher_) dispatcher_->Shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  // Appends `n` jobs for `destination` and waits until they are durable. `shape`, when given,
  // edits each job before it is appended.
  void Append(int n, const std::string& destination,
              const std::function<void(hookrelay::v1::Job&)>& shape = nullptr) {
    std::vector<AppendItem> items(n);
    for (int i = 0; i < n; ++i) {
      items[i].dedup_key = absl::StrCat(destination, "-", next_id_++);
      hookrelay::v1::Job job;
      job.set_source_id("web");
      job.set_destination_id(destination);
      job.set_message_id(items[i].dedup_key);
      job.set_event_json(R"({"type":"track"})");
      if (shape) shape(job);
      items[i].jobs.emplace_back(job);
    }
    absl::Notification done;
    store_->Append(std::move(items), [&done](absl::StatusOr<AppendResult> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      done.Notify();
    });
    done.WaitForNotification();  // The store's ready signal wakes the dispatcher.
  }

  // Waits until the store's counts satisfy `pred` (polled: the dispatcher works on its thread).
  bool WaitCounts(const std::function<bool(const JobCounts&)>& pred) {
    const absl::Time deadline = absl::Now() + kWait;
    while (!pred(store_->Counts())) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(1));  // Polls state another thread changes.
    }
    return true;
  }

  // Moves the clock and waits for a dispatch pass that began after the move.
  bool AdvanceAndWaitForPass(absl::Duration d) {
    auto wait_past = [this](int64_t passes) {
      const absl::Time deadline = absl::Now() + kWait;
      while (dispatcher_->passes() <= passes) {
        if (absl::Now() >= deadline) return false;
        absl::SleepFor(absl::Milliseconds(1));  // Polls a counter of another thread.
      }
      return true;
    };
    const int64_t before = dispatcher_->passes();
    clock_.Advance(d);
    dispatcher_->Notify();
    if (!wait_past(before)) return false;
    const int64_t after = dispatcher_->passes();
    dispatcher_->Notify();
    return wait_past(after);
  }

  double Counter(const std::string& name, const std::string& label, const std::string& value) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != name) continue;
      for (const auto& metric : family.metric) {
        if (label.empty()) return metric.counter.value;
        for (const auto& pair : metric.label) {
          if (pair.name == label && pair.value == value) return metric.counter.value;
        }
      }
    }
    return -1;
  }

  common::ManualClock clock_;
  absl::Mutex gone_mu_;
  std::vector<std::pair<std::string, std::string>> gone_ ABSL_GUARDED_BY(gone_mu_);
  prometheus::Registry registry_;
  std::unique_ptr<RocksDbJobStore> store_;
  std::unique_ptr<RoutingHolder> routing_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<SubscribeService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<hookrelay::v1::Collector::Stub> stub_;
  int port_ = 0;
  int next_id_ = 0;
};

// One Subscribe stream, as a deliverer drives it.
class Stream {
 public:
  Stream(hookrelay::v1::Collector::Stub& stub, uint32_t credits, bool by_reference = false) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    rw_ = stub.Subscribe(&context_);
    SubscribeRequest hello;
    hello.mutable_hello()->set_deliverer_id("test");
    hello.mutable_hello()->set_credits(credits);
    hello.mutable_hello()->set_destinations_by_reference(by_reference);
    EXPECT_TRUE(rw_->Write(hello));
  }
  // Reads responses until `n` deliveries arrived; each response's size is recorded.
  std::vector<Delivery> Read(size_t n) {
    std::vector<Delivery> out;
    SubscribeResponse response;
    while (out.size() < n && rw_->Read(&response)) {
      batch_sizes.push_back(response.deliveries_size());
      for (const Delivery& d : response.deliveries()) out.push_back(d);
    }
    return out;
  }
  // The next response, whatever it carries.
  bool ReadResponse(SubscribeResponse* response) { return rw_->Read(response); }
  void Write(const SubscribeRequest& request) { EXPECT_TRUE(rw_->Write(request)); }
  void Settle(const Delivery& d, Outcome::Kind kind, uint64_t lease) {
    SubscribeRequest request;
    Outcome* outcome = request.mutable_outcomes()->add_outcomes();
    outcome->set_job_id(d.job().id());
    outcome->set_lease(lease);
    outcome->set_kind(kind);
    EXPECT_TRUE(rw_->Write(request));
  }
  void Close() {
    rw_->WritesDone();
    context_.TryCancel();
    (void)rw_->Finish();
  }

  std::vector<int> batch_sizes;

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<SubscribeRequest, SubscribeResponse>> rw_;
};

// A stream never holds more jobs than its credits, batches are at most max_batch, and each
// outcome returns one credit.
TEST_F(DispatcherTest, CreditsBoundJobsInFlightAndBatchesAreCapped) {
  Stream stream(*stub_, 6);
  Append(10, "hook");
  std::vector<Delivery> first = stream.Read(6);
  ASSERT_EQ(first.size(), 6u);
  for (int size : stream.batch_sizes) EXPECT_LE(size, 4);
  ASSERT_TRUE(AdvanceAndWaitForPass(absl::Milliseconds(100)));
  EXPECT_EQ(store_->Counts().leased, 6);
  EXPECT_EQ(store_->Counts().ready, 4);

  stream.Settle(first[0], Outcome::DELIVERED, first[0].lease());
  stream.Settle(first[1], Outcome::DELIVERED, first[1].lease());
  std::vector<Delivery> more = stream.Read(2);
  ASSERT_EQ(more.size(), 2u);
  ASSERT_TRUE(WaitCounts([](const JobCounts& c) { return c.ready == 2 && c.leased == 6; }));
  EXPECT_EQ(Counter("hookrelay_dispatch_outcomes_total", "outcome", "delivered"), 2);
  stream.Close();
}

// One outcome may settle several jobs (Outcome.also_job_ids, a batch request's members): each is
// settled with its own lease and returns its credit. Ids without a lease are left to their
// lease's end.
TEST_F(DispatcherTest, GroupedOutcomeSettlesEveryJobItNames) {
  Stream stream(*stub_, 5);
  Append(8, "hook");
  std::vector<Delivery> first = stream.Read(5);
  ASSERT_EQ(first.size(), 5u);
  SubscribeRequest request;
  Outcome* delivered = request.mutable_outcomes()->add_outcomes();
  delivered->set_job_id(first[0].job().id());
  delivered->set_lease(first[0].lease());
  delivered->set_kind(Outcome::DELIVERED);
  for (int i : {1, 2}) {
    delivered->add_also_job_ids(first[i].job().id());
    delivered->add_also_leases(first[i].lease());
  }
  Outcome* broken = request.mutable_outcomes()->add_outcomes();
  broken->set_job_id(first[3].job().id());
  broken->set_lease(first[3].lease());
  broken->set_kind(Outcome::DELIVERED);
  broken->add_also_job_ids(first[4].job().id());  // no lease: a broken deliverer
  stream.Write(request);
  // Four jobs settled, four credits back: three more jobs (all that are left) go out.
  std::vector<Delivery> more = stream.Read(3);
  ASSERT_EQ(more.size(), 3u);
  ASSERT_TRUE(WaitCounts([this](const JobCounts& c) {
    return c.ready == 0 && c.leased == 4 &&  // first[4] and the three
           Counter("hookrelay_dispatch_outcomes_total", "outcome", "delivered") == 4;
  })) << "delivered " << Counter("hookrelay_dispatch_outcomes_total", "outcome", "delivered");
  stream.Close();
}

// hookrelay_dispatch_latency_seconds: receipt → handed to the stream, on the injected clock, for
// first attempts of customer jobs only (test jobs are left out).
TEST_F(DispatcherTest, DispatchLatencyIsObservedFromReceiptForFirstAttempts) {
  Stream stream(*stub_, 10);
  const int64_t now_us = absl::ToUnixMicros(clock_.Now());
  Append(2, "hook", [&](hookrelay::v1::Job& job) { job.set_received_at_unix_us(now_us - 3000); });
  Append(1, "hook", [&](hookrelay::v1::Job& job) {
    job.set_received_at_unix_us(now_us - 3000);
    job.set_test(true);
  });
  ASSERT_EQ(stream.Read(3).size(), 3u);
  uint64_t count = 0;
  double sum = -1;
  for (const auto& family : registry_.Collect()) {
    if (family.name != "hookrelay_dispatch_latency_seconds") continue;
    for (const auto& metric : family.metric) {
      count = metric.histogram.sample_count;
      sum = metric.histogram.sample_sum;
    }
  }
  EXPECT_EQ(count, 2u);
  EXPECT_NEAR(sum, 2 * 0.003, 1e-9);  // the manual clock did not move
  stream.Close();
}

// An attempt still running as its lease nears its end keeps its job: the dispatcher extends the
// lease of a job in flight at a connected deliverer (on the store's clock, woken by its hold
// signal), the job is not handed out again past its first deadline, and its outcome settles it.
TEST_F(DispatcherTest, RunningAttemptsLeaseIsExtended) {
  Stream stream(*stub_, 10);
  Append(1, "hook");
  std::vector<Delivery> first = stream.Read(1);
  ASSERT_EQ(first.size(), 1u);
  // Within the last quarter of the lease: extended.
  ASSERT_TRUE(AdvanceAndWaitForPass(kLease * 0.8));
  ASSERT_TRUE(WaitCounts([this](const JobCounts&) {
    return Counter("hookrelay_dispatch_leases_extended_total", "", "") >= 1;
  }));
  // Past the first deadline: a new job goes out, the running one is not handed out again.
  ASSERT_TRUE(AdvanceAndWaitForPass(kLease * 0.5));
  Append(1, "hook");
  std::vector<Delivery> next = stream.Read(1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_NE(next[0].job().id(), first[0].job().id()) << "a running attempt's job was handed out again";
  stream.Settle(first[0], Outcome::DELIVERED, first[0].lease());
  stream.Settle(next[0], Outcome::DELIVERED, next[0].lease());
  ASSERT_TRUE(WaitCounts([this](const JobCounts& c) {
    return c.leased == 0 && c.ready == 0 &&
           Counter("hookrelay_dispatch_outcomes_total", "outcome", "delivered") == 2;
  }));
  EXPECT_EQ(Counter("hookrelay_dispatch_outcomes_total", "outcome", "stale"), 0);
  stream.Close();
}

// A lease that runs out on the clock (no waiting in real time) hands the job out again with a
// new lease; an outcome carrying the old lease is ignored and counted as stale.
TEST_F(DispatcherTest, ExpiredLeaseRedeliversAndStaleOutcomeIsIgnored) {
  Stream stream(*stub_, 10);
  Append(1, "hook");
  std::vector<Delivery> first = stream.Read(1);
  ASSERT_EQ(first.size(), 1u);
  const uint64_t old_lease = first[0].lease();

  ASSERT_TRUE(AdvanceAndWaitForPass(kLease + absl::Seconds(1)));
  std::vector<Delivery> again = stream.Read(1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].job().id(), first[0].job().id());
  EXPECT_NE(again[0].lease(), old_lease);

  stream.Settle(first[0], Outcome::DELIVERED, old_lease);
  ASSERT_TRUE(WaitCounts([this](const JobCounts&) {
    return Counter("hookrelay_dispatch_outcomes_total", "outcome", "stale") == 1;
  }));
  EXPECT_EQ(store_->Counts().leased, 1) << "a stale outcome must not settle the job";
  stream.Settle(again[0], Outcome::DELIVERED, again[0].lease());
  ASSERT_TRUE(WaitCounts([](const JobCounts& c) {
    return c.ready == 0 && c.leased == 0 && c.scheduled == 0 && c.dead == 0;
  }));
  stream.Close();
}

// A RETRY outcome schedules the job at its not_before in the clock's time; moving the clock
// there (and not before) hands it out again.
TEST_F(DispatcherTest, RetryIsDueOnTheClock) {
  Stream stream(*stub_, 10);
  Append(1, "hook");
  std::vector<Delivery> first = stream.Read(1);
  ASSERT_EQ(first.size(), 1u);
  SubscribeRequest request;
  Outcome* outcome = request.mutable_outcomes()->add_outcomes();
  outcome->set_job_id(first[0].job().id());
  outcome->set_lease(first[0].lease());
  outcome->set_kind(Outcome::RETRY);
  outcome->mutable_not_before()->set_seconds(
      absl::ToUnixSeconds(clock_.Now() + absl::Minutes(10)));
  outcome->mutable_attempt()->set_at_unix_ms(absl::ToUnixMillis(clock_.Now()));
  stream.Write(request);
  ASSERT_TRUE(WaitCounts([](const JobCounts& c) { return c.scheduled == 1 && c.leased == 0; }));

  ASSERT_TRUE(AdvanceAndWaitForPass(absl::Minutes(9)));
  EXPECT_EQ(store_->Counts().scheduled, 1) << "handed out before its time";
  ASSERT_TRUE(AdvanceAndWaitForPass(absl::Minutes(1)));
  std::vector<Delivery> again = stream.Read(1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].job().id(), first[0].job().id());
  EXPECT_EQ(again[0].job().attempts(), 1);
  EXPECT_EQ(Counter("hookrelay_dispatch_outcomes_total", "outcome", "retry"), 1);
  stream.Close();
}

// No poll and no Notify from the test: a retry falling due on the store's clock is sent because
// the store raises its ready signal when the clock reaches it.
TEST_F(DispatcherTest, RetryFallingDueIsSentOnTheStoresReadySignal) {
  Stream stream(*stub_, 10);
  Append(1, "hook");
  std::vector<Delivery> first = stream.Read(1);
  ASSERT_EQ(first.size(), 1u);
  SubscribeRequest request;
  Outcome* outcome = request.mutable_outcomes()->add_outcomes();
  outcome->set_job_id(first[0].job().id());
  outcome->set_lease(first[0].lease());
  outcome->set_kind(Outcome::RETRY);
  outcome->mutable_not_before()->set_seconds(absl::ToUnixSeconds(clock_.Now() + absl::Hours(1)));
  outcome->mutable_attempt()->set_at_unix_ms(absl::ToUnixMillis(clock_.Now()));
  stream.Write(request);
  ASSERT_TRUE(WaitCounts([](const JobCounts& c) { return c.scheduled == 1 && c.leased == 0; }));
  clock_.Advance(absl::Hours(1));
  std::vector<Delivery> again = stream.Read(1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].job().id(), first[0].job().id());
  EXPECT_EQ(again[0].job().attempts(), 1);
  stream.Close();
}

// A job whose destination is disabled is dead-lettered at dispatch with the reason, never sent.
TEST_F(DispatcherTest, DisabledDestinationIsDeadLetteredAtDispatch) {
  Stream stream(*stub_, 10);
  Append(1, "off");
  ASSERT_TRUE(WaitCounts([](const JobCounts& c) { return c.dead == 1; }));
  DeadFilter all;
  absl::StatusOr<std::vector<hookrelay::v1::Job>> dead = store_->ListDead(all);
  ASSERT_TRUE(dead.ok());
  ASSERT_EQ(dead->size(), 1u);
  EXPECT_EQ((*dead)[0].dead_reason(), "destination off disabled");
  EXPECT_EQ(Counter("hookrelay_dispatch_undeliverable_total", "", ""), 1);
  EXPECT_EQ(Counter("hookrelay_dispatch_jobs_sent_total", "", ""), 0);
  stream.Close();
}

// A new stream is told the configured destination ids (even without jobs), and told again after
// the configuration changes, so the deliverer can export their metrics at 0.
TEST_F(DispatcherTest, StreamsAreToldTheDestinationIds) {
  Stream stream(*stub_, 10);
  SubscribeResponse response;
  ASSERT_TRUE(stream.ReadResponse(&response));
  ASSERT_TRUE(response.has_destinations());
  EXPECT_EQ(response.deliveries_size(), 0);
  EXPECT_EQ(std::vector<std::string>(response.destinations().ids().begin(),
                                     response.destinations().ids().end()),
            (std::vector<std::string>{"hook", "off"}));
  EXPECT_TRUE(response.grouped_outcomes());

  auto config = common::ParseConfigYaml(absl::StrCat(
      kConfig,
      R"(  - {id: new, type: webhooks, sources: [web], enabled: true, urls: [{url: "https://h.example/c"}]})",
      "\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  routing_->Set(std::make_shared<const Routing>(*config));
  dispatcher_->Notify();
  ASSERT_TRUE(stream.ReadResponse(&response));
  ASSERT_TRUE(response.has_destinations());
  EXPECT_EQ(std::vector<std::string>(response.destinations().ids().begin(),
                                     response.destinations().ids().end()),
            (std::vector<std::string>{"hook", "off", "new"}));

  // Jobs that follow carry no announcement: nothing changed.
  Append(1, "hook");
  std::vector<Delivery> jobs = stream.Read(1);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].destination().id(), "hook");  // a copy with each job on such a stream
  stream.Close();
}

// A deliverer that keeps destinations (Hello.destinations_by_reference) gets them whole with
// each announcement, and deliveries that name theirs without a copy.
TEST_F(DispatcherTest, DestinationsGoOncePerConfigOnStreamsThatKeepThem) {
  Stream stream(*stub_, 10, /*by_reference=*/true);
  SubscribeResponse response;
  ASSERT_TRUE(stream.ReadResponse(&response));
  ASSERT_EQ(response.destination_configs_size(), 2);
  EXPECT_EQ(response.destination_configs(0).id(), "hook");
  EXPECT_EQ(response.destination_configs(0).urls(0).url(), "https://h.example/a");
  Append(2, "hook");
  std::vector<Delivery> jobs = stream.Read(2);
  ASSERT_EQ(jobs.size(), 2u);
  for (const Delivery& d : jobs) {
    EXPECT_FALSE(d.has_destination());
    EXPECT_EQ(d.job().destination_id(), "hook");
  }
  auto config = common::ParseConfigYaml(absl::StrCat(
      kConfig,
      R"(  - {id: new, type: webhooks, sources: [web], enabled: true, urls: [{url: "https://h.example/c"}]})",
      "\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  routing_->Set(std::make_shared<const Routing>(*config));
  dispatcher_->Notify();
  ASSERT_TRUE(stream.ReadResponse(&response));
  ASSERT_EQ(response.destination_configs_size(), 3);
  EXPECT_EQ(response.destination_configs(2).id(), "new");
  stream.Close();
}

}  // namespace
}  // namespace hookrelay::collector

namespace hookrelay::collector {
namespace {

Outcome Failure(const Delivery& d, Outcome::Kind kind, int status, absl::Time now) {
  Outcome outcome;
  outcome.set_job_id(d.job().id());
  outcome.set_lease(d.lease());
  outcome.set_kind(kind);
  if (kind == Outcome::RETRY) outcome.mutable_not_before()->set_seconds(absl::ToUnixSeconds(now));
  outcome.mutable_attempt()->set_at_unix_ms(absl::ToUnixMillis(now));
  auto* url = outcome.mutable_attempt()->add_urls();
  url->set_url("https://h.example/a");
  url->set_status(status);
  url->set_latency_ms(3);
  return outcome;
}

// After N consecutive failures the breaker opens: the destination's jobs stay queued in the
// store (not leased, not written back: no deferral) until the pause ends on the store's clock,
// then one probe goes; its success resumes deliveries, and no job spent an attempt while the
// breaker was open.
TEST_F(DispatcherTest, OpenBreakerHoldsJobsQueuedWithoutSpendingAttempts) {
  auto config = common::ParseConfigYaml(absl::StrCat(
      kConfig,
      R"(  - {id: cb, type: webhooks, sources: [web], enabled: true, urls: [{url: "https://h.example/c"}],
       options: {circuit_breaker: {failures: 1, pause_ms: 1000}}})",
      "\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  routing_->Set(std::make_shared<const Routing>(*config));
  Stream stream(*stub_, 10);
  Append(1, "cb");
  std::vector<Delivery> first = stream.Read(1);
  ASSERT_EQ(first.size(), 1u);
  const uint64_t failed_id = first[0].job().id();
  SubscribeRequest request;
  *request.mutable_outcomes()->add_outcomes() =
      Failure(first[0], Outcome::RETRY, 503, clock_.Now());
  stream.Write(request);
  // The failed job (due again at once) and three new ones: all held back, ready in the store.
  ASSERT_TRUE(WaitCounts([](const JobCounts& c) { return c.leased == 0 && c.ready == 1; }));
  EXPECT_EQ(dispatcher_->Stats("cb").circuit, "open");
  Append(3, "cb");
  ASSERT_TRUE(AdvanceAndWaitForPass(absl::ZeroDuration()));  // A pass after the appends.
  ASSERT_TRUE(AdvanceAndWaitForPass(absl::Milliseconds(999)));
  const JobCounts held = store_->Counts();
  EXPECT_EQ(held.ready, 4);
  EXPECT_EQ(held.leased, 0) << "sent while the breaker was open";
  EXPECT_EQ(Counter("hookrelay_dispatch_deferred_total", "reason", "circuit_open"), 0)
      << "held jobs were leased and written back";

  // The pause is over: exactly one probe.
  ASSERT_TRUE(AdvanceAndWaitForPass(absl::Milliseconds(1)));
  std::vector<Delivery> probe = stream.Read(1);
  ASSERT_EQ(probe.size(), 1u);
  EXPECT_EQ(dispatcher_->Stats("cb").circuit, "half_open");
  EXPECT_EQ(probe[0].job().attempts(), probe[0].job().id() == failed_id ? 1 : 0);
  EXPECT_EQ(probe[0].job().deferrals(), 0);
  ASSERT_TRUE(AdvanceAndWaitForPass(absl::Milliseconds(100)));
  EXPECT_EQ(store_->Counts().leased, 1) << "only the probe may be out while half-open";
  stream.Settle(probe[0], Outcome::DELIVERED, probe[0].lease());

  // Closed: the rest go out at once (they were ready all along), none having spent an attempt
  // while held back.
  std::vector<Delivery> rest = stream.Read(3);
  EXPECT_EQ(dispatcher_->Stats("cb").circuit, "closed");
  ASSERT_EQ(rest.size(), 3u);
  for (const Delivery& d : rest) {
    EXPECT_EQ(d.job().attempts(), d.job().id() == failed_id ? 1 : 0) << d.job().id();
    EXPECT_EQ(d.job().deferrals(), 0);
    EXPECT_EQ(d.job().first_attempt_unix_ms() != 0, d.job().id() == failed_id);
  }
  stream.Close();
}

// A slow destination's backlog does not hide the jobs queued behind it: alone it keeps a quarter
// of the credits free, and once both have jobs waiting each gets its fair share; the other
// destination's jobs go out, and nothing of the slow one's backlog is leased only to be put
// back.
TEST_F(DispatcherTest, SlowBacklogLeavesRoomForTheJobsBehindIt) {
  auto config = common::ParseConfigYaml(absl::StrCat(
      kConfig,
      R"(  - {id: slow, type: webhooks, sources: [web], enabled: true, urls: [{url: "https://h.example/s"}]})",
      "\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  routing_->Set(std::make_shared<const Routing>(*config));
  Stream stream(*stub_, 8);
  // The slow receiver's latency is learned from its first outcomes.
  Append(3, "slow");
  std::vector<Delivery> first = stream.Read(3);
  ASSERT_EQ(first.size(), 3u);
  SubscribeRequest request;
  for (const Delivery& d : first) {
    Outcome* o = request.mutable_outcomes()->add_outcomes();
    o->set_job_id(d.job().id());
    o->set_lease(d.lease());
    o->set_kind(Outcome::DELIVERED);
    auto* u = o->mutable_attempt()->add_urls();
    u->set_status(200);
    u->set_latency_ms(2000);
  }
  stream.Write(request);
  ASSERT_TRUE(WaitCounts([](const JobCounts& c) { return c.leased == 0 && c.ready == 0; }));

  Append(20, "slow");
  Append(4, "hook");
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(AdvanceAndWaitForPass(absl::ZeroDuration()));
  std::vector<Delivery> got = stream.Read(8);
  ASSERT_EQ(got.size(), 8u);
  int hook = 0;
  for (const Delivery& d : got) hook += d.job().destination_id() == "hook" ? 1 : 0;
  // 6 slow (3/4 of 8, alone) when a pass came between the two appends, else 4 (half of 8).
  EXPECT_GE(hook, 2);
  EXPECT_EQ(Counter("hookrelay_dispatch_deferred_total", "reason", "concurrency"), 0);
  stream.Close();
}

// A failed attempt whose every URL answered 410 Gone disables the destination once (through
// the configured path), counted by reason; later jobs of it are not sent.
TEST_F(DispatcherTest, GoneDisablesTheDestinationOnce) {
  Stream stream(*stub_, 10);
  Append(2, "hook");
  std::vector<Delivery> jobs = stream.Read(2);
  ASSERT_EQ(jobs.size(), 2u);
  SubscribeRequest request;
  *request.mutable_outcomes()->add_outcomes() = Failure(jobs[0], Outcome::DEAD, 410, clock_.Now());
  *request.mutable_outcomes()->add_outcomes() = Failure(jobs[1], Outcome::DEAD, 410, clock_.Now());
  stream.Write(request);
  ASSERT_TRUE(WaitCounts([](const JobCounts& c) { return c.dead == 2; }));
  {
    absl::MutexLock lock(&gone_mu_);
    ASSERT_EQ(gone_.size(), 1u);
    EXPECT_EQ(gone_[0].first, "hook");
    EXPECT_EQ(gone_[0].second, "receiver answered 410 Gone (HTTP 410 from h.example)");
  }
  EXPECT_EQ(Counter("hookrelay_destination_disabled_total", "reason", "gone"), 1);
  Append(1, "hook");  // dead-lettered at dispatch: the destination is disabled now
  ASSERT_TRUE(WaitCounts([](const JobCounts& c) { return c.dead == 3; }));
  EXPECT_EQ(Counter("hookrelay_dispatch_jobs_sent_total", "", ""), 2);
  stream.Close();
}

}  // namespace
}  // namespace hookrelay::collector
