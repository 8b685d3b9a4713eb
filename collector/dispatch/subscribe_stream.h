// The gRPC side of Collector.Subscribe: one reactor per deliverer stream (gRPC's callback API:
// at most one read and one write in flight, the next write started by the dispatcher, Finish
// exactly once, OnDone frees), turning requests into the Dispatcher's calls and its
// DeliveryStream calls into writes. The protocol is described in dispatcher.h.
#ifndef HOOKRELAY_COLLECTOR_DISPATCH_SUBSCRIBE_STREAM_H_
#define HOOKRELAY_COLLECTOR_DISPATCH_SUBSCRIBE_STREAM_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "collector/dispatch/dispatcher.h"
#include "hookrelay/v1/collector.pb.h"

namespace hookrelay::collector {

// The reactor for a new Subscribe call (gRPC owns it; it deletes itself when done). With a
// `refuse` status other than OK the call ends at once with it (e.g. UNAUTHENTICATED); once the
// dispatcher shuts down, with UNAVAILABLE. `dispatcher` must outlive every stream (its Shutdown
// waits for them).
grpc::ServerBidiReactor<hookrelay::v1::SubscribeRequest, hookrelay::v1::SubscribeResponse>*
NewSubscribeStream(Dispatcher& dispatcher, grpc::CallbackServerContext* context,
                   absl::Status refuse = absl::OkStatus());

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_DISPATCH_SUBSCRIBE_STREAM_H_
