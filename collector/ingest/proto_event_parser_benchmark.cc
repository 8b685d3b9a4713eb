// The gRPC front end's reading of a request of 100 track events with an SDK-like context (app,
// device, os, library, screen, ...) and five properties, per event: protobuf's reading
// (IngestRequest: Struct maps, then JSON) against the one-pass reading (IngestRequestWire:
// Structs written out from their bytes). Both parse on an arena, as the service does.
//
//   bazel run -c opt //collector/ingest:proto_event_parser_benchmark
#include <benchmark/benchmark.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "collector/ingest/proto_event_parser.h"
#include "google/protobuf/arena.h"
#include "hookrelay/internal/ingest_wire.pb.h"
#include "hookrelay/v1/collector.pb.h"

namespace hookrelay::collector {
namespace {

constexpr int kEvents = 100;

void Set(google::protobuf::Struct& s, const std::string& key, const std::string& value) {
  (*s.mutable_fields())[key].set_string_value(value);
}

std::string Request() {
  hookrelay::v1::IngestRequest request;
  for (int i = 0; i < kEvents; ++i) {
    hookrelay::v1::Event& e = *request.add_events();
    e.set_type(hookrelay::v1::TRACK);
    e.set_message_id(absl::StrCat("m-", i));
    e.set_user_id(absl::StrCat("user-", i));
    e.set_event("Order Completed");
    e.mutable_timestamp()->set_seconds(1700000000 + i);
    google::protobuf::Struct& p = *e.mutable_properties();
    Set(p, "orderId", absl::StrCat("ord-", i));
    (*p.mutable_fields())["revenue"].set_number_value(42.5);
    Set(p, "currency", "EUR");
    Set(p, "plan", "pro");
    (*p.mutable_fields())["items"].set_number_value(3);
    google::protobuf::Struct& c = *e.mutable_context();
    Set(*(*c.mutable_fields())["library"].mutable_struct_value(), "name", "analytics-go");
    Set(*(*c.mutable_fields())["library"].mutable_struct_value(), "version", "3.3.0");
    google::protobuf::Struct& app = *(*c.mutable_fields())["app"].mutable_struct_value();
    Set(app, "name", "Shop");
    Set(app, "version", "4.2.1");
    Set(app, "build", "1042");
    google::protobuf::Struct& device = *(*c.mutable_fields())["device"].mutable_struct_value();
    Set(device, "id", "B5372DB0-C21E-11E4-8DFC-AA07A5B093DB");
    Set(device, "manufacturer", "Apple");
    Set(device, "model", "iPhone15,2");
    google::protobuf::Struct& os = *(*c.mutable_fields())["os"].mutable_struct_value();
    Set(os, "name", "iOS");
    Set(os, "version", "17.1");
    google::protobuf::Struct& screen = *(*c.mutable_fields())["screen"].mutable_struct_value();
    (*screen.mutable_fields())["width"].set_number_value(1179);
    (*screen.mutable_fields())["height"].set_number_value(2556);
    Set(c, "ip", "203.0.113.7");
    Set(c, "locale", "de-DE");
    Set(c, "timezone", "Europe/Berlin");
  }
  return request.SerializeAsString();
}

void BM_ProtobufReading(benchmark::State& state) {
  const std::string bytes = Request();
  for (auto _ : state) {
    google::protobuf::Arena arena;
    auto& request = *google::protobuf::Arena::CreateMessage<hookrelay::v1::IngestRequest>(&arena);
    if (!request.ParseFromString(bytes)) state.SkipWithError("parse");
    for (const hookrelay::v1::Event& e : request.events()) {
      benchmark::DoNotOptimize(RawEventFromProto(e));
    }
  }
  state.SetItemsProcessed(state.iterations() * kEvents);
}
BENCHMARK(BM_ProtobufReading);

void BM_OnePassReading(benchmark::State& state) {
  const std::string bytes = Request();
  for (auto _ : state) {
    google::protobuf::Arena arena;
    auto& request =
        *google::protobuf::Arena::CreateMessage<hookrelay::internal::IngestRequestWire>(&arena);
    if (!request.ParseFromString(bytes)) state.SkipWithError("parse");
    for (const hookrelay::internal::EventWire& e : request.events()) {
      benchmark::DoNotOptimize(RawEventFromWire(e));
    }
  }
  state.SetItemsProcessed(state.iterations() * kEvents);
}
BENCHMARK(BM_OnePassReading);

}  // namespace
}  // namespace hookrelay::collector

BENCHMARK_MAIN();
