#include "collector/model/event.h"

#include <simdjson.h>

#include <string>
#include <variant>

#include "common/time_format.h"
#include "gtest/gtest.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::EventType;

const absl::Time kNow = absl::FromUnixMillis(1700000000123);

RawEvent Valid(EventType type) {
  RawEvent raw;
  raw.type = type;
  raw.user_id = "u1";
  raw.event = type == hookrelay::v1::TRACK ? "Order Completed" : "";
  raw.group_id = type == hookrelay::v1::GROUP ? "g1" : "";
  raw.previous_id = type == hookrelay::v1::ALIAS ? "anon-1" : "";
  raw.json_bytes = 100;
  return raw;
}

FieldError ErrorOf(RawEvent raw) {
  auto r = Normalize(std::move(raw), kNow);
  EXPECT_TRUE(std::holds_alternative<FieldError>(r));
  return std::holds_alternative<FieldError>(r) ? std::get<FieldError>(r) : FieldError{};
}

NormalizedEvent Ok(RawEvent raw) {
  auto r = Normalize(std::move(raw), kNow);
  if (auto* e = std::get_if<FieldError>(&r)) {
    ADD_FAILURE() << e->field << ": " << e->reason;
    return {};
  }
  return std::get<NormalizedEvent>(std::move(r));
}

simdjson::dom::element Parse(simdjson::dom::parser& p, const std::string& json) {
  simdjson::dom::element e;
  EXPECT_EQ(p.parse(json).get(e), simdjson::SUCCESS) << json;
  return e;
}

// Every one of the six ingest types is accepted with its required fields.
TEST(NormalizeTest, AcceptsEveryTypeWithRequiredFields) {
  for (EventType t : {hookrelay::v1::TRACK, hookrelay::v1::IDENTIFY, hookrelay::v1::PAGE,
                      hookrelay::v1::SCREEN, hookrelay::v1::GROUP, hookrelay::v1::ALIAS}) {
    const NormalizedEvent ev = Ok(Valid(t));
    EXPECT_EQ(ev.type, t);
    simdjson::dom::parser p;
    EXPECT_EQ(std::string_view(Parse(p, ev.json)["type"]), EventTypeName(t));
  }
}

// Each required-field rule names the field.
TEST(NormalizeTest, RequiredFields) {
  struct Case {
    EventType type;
    void (*mutate)(RawEvent&);
    const char* field;
  } cases[] = {
      {hookrelay::v1::TRACK, [](RawEvent& r) { r.user_id.clear(); }, "userId"},
      {hookrelay::v1::IDENTIFY, [](RawEvent& r) { r.user_id.clear(); }, "userId"},
      {hookrelay::v1::PAGE, [](RawEvent& r) { r.user_id.clear(); }, "userId"},
      {hookrelay::v1::SCREEN, [](RawEvent& r) { r.user_id.clear(); }, "userId"},
      {hookrelay::v1::GROUP, [](RawEvent& r) { r.user_id.clear(); }, "userId"},
      {hookrelay::v1::TRACK, [](RawEvent& r) { r.event.clear(); }, "event"},
      {hookrelay::v1::GROUP, [](RawEvent& r) { r.group_id.clear(); }, "groupId"},
      {hookrelay::v1::ALIAS, [](RawEvent& r) { r.user_id.clear(); r.anonymous_id = "a"; }, "userId"},
      {hookrelay::v1::ALIAS, [](RawEvent& r) { r.previous_id.clear(); }, "previousId"},
      {hookrelay::v1::EVENT_TYPE_UNSPECIFIED, [](RawEvent&) {}, "type"},
  };
  for (const Case& c : cases) {
    RawEvent raw = Valid(c.type == hookrelay::v1::EVENT_TYPE_UNSPECIFIED ? hookrelay::v1::TRACK : c.type);
    raw.type = c.type;
    c.mutate(raw);
    EXPECT_EQ(ErrorOf(std::move(raw)).field, c.field);
  }
}

// anonymousId alone satisfies the identity rule (not for alias).
TEST(NormalizeTest, AnonymousIdIsEnough) {
  RawEvent raw = Valid(hookrelay::v1::TRACK);
  raw.user_id.clear();
  raw.anonymous_id = "anon";
  const NormalizedEvent ev = Ok(std::move(raw));
  EXPECT_NE(ev.json.find(R"("anonymousId":"anon")"), std::string::npos);
  EXPECT_EQ(ev.json.find("userId"), std::string::npos);
}

