// End-to-end tests of the collector's gRPC API (SPEC §2.2): hookrelay.v1.Collector/Ingest against
// an in-process collector::Server with a manual clock, plus the health checking and reflection
// services, called through a generic stub with hand-encoded protobuf.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/collector.grpc.pb.h"
#include "hookrelay/v1/job.pb.h"
#include "tests/collector_test_util.h"
#include "tests/test_engines.h"

namespace hookrelay::test {
namespace {

using ::google::protobuf::ListValue;
using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::hookrelay::v1::Event;
using ::hookrelay::v1::IngestRequest;
using ::hookrelay::v1::IngestResponse;
using ::hookrelay::v1::Job;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

constexpr auto kRpcTimeout = std::chrono::seconds(20);

// ---- google.protobuf.Value builders.

Value Num(double v) {
  Value out;
  out.set_number_value(v);
  return out;
}
Value Str(std::string v) {
  Value out;
  out.set_string_value(std::move(v));
  return out;
}
Value Bool(bool v) {
  Value out;
  out.set_bool_value(v);
  return out;
}
Value Null() {
  Value out;
  out.set_null_value(google::protobuf::NULL_VALUE);
  return out;
}
Value List(std::vector<Value> items) {
  Value out;
  ListValue* list = out.mutable_list_value();
  for (Value& v : items) *list->add_values() = std::move(v);
  return out;
}
Struct Obj(std::vector<std::pair<std::string, Value>> fields) {
  Struct out;
  for (auto& [k, v] : fields) (*out.mutable_fields())[k] = std::move(v);
  return out;
}
Value ObjValue(std::vector<std::pair<std::string, Value>> fields) {
  Value out;
  *out.mutable_struct_value() = Obj(std::move(fields));
  return out;
}

google::protobuf::Timestamp Ts(absl::Time t) {
  google::protobuf::Timestamp out;
  const int64_t nanos = absl::ToUnixNanos(t);
  out.set_seconds(nanos / 1000000000);
  out.set_nanos(static_cast<int32_t>(nanos % 1000000000));
  return out;
}

Event Track(std::string user_id, std::string event, std::string message_id = "") {
  Event e;
  e.set_type(hookrelay::v1::TRACK);
  e.set_user_id(std::move(user_id));
  e.set_event(std::move(event));
  e.set_message_id(std::move(message_id));
  return e;
}

// ---- Hand-rolled protobuf wire format, for the health and reflection services.

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

std::string LenField(int number, std::string_view payload) {
  std::string out;
  PutVarint(&out, (static_cast<uint64_t>(number) << 3) | 2);
  PutVarint(&out, payload.size());
  out.append(payload);
  return out;
}

struct WireField {
  int number = 0;
  int wire_type = 0;
  uint64_t varint = 0;  // wire type 0
  std::string bytes;    // wire type 2
};

bool GetVarint(std::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// Top-level fields of a message; empty on malformed input (and a test failure).
std::vector<WireField> ParseWire(std::string_view in) {
  std::vector<WireField> out;
  while (!in.empty()) {
    uint64_t key;
    WireField f;
    if (!GetVarint(&in, &key)) break;
    f.number = static_cast<int>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    if (f.wire_type == 0) {
      if (!GetVarint(&in, &f.varint)) break;
    } else if (f.wire_type == 2) {
      uint64_t len;
      if (!GetVarint(&in, &len) || len > in.size()) break;
      f.bytes = std::string(in.substr(0, len));
      in.remove_prefix(len);
    } else if (f.wire_type == 1 && in.size() >= 8) {
      in.remove_prefix(8);
    } else if (f.wire_type == 5 && in.size() >= 4) {
      in.remove_prefix(4);
    } else {
      break;
    }
    out.push_back(std::move(f));
  }
  if (!in.empty()) {
    ADD_FAILURE() << "malformed protobuf";
    return {};
  }
  return out;
}

grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromByteBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return "";
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// Waits for `tag` on `cq`; false when the operation failed or timed out.
bool Await(grpc::CompletionQueue& cq, void* tag) {
  void* got = nullptr;
  bool ok = false;
  const auto status = cq.AsyncNext(&got, &ok, std::chrono::system_clock::now() + kRpcTimeout);
  return status == grpc::CompletionQueue::GOT_EVENT && got == tag && ok;
}

// On both job-store engines (tests/test_engines.h).
class CollectorGrpcTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
    ASSERT_TRUE(engine.ok()) << engine.status();
    collector_ = std::make_unique<InProcessCollector>("collector_grpc_test", TestConfigYaml(), *engine);
    ASSERT_TRUE(collector_->Start().ok());
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", collector_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = hookrelay::v1::Collector::NewStub(channel_);
  }

