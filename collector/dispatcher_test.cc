#include "collector/dispatcher.h"

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collector/rocksdb_job_store.h"
#include "collector/routing.h"
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
    return dispatcher_.NewStream(context);
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
    auto store = RocksDbJobStore::Open(store_options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto config = common::ParseConfigYaml(kConfig);
    ASSERT_TRUE(config.ok()) << config.status();
    routing_ = std::make_unique<RoutingHolder>(std::make_shared<const Routing>(*config));
    Dispatcher::Options options;
    options.lease_duration = kLease;
    options.max_batch = 4;
    options.drain_timeout = absl::Milliseconds(200);
    dispatcher_ = std::make_unique<Dispatcher>(options, *store_, *routing_, clock_, &registry_);
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
    if (dispatcher_) dispatcher_->Shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  // Appends `n` jobs for `destination` and waits until they are durable.
  void Append(int n, const std::string& destination) {
    std::vector<AppendItem> items(n);
    for (int i = 0; i < n; ++i) {
      items[i].dedup_key = absl::StrCat(destination, "-", next_id_++);
      hookrelay::v1::Job& job = items[i].jobs.emplace_back();
      job.set_source_id("web");
      job.set_destination_id(destination);
      job.set_message_id(items[i].dedup_key);
      job.set_event_json(R"({"type":"track"})");
    }
    absl::Notification done;
    store_->Append(std::move(items), [&done](absl::StatusOr<AppendResult> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      done.Notify();
    });
    done.WaitForNotification();
    dispatcher_->Notify();
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
  Stream(hookrelay::v1::Collector::Stub& stub, uint32_t credits) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    rw_ = stub.Subscribe(&context_);
    SubscribeRequest hello;
    hello.mutable_hello()->set_deliverer_id("test");
    hello.mutable_hello()->set_credits(credits);
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
  stream.Close();
}

}  // namespace
}  // namespace hookrelay::collector
