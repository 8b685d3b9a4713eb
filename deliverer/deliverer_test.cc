#include "deliverer/deliverer.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/proto_time.h"
#include "deliverer/delivery_metrics.h"
#include "deliverer/http_sender.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/collector.grpc.pb.h"
#include "prometheus/registry.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::deliverer {
namespace {

using hookrelay::v1::Outcome;
using hookrelay::v1::SubscribeRequest;
using hookrelay::v1::SubscribeResponse;
using receiver::ReceivedRequest;
using receiver::Response;
using receiver::WebhookReceiver;

constexpr absl::Duration kWait = absl::Seconds(20);

// A collector that hands out the jobs a test gives it and records what the deliverer sends back:
// the Hello, credits, and every outcome. One stream at a time.
class FakeCollector final : public hookrelay::v1::Collector::Service {
 public:
  grpc::Status Subscribe(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<SubscribeResponse, SubscribeRequest>* stream) override {
    {
      absl::MutexLock lock(&mu_);
      stream_ = stream;
    }
    SubscribeRequest request;
    while (stream->Read(&request)) {
      absl::MutexLock lock(&mu_);
      if (request.has_hello()) hello_credits_ = request.hello().credits();
      if (request.has_credit() && request.credit().drain()) drained_ = true;
      for (const Outcome& o : request.outcomes().outcomes()) outcomes_.push_back(o);
      if (request.has_outcomes()) ++outcome_messages_;
    }
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
    return grpc::Status::OK;
  }

  // Sends `deliveries` as one response once the deliverer has said hello.
  bool Send(const std::vector<hookrelay::v1::Delivery>& deliveries) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stream_ != nullptr && hello_credits_ > 0;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), kWait)) return false;
    SubscribeResponse response;
    for (const auto& d : deliveries) *response.add_deliveries() = d;
    return stream_->Write(response);
  }

  // Waits until `n` outcomes arrived and returns them.
  std::vector<Outcome> WaitOutcomes(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return outcomes_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), kWait);
    return outcomes_;
  }

  uint32_t hello_credits() {
    absl::MutexLock lock(&mu_);
    return hello_credits_;
  }
  int outcome_messages() {
    absl::MutexLock lock(&mu_);
    return outcome_messages_;
  }
  bool WaitDrained() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&drained_), kWait);
  }

 private:
  absl::Mutex mu_;
  grpc::ServerReaderWriter<SubscribeResponse, SubscribeRequest>* stream_ ABSL_GUARDED_BY(mu_) =
      nullptr;
  uint32_t hello_credits_ ABSL_GUARDED_BY(mu_) = 0;
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  int outcome_messages_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Outcome> outcomes_ ABSL_GUARDED_BY(mu_);
};

// The deliverer core on a manual clock, against a fake collector over real gRPC and a real
// receiver over real HTTP on 127.0.0.1.
class DelivererTest : public ::testing::Test {
 protected:
  void Start(receiver::Handler handler, uint32_t credits = 16) {
    auto r = WebhookReceiver::Start(WebhookReceiver::Options{}, std::move(handler));
    ASSERT_TRUE(r.ok()) << r.status();
    receiver_ = *std::move(r);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&collector_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    HttpSender::Options sender_options;
    sender_options.allow_private_networks = true;
    auto sender = HttpSender::Create(sender_options);
    ASSERT_TRUE(sender.ok()) << sender.status();
    sender_ = *std::move(sender);
    metrics_ = std::make_unique<DeliveryMetrics>(registry_);
    Deliverer::Options options;
    options.collectors = {absl::StrCat("127.0.0.1:", port_)};
    options.credits = credits;
    options.drain_timeout = absl::Seconds(5);
    deliverer_ = std::make_unique<Deliverer>(options, *sender_, clock_, metrics_.get());
    ASSERT_TRUE(deliverer_->Start().ok());
  }