  grpc::Status Ingest(const IngestRequest& request, IngestResponse* response,
                      const std::vector<std::pair<std::string, std::string>>& metadata) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
    for (const auto& [k, v] : metadata) context.AddMetadata(k, v);
    return stub_->Ingest(&context, request, response);
  }

  grpc::Status Ingest(const IngestRequest& request, IngestResponse* response) {
    return Ingest(request, response, {{"x-write-key", kWebKey}});
  }

  std::vector<Job> StopAndLeaseAll() {
    channel_.reset();
    stub_.reset();
    absl::StatusOr<std::vector<Job>> jobs = collector_->StopAndLeaseAll();
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    return jobs.ok() ? *std::move(jobs) : std::vector<Job>{};
  }

  std::unique_ptr<InProcessCollector> collector_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<hookrelay::v1::Collector::Stub> stub_;
};

std::map<std::string, Job> ByMessageId(const std::vector<Job>& jobs) {
  std::map<std::string, Job> out;
  for (const Job& job : jobs) out[job.message_id()] = job;
  return out;
}

const std::regex kUuidV4("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");

// Ingest takes the write key from x-write-key or Basic auth and returns generated messageIds.
TEST_P(CollectorGrpcTest, IngestAuthenticatesByWriteKeyOrBasicAuth) {
  IngestRequest by_header;
  *by_header.add_events() = Track("u1", "Signed Up", "grpc-header");
  IngestResponse r1;
  grpc::Status s1 = Ingest(by_header, &r1, {{"x-write-key", kWebKey}});
  ASSERT_TRUE(s1.ok()) << s1.error_code() << " " << s1.error_message();
  EXPECT_EQ(r1.accepted(), 1);
  EXPECT_THAT(r1.rejected(), IsEmpty());
  EXPECT_THAT(r1.message_ids(), ElementsAre("grpc-header"));

  IngestRequest by_basic;
  Event identify;
  identify.set_type(hookrelay::v1::IDENTIFY);
  identify.set_user_id("u1");
  *identify.mutable_traits() = Obj({{"plan", Str("pro")}});
  *by_basic.add_events() = identify;
  IngestResponse r2;
  grpc::Status s2 = Ingest(by_basic, &r2, {{"authorization", BasicAuth(kFanKey)}});
  ASSERT_TRUE(s2.ok()) << s2.error_code() << " " << s2.error_message();
  ASSERT_THAT(r2.message_ids(), SizeIs(1));
  EXPECT_TRUE(std::regex_match(r2.message_ids(0), kUuidV4)) << r2.message_ids(0);

  const std::vector<Job> jobs = StopAndLeaseAll();
  ASSERT_THAT(jobs, SizeIs(3));  // web: one destination; fan: two
  const auto by_id = ByMessageId(jobs);
  EXPECT_EQ(by_id.at("grpc-header").source_id(), "web");
  EXPECT_EQ(JsonStr(by_id.at("grpc-header").event_json(), "/event"), "Signed Up");
  EXPECT_EQ(by_id.at(r2.message_ids(0)).source_id(), "fan");
  EXPECT_EQ(JsonStr(by_id.at(r2.message_ids(0)).event_json(), "/messageId"), r2.message_ids(0));
  EXPECT_EQ(JsonStr(by_id.at(r2.message_ids(0)).event_json(), "/traits/plan"), "pro");
}