TEST(NormalizeTest, UnknownTypeIsNamed) {
  RawEvent raw = Valid(hookrelay::v1::TRACK);
  raw.type = hookrelay::v1::EVENT_TYPE_UNSPECIFIED;
  raw.unknown_type = "purchase";
  const FieldError e = ErrorOf(std::move(raw));
  EXPECT_EQ(e.field, "type");
  EXPECT_NE(e.reason.find("purchase"), std::string::npos);
}

// messageId: generated as UUID v4 when absent; 100 characters pass, 101 fail (counted in code
// points, not bytes).
TEST(NormalizeTest, MessageIdRules) {
  EXPECT_EQ(Ok(Valid(hookrelay::v1::TRACK)).message_id.size(), 36u);
  RawEvent raw = Valid(hookrelay::v1::TRACK);
  raw.message_id = std::string(100, 'm');
  EXPECT_EQ(Ok(std::move(raw)).message_id, std::string(100, 'm'));
  raw = Valid(hookrelay::v1::TRACK);
  raw.message_id = std::string(101, 'm');
  const FieldError e = ErrorOf(std::move(raw));
  EXPECT_EQ(e.field, "messageId");
  EXPECT_NE(e.reason.find("100"), std::string::npos);
  // Non-ASCII is refused even within 100 characters: messageId becomes the Idempotency-Key.
  raw = Valid(hookrelay::v1::TRACK);
  std::string accents;
  for (int i = 0; i < 100; ++i) accents += "\xC3\xA9";  // 100 chars, 200 bytes
  raw.message_id = accents;
  EXPECT_EQ(ErrorOf(std::move(raw)).field, "messageId");
}

// 32,000 bytes pass, 32,001 fail, and the message names the limit.
TEST(NormalizeTest, EventSizeLimit) {
  RawEvent raw = Valid(hookrelay::v1::TRACK);
  raw.json_bytes = kMaxEventBytes;
  Ok(std::move(raw));
  raw = Valid(hookrelay::v1::TRACK);
  raw.json_bytes = kMaxEventBytes + 1;
  const FieldError e = ErrorOf(std::move(raw));
  EXPECT_NE(e.reason.find("32000"), std::string::npos);
}

// receivedAt is server time; no timestamp → timestamp is server time.
TEST(NormalizeTest, TimestampDefaultsToReceivedAt) {
  const NormalizedEvent ev = Ok(Valid(hookrelay::v1::TRACK));
  simdjson::dom::parser p;
  auto doc = Parse(p, ev.json);
  EXPECT_EQ(std::string_view(doc["receivedAt"]), "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(std::string_view(doc["timestamp"]), "2023-11-14T22:13:20.123Z");
  EXPECT_TRUE(doc["originalTimestamp"].error());
}

// timestamp = receivedAt − (sentAt − originalTimestamp): the caller's clock is 1 h fast.
TEST(NormalizeTest, SkewCorrection) {
  RawEvent raw = Valid(hookrelay::v1::TRACK);
  raw.timestamp = kNow + absl::Hours(1) - absl::Seconds(30);  // happened 30 s before sending
  raw.sent_at = kNow + absl::Hours(1);
  const NormalizedEvent ev = Ok(std::move(raw));
  simdjson::dom::parser p;
  auto doc = Parse(p, ev.json);
  EXPECT_EQ(std::string_view(doc["timestamp"]), common::FormatIso8601Millis(kNow - absl::Seconds(30)));
  EXPECT_EQ(std::string_view(doc["originalTimestamp"]),
            common::FormatIso8601Millis(kNow + absl::Hours(1) - absl::Seconds(30)));
  EXPECT_EQ(std::string_view(doc["sentAt"]), common::FormatIso8601Millis(kNow + absl::Hours(1)));
}

// Without sentAt the caller's timestamp is kept as is.
TEST(NormalizeTest, TimestampWithoutSentAt) {
  RawEvent raw = Valid(hookrelay::v1::TRACK);
  raw.timestamp = absl::FromUnixMillis(1354408208276);
  const NormalizedEvent ev = Ok(std::move(raw));
  EXPECT_NE(ev.json.find(R"("timestamp":"2012-12-02T00:30:08.276Z")"), std::string::npos);
  EXPECT_NE(ev.json.find(R"("originalTimestamp":"2012-12-02T00:30:08.276Z")"), std::string::npos);
}

// Free-form maps pass through untouched; context is always present.
TEST(NormalizeTest, MapsPassThroughAndContextAlwaysPresent) {
  RawEvent raw = Valid(hookrelay::v1::GROUP);
  raw.traits = R"({"Company Name":"Acme","seats":12})";
  NormalizedEvent ev = Ok(std::move(raw));
  EXPECT_NE(ev.json.find(R"("traits":{"Company Name":"Acme","seats":12})"), std::string::npos);
  EXPECT_NE(ev.json.find(R"("context":{})"), std::string::npos);
}

// A parse-time problem is reported before other rules.
TEST(NormalizeTest, ParseErrorWins) {
  RawEvent raw = Valid(hookrelay::v1::TRACK);
  raw.parse_error = FieldError{"properties", "properties must be an object"};
  EXPECT_EQ(ErrorOf(std::move(raw)).field, "properties");
}

// SPEC §3 integrations rules.
TEST(IntegrationsTest, Rules) {
  EXPECT_TRUE(WebhooksEnabled({}));
  EXPECT_FALSE(WebhooksEnabled({.all = false}));
  EXPECT_TRUE(WebhooksEnabled({.all = false, .webhooks = true}));
  EXPECT_FALSE(WebhooksEnabled({.all = true, .webhooks = false}));
  EXPECT_FALSE(WebhooksEnabled({.webhooks = false}));
  EXPECT_TRUE(WebhooksEnabled({.all = true}));
}

}  // namespace
}  // namespace hookrelay::collector

