// gRPC adapter for hookrelay.v1.Collector: converts messages and statuses, delegates to the
// Ingestor (Ingest) and the Dispatcher (Subscribe). No business logic here.
#ifndef HOOKRELAY_COLLECTOR_COLLECTOR_SERVICE_H_
#define HOOKRELAY_COLLECTOR_COLLECTOR_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "collector/dispatcher.h"
#include "collector/ingest_metrics.h"
#include "collector/ingestor.h"
#include "hookrelay/v1/collector.grpc.pb.h"

namespace hookrelay::collector {

class CollectorService final : public hookrelay::v1::Collector::CallbackService {
 public:
  // References must outlive the service; `metrics` may be null.
  CollectorService(Ingestor& ingestor, Dispatcher& dispatcher, IngestMetrics* metrics)
      : ingestor_(ingestor), dispatcher_(dispatcher), metrics_(metrics) {}

  grpc::ServerUnaryReactor* Ingest(grpc::CallbackServerContext* context,
                                   const hookrelay::v1::IngestRequest* request,
                                   hookrelay::v1::IngestResponse* response) override;

  grpc::ServerBidiReactor<hookrelay::v1::SubscribeRequest, hookrelay::v1::SubscribeResponse>*
  Subscribe(grpc::CallbackServerContext* context) override {
    return dispatcher_.NewStream(context);
  }

 private:
  Ingestor& ingestor_;
  Dispatcher& dispatcher_;
  IngestMetrics* const metrics_;
};

// The write key of a call: `x-write-key`, or the user of `authorization: Basic base64(key:)`.
std::string WriteKeyFromMetadata(const grpc::CallbackServerContext& context);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_COLLECTOR_SERVICE_H_
