// The two readings of a gRPC event: RawEventFromWire (Structs written out from their wire bytes)
// against RawEventFromProto (protobuf's Struct maps), on random events and on the cases the
// first leaves to the second.
#include "collector/ingest/proto_event_parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "hookrelay/internal/ingest_wire.pb.h"
#include "hookrelay/v1/event.pb.h"

namespace hookrelay::collector {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Struct;
using google::protobuf::Value;
using hookrelay::internal::EventWire;
using hookrelay::v1::Event;

// Every field of EventWire is Event's (number, name, type), except that the Structs are bytes:
// the wire reading must not drift from the API.
TEST(EventWireTest, EveryFieldIsEventsOwn) {
  const google::protobuf::Descriptor* api = Event::descriptor();
  const google::protobuf::Descriptor* wire = EventWire::descriptor();
  ASSERT_EQ(api->field_count(), wire->field_count());
  for (int i = 0; i < api->field_count(); ++i) {
    const FieldDescriptor* a = api->field(i);
    const FieldDescriptor* w = wire->FindFieldByNumber(a->number());
    ASSERT_NE(w, nullptr) << a->name();
    EXPECT_EQ(w->name(), a->name());
    if (a->message_type() == Struct::descriptor()) {
      EXPECT_EQ(w->type(), FieldDescriptor::TYPE_BYTES) << a->name();
      EXPECT_TRUE(w->is_repeated()) << a->name();
    } else {
      EXPECT_EQ(w->type(), a->type()) << a->name();
      EXPECT_EQ(w->is_repeated(), a->is_repeated()) << a->name();
      EXPECT_EQ(w->message_type(), a->message_type()) << a->name();
      EXPECT_EQ(w->enum_type(), a->enum_type()) << a->name();
    }
  }
}

// Random JSON-ish text: escapes, control characters, multi-byte UTF-8, the empty string.
std::string RandomText(std::mt19937& rng) {
  static const char* const kPieces[] = {"a", "plan", "é", "\"", "\\", "\n", "\x01", "日本",
                                        "😀", " ", "All", "Webhooks", "\x7f", "/"};
  std::string out;
  const int n = static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) out += kPieces[rng() % std::size(kPieces)];
  return out;
}

double RandomNumber(std::mt19937& rng) {
  static const double kNumbers[] = {0.0,
                                    -0.0,
                                    1.0,
                                    -1.0,
                                    42.5,
                                    0.1,
                                    1e300,
                                    -1e-300,
                                    9007199254740993.0,
                                    std::numeric_limits<double>::quiet_NaN(),
                                    std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity()};
  if (rng() % 3 == 0) return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
  return kNumbers[rng() % std::size(kNumbers)];
}

Struct RandomStruct(std::mt19937& rng, int depth);

Value RandomValue(std::mt19937& rng, int depth) {
  Value v;
  switch (rng() % (depth < 4 ? 7 : 5)) {
    case 0:
      v.set_null_value(google::protobuf::NULL_VALUE);
      break;
    case 1:
      v.set_number_value(RandomNumber(rng));
      break;
    case 2:
      v.set_string_value(RandomText(rng));
      break;
    case 3:
      v.set_bool_value(rng() % 2 == 0);
      break;
    case 4:
      break;  // no kind set
    case 5:
      *v.mutable_struct_value() = RandomStruct(rng, depth + 1);
      break;
    default: {
      const int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        *v.mutable_list_value()->add_values() = RandomValue(rng, depth + 1);
      }
    }
  }
  return v;
}

Struct RandomStruct(std::mt19937& rng, int depth) {
  Struct s;
  const int n = static_cast<int>(rng() % 6);
  for (int i = 0; i < n; ++i) (*s.mutable_fields())[RandomText(rng)] = RandomValue(rng, depth);
  return s;
}

// Two JSON objects as Structs, equal whatever their keys' order.
void ExpectSameObject(const std::string& a, const std::string& b, const std::string& what) {
  if (a.empty() || b.empty()) {
    EXPECT_EQ(a, b) << what;
    return;
  }
  Struct sa;
  Struct sb;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(a, &sa).ok()) << what << ": " << a;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(b, &sb).ok()) << what << ": " << b;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(sa, sb))
      << what << "\n" << a << "\n" << b;
  EXPECT_EQ(a.size(), b.size()) << what;  // the same members, in another order
}

// The wire reading of `bytes` (a serialized Event).
std::optional<RawEvent> FromWire(const std::string& bytes) {
  EventWire wire;
  if (!wire.ParseFromString(bytes)) return std::nullopt;
  return RawEventFromWire(wire);
}