// `traceparent` / `tracestate` metadata on Ingest is kept with each job; an invalid traceparent
// is ignored (the call still succeeds) and none is invented without one.
TEST_P(CollectorGrpcTest, TraceparentMetadataIsKeptWithEachJob) {
  constexpr char kParent[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
  IngestRequest traced;
  *traced.add_events() = Track("u1", "A", "traced-1");
  *traced.add_events() = Track("u1", "B", "traced-2");
  IngestResponse response;
  grpc::Status s = Ingest(traced, &response,
                          {{"x-write-key", kWebKey},
                           {"traceparent", kParent},
                           {"tracestate", "congo=t61rcWkgMzE"}});
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  IngestRequest invalid;
  *invalid.add_events() = Track("u1", "C", "invalid");
  s = Ingest(invalid, &response,
             {{"x-write-key", kWebKey},
              {"traceparent", "00-00000000000000000000000000000000-b7ad6b7169203331-01"}});
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  IngestRequest plain;
  *plain.add_events() = Track("u1", "D", "plain");
  s = Ingest(plain, &response);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();

  const auto by_id = ByMessageId(StopAndLeaseAll());
  ASSERT_EQ(by_id.size(), 4u);
  for (const char* id : {"traced-1", "traced-2"}) {
    EXPECT_EQ(by_id.at(id).traceparent(), kParent) << id;
    EXPECT_EQ(by_id.at(id).tracestate(), "congo=t61rcWkgMzE") << id;
  }
  EXPECT_EQ(by_id.at("invalid").traceparent(), "");
  EXPECT_EQ(by_id.at("plain").traceparent(), "");
  EXPECT_EQ(by_id.at("plain").tracestate(), "");
}

// An unknown, malformed or missing write key is UNAUTHENTICATED and stores nothing.
TEST_P(CollectorGrpcTest, UnknownWriteKeyIsUnauthenticated) {
  IngestRequest request;
  *request.add_events() = Track("u1", "E");
  const std::vector<std::vector<std::pair<std::string, std::string>>> cases = {
      {{"x-write-key", "wk_nope"}},
      {{"authorization", BasicAuth("wk_nope")}},
      {{"authorization", "Basic ###"}},
      {{"authorization", absl::StrCat("Bearer ", kWebKey)}},
      {},
  };
  for (const auto& metadata : cases) {
    IngestResponse response;
    grpc::Status s = Ingest(request, &response, metadata);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << (metadata.empty() ? "no key" : metadata[0].second) << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), Not(HasSubstr("wk_nope")));
  }
  EXPECT_THAT(StopAndLeaseAll(), IsEmpty());
}

// All events invalid → INVALID_ARGUMENT naming each events[i].field; nothing stored.
TEST_P(CollectorGrpcTest, AllInvalidIsInvalidArgumentNamingTheField) {
  IngestRequest request;
  *request.add_events() = Track("u1", "");  // no event name
  Event alias;
  alias.set_type(hookrelay::v1::ALIAS);
  alias.set_user_id("u1");
  *request.add_events() = alias;  // no previousId
  Event group;
  group.set_type(hookrelay::v1::GROUP);
  group.set_anonymous_id("a1");
  *request.add_events() = group;  // no groupId
  IngestResponse response;
  grpc::Status s = Ingest(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("events[0].event"));
  EXPECT_THAT(s.error_message(), HasSubstr("events[1].previousId"));
  EXPECT_THAT(s.error_message(), HasSubstr("events[2].groupId"));
  EXPECT_THAT(StopAndLeaseAll(), IsEmpty());
}

// Mixed valid/invalid events → OK, valid stored, rejected list and message_ids in order.
TEST_P(CollectorGrpcTest, MixedBatchIsOkWithRejectedList) {
  IngestRequest request;
  *request.add_events() = Track("u1", "A", "mixed-a");
  *request.add_events() = Track("", "no user");
  *request.add_events() = Track("u3", "C");  // generated messageId
  Event unspecified = Track("u4", "D");
  unspecified.set_type(hookrelay::v1::EVENT_TYPE_UNSPECIFIED);
  *request.add_events() = unspecified;
  Event del = Track("u5", "E");
  del.set_type(hookrelay::v1::DELETE);  // never accepted at ingest
  *request.add_events() = del;
  *request.add_events() = Track("u6", "F", std::string(101, 'x'));

  IngestResponse response;
  grpc::Status s = Ingest(request, &response);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(response.accepted(), 2);
  ASSERT_THAT(response.rejected(), SizeIs(4));
  const std::vector<std::pair<int, std::string>> expected = {
      {1, "userId"}, {3, "type"}, {4, "type"}, {5, "messageId"}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(response.rejected(i).index(), expected[i].first);
    EXPECT_EQ(response.rejected(i).field(), expected[i].second);
    EXPECT_THAT(response.rejected(i).reason(), Not(IsEmpty()));
  }
  ASSERT_THAT(response.message_ids(), SizeIs(6));
  EXPECT_EQ(response.message_ids(0), "mixed-a");
  EXPECT_EQ(response.message_ids(1), "");
  EXPECT_TRUE(std::regex_match(response.message_ids(2), kUuidV4)) << response.message_ids(2);
  for (int i : {3, 4, 5}) EXPECT_EQ(response.message_ids(i), "");

  const auto jobs = ByMessageId(StopAndLeaseAll());
  ASSERT_THAT(jobs, SizeIs(2));
  EXPECT_EQ(JsonStr(jobs.at("mixed-a").event_json(), "/event"), "A");
  EXPECT_EQ(JsonStr(jobs.at(response.message_ids(2)).event_json(), "/event"), "C");
}

