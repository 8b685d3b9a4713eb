#include "tools/bench/grpc_load.h"

#include <grpcpp/alarm.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace hookrelay::bench {
namespace {

constexpr char kMethod[] = "/hookrelay.v1.Collector/Ingest";
constexpr auto kCallDeadline = std::chrono::seconds(30);

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    default: return "?";
  }
}

// Reads IngestResponse.accepted (field 1) and counts IngestResponse.rejected (field 2) without
// materialising the message_ids. False when the bytes are not a valid message.
bool ParseIngestResponse(const grpc::ByteBuffer& buffer, uint64_t* accepted, uint64_t* rejected) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  std::string joined;
  const uint8_t* data = nullptr;
  size_t size = 0;
  if (slices.size() == 1) {
    data = slices[0].begin();
    size = slices[0].size();
  } else {
    for (const auto& s : slices) joined.append(reinterpret_cast<const char*>(s.begin()), s.size());
    data = reinterpret_cast<const uint8_t*>(joined.data());
    size = joined.size();
  }
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(size));
  *accepted = 0;
  *rejected = 0;
  while (const uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    if (field == 1 && WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_VARINT) {
      uint64_t v = 0;
      if (!in.ReadVarint64(&v)) return false;
      *accepted = v;
      continue;
    }
    if (field == 2) ++*rejected;
    if (!WireFormatLite::SkipField(&in, tag)) return false;
  }
  return in.ConsumedEntireMessage();
}

std::chrono::system_clock::time_point ToSystem(Clock::time_point t) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(t - Clock::now());
}

// One in-flight slot: waits for its next scheduled time (an Alarm), sends, records, repeats.
struct Call {
  grpc::GenericStub* stub = nullptr;
  std::string body;  // a stamped copy of the template
  std::optional<grpc::ClientContext> context;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  grpc::ByteBuffer response;
  grpc::Status status;
  grpc::Alarm alarm;
  Clock::time_point slot;
  Clock::time_point sent;
  bool in_flight = false;
  bool waiting = false;
};

enum Tag : uintptr_t { kAlarmFired = 0, kFinished = 1 };

void* MakeTag(Call* call, Tag tag) { return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(call) | tag); }

class Worker {
 public:
  Worker(const LoadOptions& options, const RunPlan& plan, Schedule schedule)
      : options_(options), plan_(plan), schedule_(schedule) {}

  void AddCall(grpc::GenericStub* stub) {
    auto call = std::make_unique<Call>();
    call->stub = stub;
    call->body = plan_.batch->bytes();
    calls_.push_back(std::move(call));
  }

  void Run() {
    active_ = static_cast<int>(calls_.size());
    for (auto& call : calls_) Next(call.get());
    const auto drain_deadline = ToSystem(plan_.end + plan_.drain);
    bool cancelled = false;
    while (active_ > 0) {
      void* tag = nullptr;
      bool ok = false;
      const auto deadline = cancelled ? std::chrono::system_clock::now() + std::chrono::seconds(5)
                                      : drain_deadline;
      const auto r = cq_.AsyncNext(&tag, &ok, deadline);
      if (r == grpc::CompletionQueue::SHUTDOWN) break;
      if (r == grpc::CompletionQueue::TIMEOUT) {
        if (cancelled) break;  // calls refuse to finish even when cancelled; give up on them
        for (auto& call : calls_) {
          if (call->in_flight) call->context->TryCancel();
          if (call->waiting) call->alarm.Cancel();
        }
        cancelled = true;
        continue;
      }
      const auto bits = reinterpret_cast<uintptr_t>(tag);
      Call* call = reinterpret_cast<Call*>(bits & ~uintptr_t{1});
      if ((bits & 1) == kFinished) {
        OnFinished(call);
      } else {
        call->waiting = false;
        if (ok) {
          Send(call);
        } else {
          --active_;  // alarm cancelled at the end
        }
      }
    }
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  const LoadStats& stats() const { return stats_; }

 private:
  void Next(Call* call) {
    const Clock::time_point now = Clock::now();
    const std::optional<Clock::time_point> slot = schedule_.Next(now);
    if (!slot) {
      --active_;
      return;
    }
    call->slot = *slot;
    if (*slot > now) {
      call->waiting = true;
      call->alarm.Set(&cq_, ToSystem(*slot), MakeTag(call, kAlarmFired));
      return;
    }
    Send(call);
  }

  void Send(Call* call) {
    const uint64_t seq = plan_.next_request_seq->fetch_add(1, std::memory_order_relaxed);
    plan_.batch->Stamp(seq, call->body.data());
    grpc::Slice slice(call->body.data(), call->body.size());
    grpc::ByteBuffer request(&slice, 1);
    call->context.emplace();
    call->context->AddMetadata("x-write-key", options_.write_key);
    call->context->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    call->response.Clear();
    call->sent = Clock::now();
    if (schedule_.open_loop() && call->sent - call->slot > std::chrono::milliseconds(1) &&
        plan_.InWindow(call->sent)) {
      ++stats_.late_sends;
    }
    call->reader = call->stub->PrepareUnaryCall(&*call->context, kMethod, request, &cq_);
    call->in_flight = true;
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, MakeTag(call, kFinished));
  }

  void OnFinished(Call* call) {
    call->in_flight = false;
    const Clock::time_point now = Clock::now();
    if (plan_.InWindow(now)) {
      ++stats_.requests;
      uint64_t accepted = 0;
      uint64_t rejected = 0;
      if (!call->status.ok()) {
        ++stats_.failures[absl::StrCat("grpc ", CodeName(call->status.error_code()))];
      } else if (!ParseIngestResponse(call->response, &accepted, &rejected)) {
        ++stats_.failures["grpc unparsable response"];
      } else {
        ++stats_.ok_requests;
        stats_.durable_events += accepted;
        stats_.rejected_events += rejected;
        stats_.RecordAck(schedule_.open_loop() ? call->slot : call->sent, now, plan_.keep_samples);
      }
    }
    call->reader.reset();
    Next(call);
  }

  const LoadOptions& options_;
  const RunPlan& plan_;
  Schedule schedule_;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Call>> calls_;
  int active_ = 0;
  LoadStats stats_;
};

}  // namespace

absl::StatusOr<LoadStats> RunGrpcLoad(const LoadOptions& options, const RunPlan& plan) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int i = 0; i < std::max(1, options.grpc_channels); ++i) {
    grpc::ChannelArguments args;
    // Each channel its own TCP connection, instead of sharing one subchannel.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("hookrelay.bench.channel", i);
    auto channel = grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", options.target));
    }
    stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
    channels.push_back(std::move(channel));
  }

  const int threads = LoadThreads(options);
  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < threads; ++t) {
    workers.push_back(std::make_unique<Worker>(options, plan, ThreadSchedule(options, plan, t)));
  }
  for (int i = 0; i < options.connections; ++i) {
    workers[i % threads]->AddCall(stubs[i % stubs.size()].get());
  }
  std::vector<std::thread> running;
  for (auto& w : workers) running.emplace_back([&w] { w->Run(); });
  for (auto& t : running) t.join();
  LoadStats total;
  for (auto& w : workers) total.Merge(w->stats());
  return total;
}

}  // namespace hookrelay::bench
