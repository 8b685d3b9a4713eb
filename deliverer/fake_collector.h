// Test doubles for the collector side of Collector.Subscribe, over real gRPC on 127.0.0.1.
//
// FakeCollector hands out the jobs a test gives it and records what the deliverer sends back:
// the Hello, credits, and every outcome. One stream at a time. Its Wait* methods wait on
// conditions (at most kFakeCollectorWait) and return false on timeout. Thread-safe.
//
// ServedCollector is a FakeCollector serving on 127.0.0.1 with a port the OS chose.
#ifndef HOOKRELAY_DELIVERER_FAKE_COLLECTOR_H_
#define HOOKRELAY_DELIVERER_FAKE_COLLECTOR_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "hookrelay/v1/collector.grpc.pb.h"

namespace hookrelay::deliverer {

inline constexpr absl::Duration kFakeCollectorWait = absl::Seconds(20);

class FakeCollector final : public hookrelay::v1::Collector::Service {
 public:
  grpc::Status Subscribe(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<hookrelay::v1::SubscribeResponse, hookrelay::v1::SubscribeRequest>*
          stream) override;

  // Waits until a deliverer has said hello on an open stream.
  bool WaitHello();
  // Waits until a stream has ended (the deliverer closed it).
  bool WaitStreamEnded();
  bool stream_open();

  // Sends `deliveries` as one response once the deliverer has said hello, with `destinations`
  // as its destination_configs (for deliveries that name their destination).
  bool Send(const std::vector<hookrelay::v1::Delivery>& deliveries,
            const std::vector<hookrelay::v1::Destination>& destinations = {});
  // Whether the Hello said destinations_by_reference.
  bool hello_by_reference();

  // Responses say the collector settles grouped outcomes (SubscribeResponse.grouped_outcomes).
  void set_grouped_outcomes(bool grouped);
  // Waits until outcomes for `n` jobs arrived and returns them, one per job: a grouped outcome
  // as one copy per job it settles (the attempt in each, also_job_ids empty).
  std::vector<hookrelay::v1::Outcome> WaitOutcomes(size_t n);
  // The outcomes as the deliverer sent them, grouped ones as they came.
  std::vector<hookrelay::v1::Outcome> sent_outcomes();

  uint32_t hello_credits();
  int outcome_messages();
  bool WaitDrained();

 private:
  absl::Mutex mu_;
  grpc::ServerReaderWriter<hookrelay::v1::SubscribeResponse, hookrelay::v1::SubscribeRequest>*
      stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint32_t hello_credits_ ABSL_GUARDED_BY(mu_) = 0;
  bool hello_by_reference_ ABSL_GUARDED_BY(mu_) = false;
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  int streams_ended_ ABSL_GUARDED_BY(mu_) = 0;
  int outcome_messages_ ABSL_GUARDED_BY(mu_) = 0;
  bool grouped_outcomes_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<hookrelay::v1::Outcome> outcomes_ ABSL_GUARDED_BY(mu_);  // one per job
  std::vector<hookrelay::v1::Outcome> sent_outcomes_ ABSL_GUARDED_BY(mu_);
};

// A collector serving on 127.0.0.1 with its own port.
struct ServedCollector {
  ServedCollector();
  ~ServedCollector();
  std::string endpoint() const;
  FakeCollector service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_FAKE_COLLECTOR_H_
