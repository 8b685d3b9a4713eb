// gRPC adapter for hookrelay.v1.Collector: converts messages and statuses, delegates to the
// Ingestor (Ingest) and the Dispatcher (Subscribe). No business logic here.
#ifndef HOOKRELAY_COLLECTOR_INGEST_COLLECTOR_SERVICE_H_
#define HOOKRELAY_COLLECTOR_INGEST_COLLECTOR_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "collector/api/admin_auth.h"
#include "collector/api/admin_errors.h"
#include "collector/dispatch/dispatcher.h"
#include "collector/ingest/ingest_metrics.h"
#include "collector/ingest/ingestor.h"
#include "common/trace_context.h"
#include "hookrelay/v1/collector.grpc.pb.h"

namespace hookrelay::collector {

// Ingest takes the request as raw bytes and parses it itself: gRPC's callback API answers a
// request that does not parse with UNIMPLEMENTED, while a client deserves INVALID_ARGUMENT.
// INVALID_ARGUMENT and RESOURCE_EXHAUSTED carry a google.rpc.BadRequest (field violations
// "events[i].field") in the status details as well as in the message text.
class CollectorService final
    : public hookrelay::v1::Collector::WithRawCallbackMethod_Ingest<
          hookrelay::v1::Collector::CallbackService> {
 public:
  // References must outlive the service; `metrics` may be null. `subscribe_auth` (may be null:
  // open) decides who may Subscribe: the jobs carry destination secrets, so the admin surface's
  // rule applies (AdminAuth).
  CollectorService(Ingestor& ingestor, Dispatcher& dispatcher, IngestMetrics* metrics,
                   const AdminAuth* subscribe_auth = nullptr)
      : ingestor_(ingestor), dispatcher_(dispatcher), metrics_(metrics),
        subscribe_auth_(subscribe_auth) {}

  // A serialized hookrelay.v1.IngestRequest in, a serialized IngestResponse out.
  grpc::ServerUnaryReactor* Ingest(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;

  grpc::ServerBidiReactor<hookrelay::v1::SubscribeRequest, hookrelay::v1::SubscribeResponse>*
  Subscribe(grpc::CallbackServerContext* context) override;

 private:
  Ingestor& ingestor_;
  Dispatcher& dispatcher_;
  IngestMetrics* const metrics_;
  const AdminAuth* const subscribe_auth_;
};

// The write key of a call: `x-write-key`, or the user of `authorization: Basic base64(key:)`.
std::string WriteKeyFromMetadata(const grpc::CallbackServerContext& context);

// The call's W3C trace context: `traceparent` (exactly one, valid; else nothing is kept) and
// `tracestate` metadata.
common::TraceContext TraceContextFromMetadata(const grpc::CallbackServerContext& context);

// A gRPC status whose details (grpc-status-details-bin) are a google.rpc.Status with the same
// code and message and one google.rpc.BadRequest listing `violations`.
grpc::Status BadRequestStatus(grpc::StatusCode code, const std::string& message,
                              const std::vector<FieldViolation>& violations);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_INGEST_COLLECTOR_SERVICE_H_