TEST(RawEventFromWireTest, AgreesWithProtobufsReadingOnRandomEvents) {
  std::mt19937 rng(20261129);
  for (int round = 0; round < 3000; ++round) {
    Event e;
    e.set_type(static_cast<hookrelay::v1::EventType>(rng() % 9));
    e.set_message_id(RandomText(rng));
    e.set_user_id(RandomText(rng));
    e.set_event(RandomText(rng));
    if (rng() % 2) e.mutable_timestamp()->set_seconds(1700000000 + round);
    if (rng() % 2) *e.mutable_properties() = RandomStruct(rng, 0);
    if (rng() % 2) *e.mutable_context() = RandomStruct(rng, 0);
    if (rng() % 3 == 0) *e.mutable_traits() = RandomStruct(rng, 0);
    if (rng() % 4 == 0) {
      Struct& integrations = *e.mutable_integrations();
      (*integrations.mutable_fields())["All"].set_bool_value(rng() % 2 == 0);
      (*integrations.mutable_fields())["Webhooks"] = RandomValue(rng, 3);
    }
    const std::string bytes = e.SerializeAsString();
    Event parsed;
    ASSERT_TRUE(parsed.ParseFromString(bytes));
    const RawEvent expected = RawEventFromProto(parsed);
    const std::optional<RawEvent> got = FromWire(bytes);
    ASSERT_TRUE(got.has_value()) << "round " << round << ": " << e.ShortDebugString();
    const std::string what = absl::StrCat("round ", round);
    ExpectSameObject(got->properties, expected.properties, what + " properties");
    ExpectSameObject(got->traits, expected.traits, what + " traits");
    ExpectSameObject(got->context, expected.context, what + " context");
    ExpectSameObject(got->integrations, expected.integrations, what + " integrations");
    EXPECT_EQ(got->flags.all, expected.flags.all) << what;
    EXPECT_EQ(got->flags.webhooks, expected.flags.webhooks) << what;
    EXPECT_EQ(got->type, expected.type) << what;
    EXPECT_EQ(got->unknown_type, expected.unknown_type) << what;
    EXPECT_EQ(got->message_id, expected.message_id) << what;
    EXPECT_EQ(got->user_id, expected.user_id) << what;
    EXPECT_EQ(got->event, expected.event) << what;
    EXPECT_EQ(got->timestamp, expected.timestamp) << what;
    EXPECT_EQ(got->json_bytes, expected.json_bytes) << what;
  }
}

// Wire format written by hand: what no protobuf library writes, but a client may send.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Len(int field, const std::string& payload) {
  return absl::StrCat(Varint(static_cast<uint64_t>(field) << 3 | 2), Varint(payload.size()),
                      payload);
}
std::string StringValue(const std::string& s) { return Len(3, s); }
std::string Entry(const std::string& key, const std::string& value) {
  return Len(1, Len(1, key) + Len(2, value));
}
// An Event with `properties` (a serialized Struct) and a track's required fields.
std::string EventWithProperties(const std::string& properties) {
  Event e;
  e.set_type(hookrelay::v1::TRACK);
  e.set_user_id("u1");
  e.set_event("Order Completed");
  return e.SerializeAsString() + Len(12, properties);
}

TEST(RawEventFromWireTest, PlainStructsFromHandWrittenBytes) {
  const std::optional<RawEvent> raw = FromWire(EventWithProperties(
      Entry("plan", StringValue("pro")) + Entry("n", "") + Len(1, Len(2, StringValue("x")))));
  ASSERT_TRUE(raw.has_value());
  // Keys in the order they came; a value without a kind and an entry without a key as protobuf
  // reads them (null, "").
  EXPECT_EQ(raw->properties, R"({"plan":"pro","n":null,"":"x"})");
}

TEST(RawEventFromWireTest, LeavesWhatIsNotPlainToProtobuf) {
  const std::string number = absl::StrCat(Varint(2 << 3 | 1), std::string(8, '\0'));
  std::string deep = StringValue("bottom");
  for (int i = 0; i < 25; ++i) deep = Len(5, Entry("d", deep));
  struct Case {
    const char* what;
    std::string event;
    bool protobuf_reads_it;
  };
  const std::vector<Case> cases = {
      {"a repeated key", EventWithProperties(Entry("a", StringValue("x")) +
                                             Entry("a", StringValue("y"))), true},
      {"two kinds in one value", EventWithProperties(Entry("a", StringValue("x") + number)),
       true},
      {"an unknown field in a value", EventWithProperties(Entry("a", Varint(9 << 3) + "\x01")),
       true},
      {"an unknown field in an entry", EventWithProperties(Len(1, Len(1, "a") + Len(3, "z"))),
       true},
      {"nesting 25 deep", EventWithProperties(Entry("top", deep)), true},
      {"properties sent in two parts",
       EventWithProperties(Entry("a", StringValue("x"))) + Len(12, Entry("b", StringValue("y"))),
       true},
      {"text that is not UTF-8", EventWithProperties(Entry("a", StringValue("\xc3("))), false},
      {"a key that is not UTF-8", EventWithProperties(Entry("\xff", StringValue("x"))), false},
      {"a truncated value", EventWithProperties(Entry("a", Varint(3 << 3 | 2) + Varint(9) + "ab")),
       false},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(FromWire(c.event).has_value()) << c.what;
    Event parsed;
    EXPECT_EQ(parsed.ParseFromString(c.event), c.protobuf_reads_it) << c.what;
  }
  // Protobuf's readings of the first and sixth: the last value of a key; parts merged.
  Event parsed;
  ASSERT_TRUE(parsed.ParseFromString(cases[0].event));
  EXPECT_EQ(RawEventFromProto(parsed).properties, R"({"a":"y"})");
  ASSERT_TRUE(parsed.ParseFromString(cases[5].event));
  EXPECT_EQ(RawEventFromProto(parsed).properties.size(),
            std::string(R"({"a":"x","b":"y"})").size());
}

}  // namespace
}  // namespace hookrelay::collector