// google.protobuf.Struct maps (numbers, nesting, escaped strings) round-trip into event_json.
TEST_P(CollectorGrpcTest, StructFieldsRoundTripIntoEventJson) {
  const std::string tricky = "quote \" backslash \\ newline \n tab \t unicode h\xc3\xa9llo \xe2\x9c\x93";
  Event e = Track("u1", "Order Completed", "structs");
  *e.mutable_properties() = Obj({
      {"price", Num(19.99)},
      {"qty", Num(3)},
      {"negative", Num(-2.5)},
      {"zero", Num(0)},
      {"name", Str("hello  world  with spaces")},
      {"tricky", Str(tricky)},
      {"in_stock", Bool(true)},
      {"gift", Bool(false)},
      {"coupon", Null()},
      {"nested", ObjValue({{"list", List({Num(1), Str("two"), Bool(true), Null(),
                                          ObjValue({{"deep", Str("x")}})})},
                           {"empty", ObjValue({})}})},
  });
  *e.mutable_context() = Obj({{"ip", Str("1.2.3.4")}, {"library", ObjValue({{"name", Str("grpc")}})}});
  *e.mutable_integrations() = Obj({{"All", Bool(false)}, {"Webhooks", Bool(true)}});
  IngestRequest request;
  *request.add_events() = e;
  IngestResponse response;
  grpc::Status s = Ingest(request, &response);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();

  const std::vector<Job> jobs = StopAndLeaseAll();
  ASSERT_THAT(jobs, SizeIs(1));
  const std::string& json = jobs[0].event_json();
  EXPECT_EQ(JsonAt(json, "/properties/price"), "19.99");
  EXPECT_EQ(JsonAt(json, "/properties/qty"), "3");
  EXPECT_EQ(JsonAt(json, "/properties/negative"), "-2.5");
  EXPECT_EQ(JsonAt(json, "/properties/zero"), "0");
  EXPECT_EQ(JsonStr(json, "/properties/name"), "hello  world  with spaces");
  EXPECT_EQ(JsonStr(json, "/properties/tricky"), tricky);
  EXPECT_EQ(JsonAt(json, "/properties/in_stock"), "true");
  EXPECT_EQ(JsonAt(json, "/properties/gift"), "false");
  EXPECT_EQ(JsonAt(json, "/properties/coupon"), "null");
  EXPECT_EQ(JsonAt(json, "/properties/nested/list"), R"([1,"two",true,null,{"deep":"x"}])");
  EXPECT_EQ(JsonAt(json, "/properties/nested/empty"), "{}");
  EXPECT_EQ(JsonStr(json, "/context/ip"), "1.2.3.4");
  EXPECT_EQ(JsonStr(json, "/context/library/name"), "grpc");
  EXPECT_EQ(JsonAt(json, "/integrations/All"), "false");
  EXPECT_EQ(JsonStr(json, "/type"), "track");
  EXPECT_EQ(JsonStr(json, "/userId"), "u1");
}

