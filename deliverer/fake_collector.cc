#include "deliverer/fake_collector.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace hookrelay::deliverer {

using hookrelay::v1::Outcome;
using hookrelay::v1::SubscribeRequest;
using hookrelay::v1::SubscribeResponse;

grpc::Status FakeCollector::Subscribe(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<SubscribeResponse, SubscribeRequest>* stream) {
  {
    absl::MutexLock lock(&mu_);
    stream_ = stream;
  }
  SubscribeRequest request;
  while (stream->Read(&request)) {
    absl::MutexLock lock(&mu_);
    if (request.has_hello()) {
      hello_credits_ = request.hello().credits();
      hello_by_reference_ = request.hello().destinations_by_reference();
    }
    if (request.has_credit() && request.credit().drain()) drained_ = true;
    for (const Outcome& o : request.outcomes().outcomes()) {
      sent_outcomes_.push_back(o);
      Outcome own = o;
      own.clear_also_job_ids();
      own.clear_also_leases();
      outcomes_.push_back(own);
      for (int i = 0; i < o.also_job_ids_size(); ++i) {
        own.set_job_id(o.also_job_ids(i));
        own.set_lease(i < o.also_leases_size() ? o.also_leases(i) : 0);
        outcomes_.push_back(own);
      }
    }
    if (request.has_outcomes()) ++outcome_messages_;
  }
  absl::MutexLock lock(&mu_);
  stream_ = nullptr;
  ++streams_ended_;
  return grpc::Status::OK;
}

bool FakeCollector::WaitHello() {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stream_ != nullptr && hello_credits_ > 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&ready), kFakeCollectorWait);
}

bool FakeCollector::WaitStreamEnded() {
  absl::MutexLock lock(&mu_);
  auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return streams_ended_ > 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&ended), kFakeCollectorWait);
}

bool FakeCollector::stream_open() {
  absl::MutexLock lock(&mu_);
  return stream_ != nullptr;
}

bool FakeCollector::Send(const std::vector<hookrelay::v1::Delivery>& deliveries,
                         const std::vector<hookrelay::v1::Destination>& destinations) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stream_ != nullptr && hello_credits_ > 0;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), kFakeCollectorWait)) return false;
  SubscribeResponse response;
  response.set_grouped_outcomes(grouped_outcomes_);
  for (const auto& d : destinations) *response.add_destination_configs() = d;
  for (const auto& d : deliveries) *response.add_deliveries() = d;
  return stream_->Write(response);
}

bool FakeCollector::hello_by_reference() {
  absl::MutexLock lock(&mu_);
  return hello_by_reference_;
}

std::vector<Outcome> FakeCollector::WaitOutcomes(size_t n) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return outcomes_.size() >= n; };
  mu_.AwaitWithTimeout(absl::Condition(&enough), kFakeCollectorWait);
  return outcomes_;
}

void FakeCollector::set_grouped_outcomes(bool grouped) {
  absl::MutexLock lock(&mu_);
  grouped_outcomes_ = grouped;
}

std::vector<Outcome> FakeCollector::sent_outcomes() {
  absl::MutexLock lock(&mu_);
  return sent_outcomes_;
}

uint32_t FakeCollector::hello_credits() {
  absl::MutexLock lock(&mu_);
  return hello_credits_;
}

int FakeCollector::outcome_messages() {
  absl::MutexLock lock(&mu_);
  return outcome_messages_;
}

bool FakeCollector::WaitDrained() {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&drained_), kFakeCollectorWait);
}

ServedCollector::ServedCollector() {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  server = builder.BuildAndStart();
}

ServedCollector::~ServedCollector() {
  if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

std::string ServedCollector::endpoint() const { return absl::StrCat("127.0.0.1:", port); }

}  // namespace hookrelay::deliverer