  void TearDown() override {
    if (deliverer_) deliverer_->Shutdown();
    sender_.reset();  // Before the deliverer: pending callbacks call into it.
    deliverer_.reset();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  hookrelay::v1::Delivery Job(uint64_t id) {
    hookrelay::v1::Delivery d;
    d.set_lease(1000 + id);
    hookrelay::v1::Job& job = *d.mutable_job();
    job.set_id(id);
    job.set_source_id("web");
    job.set_destination_id("hook");
    job.set_type(hookrelay::v1::TRACK);
    job.set_message_id(absl::StrCat("m-", id));
    job.set_received_at_unix_ms(absl::ToUnixMillis(clock_.Now()));
    job.set_event_json(absl::StrCat(R"({"type":"track","messageId":"m-)", id,
                                    R"(","userId":"u","event":"E","context":{},)",
                                    R"("timestamp":"2023-11-14T22:13:20.000Z"})"));
    hookrelay::v1::Destination& dest = *d.mutable_destination();
    dest.set_id("hook");
    dest.set_enabled(true);
    dest.add_urls()->set_url(receiver_->Url());
    return d;
  }

  common::ManualClock clock_;
  prometheus::Registry registry_;
  FakeCollector collector_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WebhookReceiver> receiver_;
  std::unique_ptr<HttpSender> sender_;
  std::unique_ptr<DeliveryMetrics> metrics_;
  std::unique_ptr<Deliverer> deliverer_;
  int port_ = 0;
};

// The Hello grants the configured credits; delivered jobs come back as DELIVERED outcomes with
// their own job id and lease, several per message.
TEST_F(DelivererTest, DeliversAndReportsOutcomesInBatches) {
  Start(nullptr, 16);
  std::vector<hookrelay::v1::Delivery> jobs;
  for (uint64_t id = 1; id <= 8; ++id) jobs.push_back(Job(id));
  ASSERT_TRUE(collector_.Send(jobs));
  const std::vector<Outcome> outcomes = collector_.WaitOutcomes(8);
  ASSERT_EQ(outcomes.size(), 8u);
  EXPECT_EQ(collector_.hello_credits(), 16u);
  for (const Outcome& o : outcomes) {
    EXPECT_EQ(o.kind(), Outcome::DELIVERED);
    EXPECT_EQ(o.lease(), 1000 + o.job_id());
  }
  EXPECT_LE(collector_.outcome_messages(), 8);
  EXPECT_TRUE(receiver_->WaitForRequests(8, kWait));
}

// A 503 is a RETRY whose not_before is computed on the injected clock (the manual clock stands
// in 2023, far from real time): the first retry within the default 1 s initial backoff.
TEST_F(DelivererTest, RetryTimeComesFromTheClock) {
  Start([](const ReceivedRequest&) {
    Response r;
    r.status = 503;
    return r;
  });
  const absl::Time now = clock_.Now();
  ASSERT_TRUE(collector_.Send({Job(1)}));
  const std::vector<Outcome> outcomes = collector_.WaitOutcomes(1);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].kind(), Outcome::RETRY);
  const absl::Time not_before = *common::FromProtoTime(outcomes[0].not_before());
  EXPECT_GT(not_before, now);
  EXPECT_LE(not_before, now + absl::Seconds(1));
  EXPECT_EQ(outcomes[0].attempt().urls(0).status(), 503);
  EXPECT_EQ(outcomes[0].attempt().at_unix_ms(), absl::ToUnixMillis(now));
}

// Shutdown tells the collector to stop sending (Credit.drain) and still reports jobs in flight.
TEST_F(DelivererTest, ShutdownDrainsAndReportsJobsInFlight) {
  Start([](const ReceivedRequest&) {
    Response r;
    r.delay = absl::Milliseconds(300);
    return r;
  });
  ASSERT_TRUE(collector_.Send({Job(1), Job(2)}));
  ASSERT_TRUE(receiver_->WaitForRequests(1, kWait));
  deliverer_->Shutdown();
  EXPECT_TRUE(collector_.WaitDrained());
  const std::vector<Outcome> outcomes = collector_.WaitOutcomes(2);
  ASSERT_EQ(outcomes.size(), 2u);
  for (const Outcome& o : outcomes) EXPECT_EQ(o.kind(), Outcome::DELIVERED);
}

}  // namespace
}  // namespace hookrelay::deliverer