// Protobuf timestamps are normalised with skew correction; out-of-range ones are rejected.
TEST_P(CollectorGrpcTest, TimestampsAreNormalisedWithSkewCorrection) {
  const absl::Time ts = absl::FromUnixNanos(1577836800123456789);  // 2020-01-01T00:00:00.123456789Z
  Event skewed = Track("u1", "Skewed", "ts-skew");
  *skewed.mutable_timestamp() = Ts(ts);
  *skewed.mutable_sent_at() = Ts(ts + absl::Seconds(10));
  Event plain = Track("u1", "Plain", "ts-plain");
  *plain.mutable_timestamp() = Ts(ts);
  Event none = Track("u1", "None", "ts-none");
  Event bad = Track("u1", "Bad", "ts-bad");
  bad.mutable_timestamp()->set_seconds(253402300800);  // year 10000
  IngestRequest request;
  *request.add_events() = skewed;
  *request.add_events() = plain;
  *request.add_events() = none;
  *request.add_events() = bad;
  IngestResponse response;
  grpc::Status s = Ingest(request, &response);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  ASSERT_THAT(response.rejected(), SizeIs(1));
  EXPECT_EQ(response.rejected(0).index(), 3);
  EXPECT_EQ(response.rejected(0).field(), "timestamp");

  const auto jobs = ByMessageId(StopAndLeaseAll());
  ASSERT_THAT(jobs, SizeIs(3));
  const std::string& sk = jobs.at("ts-skew").event_json();
  EXPECT_EQ(JsonStr(sk, "/originalTimestamp"), "2020-01-01T00:00:00.123Z");
  EXPECT_EQ(JsonStr(sk, "/sentAt"), "2020-01-01T00:00:10.123Z");
  EXPECT_EQ(JsonStr(sk, "/timestamp"), "2023-11-14T22:13:10.000Z");  // now − 10 s
  EXPECT_EQ(JsonStr(sk, "/receivedAt"), kNowIso);
  const std::string& pl = jobs.at("ts-plain").event_json();
  EXPECT_EQ(JsonStr(pl, "/timestamp"), "2020-01-01T00:00:00.123Z");
  EXPECT_EQ(JsonStr(pl, "/originalTimestamp"), "2020-01-01T00:00:00.123Z");
  EXPECT_EQ(JsonAt(pl, "/sentAt"), "<missing>");
  const std::string& no = jobs.at("ts-none").event_json();
  EXPECT_EQ(JsonStr(no, "/timestamp"), kNowIso);
  EXPECT_EQ(JsonAt(no, "/originalTimestamp"), "<missing>");
  EXPECT_EQ(jobs.at("ts-none").received_at_unix_ms(), kNowUnixSeconds * 1000);
}

// 2,501 events or an event over 32,000 bytes is RESOURCE_EXHAUSTED; 2,500 events are accepted.
TEST_P(CollectorGrpcTest, LimitsAreResourceExhausted) {
  IngestRequest too_many;
  for (int i = 0; i < 2501; ++i) *too_many.add_events() = Track("u", "E", absl::StrCat("many-", i));
  IngestResponse response;
  grpc::Status s = Ingest(too_many, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("2500"));

  IngestRequest too_big;
  *too_big.add_events() = Track("u", "E", "small-neighbour");
  Event big = Track("u", "E", "big");
  *big.mutable_properties() = Obj({{"pad", Str(std::string(32001, 'x'))}});
  *too_big.add_events() = big;
  s = Ingest(too_big, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("events[1]"));

  IngestRequest exactly;
  for (int i = 0; i < 2500; ++i) *exactly.add_events() = Track("u", "E", absl::StrCat("ok-", i));
  response.Clear();
  s = Ingest(exactly, &response);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(response.accepted(), 2500);

  const std::vector<Job> jobs = StopAndLeaseAll();
  EXPECT_THAT(jobs, SizeIs(2500));
  for (const Job& job : jobs) EXPECT_TRUE(absl::StartsWith(job.message_id(), "ok-")) << job.message_id();
}