namespace hookrelay::collector {
namespace {

// messageId becomes a header: control characters, non-ASCII and edge spaces are refused at the
// door, naming the field; printable ASCII up to 100 characters is accepted.
TEST(CheckMessageIdTest, OnlyPrintableAsciiUpTo100) {
  for (const std::string& bad :
       {std::string("a\0b", 3), std::string("a\rb"), std::string("a\nb"), std::string("a\x04"),
        std::string("a\x7f"), std::string("caf\xc3\xa9"), std::string(" lead"),
        std::string("trail "), std::string(101, 'm')}) {
    const std::optional<FieldError> error = CheckMessageId(bad);
    ASSERT_TRUE(error.has_value()) << bad;
    EXPECT_EQ(error->field, "messageId");
    EXPECT_FALSE(error->reason.empty());
  }
  EXPECT_NE(CheckMessageId(std::string(101, 'm'))->reason.find("at most 100"), std::string::npos);
  for (const std::string& good : {std::string("ajs-next-1700000000-abc"), std::string(100, 'm'),
                                 std::string("a b~!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}")}) {
    EXPECT_FALSE(CheckMessageId(good).has_value()) << good;
  }
}

// userId and the other identifiers: any UTF-8 text without control characters, up to 256
// characters (not bytes).
TEST(CheckIdentifierTest, NoControlCharactersAndAtMost256Characters) {
  for (const std::string& bad : {std::string("u\0", 2), std::string("u\n1"), std::string("\x1b[31m"),
                                std::string("u\x7f"), std::string("u\xc2\x85"),  // U+0085 NEL
                                std::string(257, 'u')}) {
    const std::optional<FieldError> error = CheckIdentifier("userId", bad);
    ASSERT_TRUE(error.has_value()) << bad;
    EXPECT_EQ(error->field, "userId");
  }
  EXPECT_NE(CheckIdentifier("userId", "a\nb")->reason.find("U+000A"), std::string::npos);
  std::string cyrillic;
  for (int i = 0; i < 256; ++i) cyrillic += "\xd0\x96";  // Ж: 512 bytes, 256 characters
  for (const std::string& good : {std::string("user@example.com"), std::string("Zoë Müller"),
                                 std::string(256, 'u'), cyrillic}) {
    EXPECT_FALSE(CheckIdentifier("userId", good).has_value()) << good;
  }
}

// Normalize applies the checks to every identifier field, on both front ends' path.
TEST(NormalizeTest, RefusesControlCharactersInEveryIdentifier) {
  RawEvent bad_message_id = Valid(hookrelay::v1::TRACK);
  bad_message_id.message_id = "id\r\nX-Injected: 1";
  EXPECT_EQ(ErrorOf(std::move(bad_message_id)).field, "messageId");
  RawEvent bad_user = Valid(hookrelay::v1::TRACK);
  bad_user.user_id = "u\n";
  EXPECT_EQ(ErrorOf(std::move(bad_user)).field, "userId");
  RawEvent bad_anonymous = Valid(hookrelay::v1::TRACK);
  bad_anonymous.anonymous_id = std::string("a\0", 2);
  EXPECT_EQ(ErrorOf(std::move(bad_anonymous)).field, "anonymousId");
  RawEvent bad_group = Valid(hookrelay::v1::GROUP);
  bad_group.group_id = std::string(300, 'g');
  EXPECT_EQ(ErrorOf(std::move(bad_group)).field, "groupId");
  RawEvent bad_previous = Valid(hookrelay::v1::ALIAS);
  bad_previous.previous_id = "p\t";
  EXPECT_EQ(ErrorOf(std::move(bad_previous)).field, "previousId");
}

}  // namespace
}  // namespace hookrelay::collector