// A Struct the collector's one-pass reading leaves to protobuf (a key sent twice, which no
// protobuf library writes: protobuf keeps the last) is read as protobuf reads it, and the plain
// events of the same request alike.
TEST_P(CollectorGrpcTest, StructWithAKeySentTwiceIsReadAsProtobufReadsIt) {
  auto entry = [](std::string_view key, std::string_view text) {
    return LenField(1, LenField(1, key) + LenField(2, LenField(3, text)));
  };
  const std::string twice = Track("u1", "Upgraded", "twice").SerializeAsString() +
                            LenField(12, entry("plan", "free") + entry("plan", "pro"));
  const std::string plain = Track("u2", "Upgraded", "plain").SerializeAsString() +
                            LenField(12, entry("plan", "pro"));
  const grpc::ByteBuffer request = ToByteBuffer(LenField(1, twice) + LenField(1, plain));
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  context.AddMetadata("x-write-key", kWebKey);
  grpc::ByteBuffer reply;
  grpc::Status status;
  absl::Notification done;
  generic.UnaryCall(&context, "/hookrelay.v1.Collector/Ingest", grpc::StubOptions(), &request,
                    &reply, [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  IngestResponse response;
  ASSERT_TRUE(response.ParseFromString(FromByteBuffer(reply)));
  EXPECT_EQ(response.accepted(), 2);
  const auto by_id = ByMessageId(StopAndLeaseAll());
  for (const char* id : {"twice", "plain"}) {
    ASSERT_TRUE(by_id.contains(id)) << id;
    const std::string& json = by_id.at(id).event_json();
    EXPECT_EQ(JsonStr(json, "/properties/plan"), "pro") << json;
    EXPECT_EQ(json.find("\"plan\""), json.rfind("\"plan\"")) << "one plan: " << json;
  }
}

// The standard gRPC health service reports SERVING for the whole server.
TEST_P(CollectorGrpcTest, HealthCheckReportsServing) {
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  const grpc::ByteBuffer request = ToByteBuffer("");  // HealthCheckRequest{service: ""}
  grpc::ByteBuffer reply;
  grpc::Status status;
  absl::Notification done;
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &reply,
                    [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  // HealthCheckResponse{status = 1}: SERVING.
  const std::vector<WireField> fields = ParseWire(FromByteBuffer(reply));
  ASSERT_THAT(fields, SizeIs(1));
  EXPECT_EQ(fields[0].number, 1);
  EXPECT_EQ(fields[0].wire_type, 0);
  EXPECT_EQ(fields[0].varint, 1u);
}

// Server reflection lists the services and serves hookrelay.v1.Collector's descriptor.
TEST_P(CollectorGrpcTest, ReflectionListsServicesAndDescriptors) {
  grpc::GenericStub generic(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      generic.PrepareCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  int tags[8];
  call->StartCall(&tags[0]);
  ASSERT_TRUE(Await(cq, &tags[0]));

  // ServerReflectionRequest{list_services (7): ""}
  call->Write(ToByteBuffer(LenField(7, "")), &tags[1]);
  ASSERT_TRUE(Await(cq, &tags[1]));
  grpc::ByteBuffer list_reply;
  call->Read(&list_reply, &tags[2]);
  ASSERT_TRUE(Await(cq, &tags[2]));

  // ServerReflectionRequest{file_containing_symbol (4): "hookrelay.v1.Collector"}
  call->Write(ToByteBuffer(LenField(4, "hookrelay.v1.Collector")), &tags[3]);
  ASSERT_TRUE(Await(cq, &tags[3]));
  grpc::ByteBuffer file_reply;
  call->Read(&file_reply, &tags[4]);
  ASSERT_TRUE(Await(cq, &tags[4]));

  call->WritesDone(&tags[5]);
  ASSERT_TRUE(Await(cq, &tags[5]));
  grpc::Status status;
  call->Finish(&status, &tags[6]);
  ASSERT_TRUE(Await(cq, &tags[6]));
  EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  cq.Shutdown();
  void* ignored_tag;
  bool ignored_ok;
  while (cq.Next(&ignored_tag, &ignored_ok)) {
  }

  // ServerReflectionResponse.list_services_response (6) → ListServiceResponse.service (1) →
  // ServiceResponse.name (1).
  std::vector<std::string> services;
  for (const WireField& f : ParseWire(FromByteBuffer(list_reply))) {
    if (f.number != 6) continue;
    for (const WireField& service : ParseWire(f.bytes)) {
      if (service.number != 1) continue;
      for (const WireField& name : ParseWire(service.bytes)) {
        if (name.number == 1) services.push_back(name.bytes);
      }
    }
  }
  EXPECT_THAT(services, Contains("hookrelay.v1.Collector"));
  EXPECT_THAT(services, Contains("grpc.health.v1.Health"));
  EXPECT_THAT(services, Contains("grpc.reflection.v1alpha.ServerReflection"));

  // ServerReflectionResponse.file_descriptor_response (4) → FileDescriptorResponse
  // .file_descriptor_proto (1), serialized FileDescriptorProtos.
  std::vector<std::string> methods;
  for (const WireField& f : ParseWire(FromByteBuffer(file_reply))) {
    if (f.number != 4) continue;
    for (const WireField& file : ParseWire(f.bytes)) {
      google::protobuf::FileDescriptorProto proto;
      if (file.number != 1 || !proto.ParseFromString(file.bytes)) continue;
      for (const auto& service : proto.service()) {
        if (proto.package() != "hookrelay.v1" || service.name() != "Collector") continue;
        for (const auto& method : service.method()) methods.push_back(method.name());
      }
    }
  }
  EXPECT_THAT(methods, Contains("Ingest"));
}


// The BadRequest in a status's details, as (field, description) pairs; empty when absent.
std::vector<std::pair<std::string, std::string>> FieldViolations(const grpc::Status& s) {
  std::vector<std::pair<std::string, std::string>> out;
  google::rpc::Status details;
  if (!details.ParseFromString(s.error_details())) return out;
  EXPECT_EQ(details.code(), static_cast<int>(s.error_code()));
  EXPECT_EQ(details.message(), s.error_message());
  for (const auto& any : details.details()) {
    google::rpc::BadRequest bad_request;
    if (!any.UnpackTo(&bad_request)) continue;
    for (const auto& v : bad_request.field_violations()) out.emplace_back(v.field(), v.description());
  }
  return out;
}

// INVALID_ARGUMENT carries a google.rpc.BadRequest naming every invalid events[i].field, with
// the same reasons as the message text; control characters in identifiers are among them.
TEST_P(CollectorGrpcTest, InvalidArgumentCarriesBadRequestDetails) {
  IngestRequest request;
  *request.add_events() = Track("u1", "");  // no event name
  Event bad_id = Track("u1", "E");
  bad_id.set_message_id("id\r\nX-Injected: 1");
  *request.add_events() = bad_id;
  Event bad_user = Track("u\x04", "E");
  *request.add_events() = bad_user;
  IngestResponse response;
  const grpc::Status s = Ingest(request, &response);
  ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  const auto violations = FieldViolations(s);
  ASSERT_THAT(violations, SizeIs(3)) << s.error_message();
  EXPECT_EQ(violations[0].first, "events[0].event");
  EXPECT_EQ(violations[1].first, "events[1].messageId");
  EXPECT_EQ(violations[2].first, "events[2].userId");
  for (const auto& [field, description] : violations) {
    EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat(field, ": ", description)));
  }
  EXPECT_THAT(StopAndLeaseAll(), IsEmpty());
}

// A batch with one event whose messageId has control characters stores its neighbours and lists
// the bad one, naming messageId.
TEST_P(CollectorGrpcTest, ControlCharactersInMessageIdAreRejectedPerEvent) {
  IngestRequest request;
  *request.add_events() = Track("u1", "Good");
  Event bad = Track("u1", "Bad");
  bad.set_message_id(std::string("m\0id", 4));
  *request.add_events() = bad;
  IngestResponse response;
  const grpc::Status s = Ingest(request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.accepted(), 1);
  ASSERT_THAT(response.rejected(), SizeIs(1));
  EXPECT_EQ(response.rejected(0).index(), 1);
  EXPECT_EQ(response.rejected(0).field(), "messageId");
  EXPECT_THAT(StopAndLeaseAll(), SizeIs(1));
}

// Bytes that are not an IngestRequest answer INVALID_ARGUMENT (gRPC's callback API alone would
// say UNIMPLEMENTED), and size limits carry a BadRequest too.
TEST_P(CollectorGrpcTest, UnparsableRequestIsInvalidArgument) {
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  context.AddMetadata("x-write-key", kWebKey);
  // Field 1 (events), length-delimited, claiming 100 bytes but holding 3.
  const grpc::ByteBuffer request = ToByteBuffer(std::string("\x0a\x64" "abc", 5));
  grpc::ByteBuffer reply;
  grpc::Status status;
  absl::Notification done;
  generic.UnaryCall(&context, "/hookrelay.v1.Collector/Ingest", grpc::StubOptions(), &request,
                    &reply, [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("IngestRequest"));
  EXPECT_THAT(FieldViolations(status), SizeIs(1));

  IngestRequest too_many;
  for (int i = 0; i < 2501; ++i) *too_many.add_events() = Track("u1", "E");
  IngestResponse response;
  const grpc::Status s = Ingest(too_many, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  const auto violations = FieldViolations(s);
  ASSERT_THAT(violations, SizeIs(1));
  EXPECT_EQ(violations[0].first, "events");
  EXPECT_THAT(violations[0].second, HasSubstr("at most 2500"));
}

// Health is served per service too: the collector's services answer SERVING, an unknown name
// NOT_FOUND (grpc.health.v1 semantics).
TEST_P(CollectorGrpcTest, HealthCheckPerService) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  for (const char* service : {"", "hookrelay.v1.Collector", "hookrelay.v1.Admin"}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status s = stub->Check(&context, request, &response);
    ASSERT_TRUE(s.ok()) << service << ": " << s.error_message();
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("no.such.Service");
  grpc::health::v1::HealthCheckResponse response;
  EXPECT_EQ(stub->Check(&context, request, &response).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Reflection can describe every service it lists: each file_containing_symbol answer, with the
// files it depends on, builds into a descriptor pool that has the service (grpcurl describe).
TEST_P(CollectorGrpcTest, ReflectionDescribesEveryListedService) {
  grpc::GenericStub generic(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = generic.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  int tag = 0;
  call->StartCall(&tag);
  ASSERT_TRUE(Await(cq, &tag));
  auto ask = [&](const std::string& request) -> std::string {
    call->Write(ToByteBuffer(request), &tag);
    if (!Await(cq, &tag)) return "";
    grpc::ByteBuffer reply;
    call->Read(&reply, &tag);
    if (!Await(cq, &tag)) return "";
    return FromByteBuffer(reply);
  };

  std::vector<std::string> services;
  for (const WireField& f : ParseWire(ask(LenField(7, "")))) {
    if (f.number != 6) continue;
    for (const WireField& service : ParseWire(f.bytes)) {
      for (const WireField& name : ParseWire(service.bytes)) {
        if (service.number == 1 && name.number == 1) services.push_back(name.bytes);
      }
    }
  }
  EXPECT_THAT(services, Contains("grpc.health.v1.Health"));
  EXPECT_THAT(services, Contains("hookrelay.v1.Admin"));
  ASSERT_GE(services.size(), 4u);

  for (const std::string& service : services) {
    std::vector<google::protobuf::FileDescriptorProto> files;
    std::string error;
    for (const WireField& f : ParseWire(ask(LenField(4, service)))) {
      if (f.number == 7) error = f.bytes;  // error_response
      if (f.number != 4) continue;
      for (const WireField& file : ParseWire(f.bytes)) {
        google::protobuf::FileDescriptorProto proto;
        if (file.number == 1 && proto.ParseFromString(file.bytes)) files.push_back(proto);
      }
    }
    ASSERT_FALSE(files.empty()) << service << " cannot be described; error_response "
                                << ParseWire(error).size() << " fields";
    // Build in dependency order: retry until every file is in (at most files.size() rounds).
    google::protobuf::DescriptorPool pool;
    std::vector<bool> built(files.size(), false);
    for (size_t round = 0; round < files.size(); ++round) {
      for (size_t i = 0; i < files.size(); ++i) {
        if (built[i]) continue;
        bool deps_ready = true;
        for (const std::string& dep : files[i].dependency()) {
          deps_ready = deps_ready && pool.FindFileByName(dep) != nullptr;
        }
        if (deps_ready) built[i] = pool.BuildFile(files[i]) != nullptr;
      }
    }
    EXPECT_NE(pool.FindServiceByName(service), nullptr)
        << service << ": reflection answered " << files.size()
        << " files, which do not describe it";
  }

  call->WritesDone(&tag);
  ASSERT_TRUE(Await(cq, &tag));
  grpc::Status status;
  call->Finish(&status, &tag);
  ASSERT_TRUE(Await(cq, &tag));
  EXPECT_TRUE(status.ok()) << status.error_message();
  cq.Shutdown();
  void* ignored_tag;
  bool ignored_ok;
  while (cq.Next(&ignored_tag, &ignored_ok)) {
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, CollectorGrpcTest, EngineParams(), EngineParamName);

}  // namespace
}  // namespace hookrelay::test
