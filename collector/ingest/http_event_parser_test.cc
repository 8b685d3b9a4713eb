#include "collector/ingest/http_event_parser.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace hookrelay::collector {
namespace {

absl::StatusOr<ParsedBody> Parse(std::string_view endpoint, std::string body) {
  static HttpEventParser* parser = new HttpEventParser();
  return parser->Parse(endpoint, body);
}

// A single-event endpoint takes its type from the path and reads every known field.
TEST(HttpEventParserTest, SingleEvent) {
  auto r = Parse("track", R"({"userId":"u1","event":"Signed Up","properties":{"plan":"pro","n":3},
      "context":{"ip":"1.2.3.4"},"messageId":"m1","timestamp":"2012-12-02T00:30:08.276Z",
      "writeKey":"wk"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->write_key, "wk");
  ASSERT_EQ(r->events.size(), 1u);
  const RawEvent& e = r->events[0];
  EXPECT_EQ(e.type, hookrelay::v1::TRACK);
  EXPECT_EQ(e.user_id, "u1");
  EXPECT_EQ(e.event, "Signed Up");
  EXPECT_EQ(e.message_id, "m1");
  EXPECT_EQ(e.properties, R"({"plan":"pro","n":3})");
  EXPECT_EQ(e.context, R"({"ip":"1.2.3.4"})");
  EXPECT_EQ(e.timestamp, absl::FromUnixMillis(1354408208276));
  EXPECT_FALSE(e.parse_error.has_value());
}

// Batch-level context and integrations merge into items (item values win); batch sentAt applies
// to items without their own.
TEST(HttpEventParserTest, BatchMerge) {
  auto r = Parse("batch", R"({"batch":[
      {"type":"identify","userId":"u1","context":{"ip":"9.9.9.9"},"integrations":{"Webhooks":false}},
      {"type":"track","userId":"u2","event":"E","sentAt":"2020-01-01T00:00:00Z"}],
    "context":{"ip":"1.1.1.1","library":{"name":"analytics-go"}},
    "integrations":{"All":false,"Webhooks":true},
    "sentAt":"2021-01-01T00:00:00.000Z"})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->events.size(), 2u);
  EXPECT_EQ(r->events[0].context, R"({"ip":"9.9.9.9","library":{"name":"analytics-go"}})");
  EXPECT_EQ(r->events[0].flags.webhooks, false);
  EXPECT_EQ(r->events[0].flags.all, false);
  EXPECT_EQ(r->events[0].integrations, R"({"Webhooks":false,"All":false})");
  EXPECT_EQ(r->events[0].sent_at, absl::FromUnixSeconds(1609459200));
  EXPECT_EQ(r->events[1].context, R"({"ip":"1.1.1.1","library":{"name":"analytics-go"}})");
  EXPECT_EQ(r->events[1].flags.webhooks, true);
  EXPECT_EQ(r->events[1].sent_at, absl::FromUnixSeconds(1577836800));
}

// Per-item problems stay with the item; the others parse.
TEST(HttpEventParserTest, BadItemsAreMarked) {
  auto r = Parse("batch", R"({"batch":[
      {"type":"track","userId":{"x":1},"event":"E"},
      7,
      {"type":"track","userId":"u","event":"E","timestamp":"not a time"},
      {"type":"track","userId":"u","event":"E","properties":[1]},
      {"type":"track","userId":42,"event":"E"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->events.size(), 5u);
  EXPECT_EQ(r->events[0].parse_error->field, "userId");
  EXPECT_EQ(r->events[1].parse_error->field, "event");
  EXPECT_EQ(r->events[2].parse_error->field, "timestamp");
  EXPECT_EQ(r->events[3].parse_error->field, "properties");
  EXPECT_FALSE(r->events[4].parse_error.has_value());
  EXPECT_EQ(r->events[4].user_id, "42");
}

// Malformed bodies are request-level INVALID_ARGUMENT errors with a reason.
TEST(HttpEventParserTest, MalformedBodies) {
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  struct Case {
    const char* name;
    std::string body;
    const char* expect;
  } cases[] = {
      {"truncated", R"({"userId":"u","event":)", "not valid JSON"},
      {"not an object", R"([1,2])", "must be a JSON object"},
      {"invalid utf8", "{\"userId\":\"\xFF\xFE\",\"event\":\"E\"}", "UTF-8"},
      {"huge number", R"({"userId":"u","event":"E","properties":{"n":1e999}})", "out of range"},
      {"huge integer", R"({"userId":"u","event":"E","properties":{"n":123456789012345678901234567890}})", ""},
      {"deep nesting", absl::StrCat(R"({"userId":"u","event":"E","properties":{"a":)", deep, "}}"), "nested deeper"},
      {"empty", "", "not valid JSON"},
      {"batch missing", R"({"events":[]})", "batch"},
  };
  for (const Case& c : cases) {
    auto r = Parse(std::string_view(c.name) == "batch missing" ? "batch" : "track", c.body);
    if (std::string_view(c.name) == "huge integer") {
      // Integers past 64 bits are read as doubles by simdjson or refused; either way no crash.
      if (!r.ok()) {
        EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
      }
      continue;
    }
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(std::string(r.status().message()).find(c.expect), std::string::npos)
        << c.name << ": " << r.status();
  }
}

std::string EventOfSize(size_t n) {
  // {"userId":"u","event":"E","properties":{"p":"xxx"}} padded to exactly n bytes.
  const std::string head = R"({"userId":"u","event":"E","properties":{"p":")";
  const std::string tail = R"("}})";
  return head + std::string(n - head.size() - tail.size(), 'x') + tail;
}

// Exactly 32,000 bytes is accepted; 32,001 refuses the whole request naming the limit.
TEST(HttpEventParserTest, EventSizeBoundary) {
  auto ok = Parse("track", EventOfSize(kMaxEventBytes));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->events[0].json_bytes, kMaxEventBytes);
  auto too_big = Parse("track", EventOfSize(kMaxEventBytes + 1));
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(too_big.status().message()).find("32000"), std::string::npos);

  auto batch_big = Parse("batch", absl::StrCat(R"({"batch":[)", EventOfSize(kMaxEventBytes + 1), "]}"));
  ASSERT_FALSE(batch_big.ok());
  EXPECT_NE(std::string(batch_big.status().message()).find("batch[0]"), std::string::npos);
}

// Whitespace does not count toward the event size (compact JSON is measured).
TEST(HttpEventParserTest, SizeIsCompactJson) {
  std::string padded = EventOfSize(kMaxEventBytes);
  padded.insert(1, 5000, ' ');
  auto r = Parse("track", padded);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->events[0].json_bytes, kMaxEventBytes);
}

// The size is the item's own compact JSON exactly, whatever it holds: nested values, escapes,
// UTF-8, a duplicated object key (the last one is kept, both are counted), batch defaults merged
// into context and integrations (not counted: they are not the item's). Each item below is
// written in the form the writer produces, so its own length is the expected size.
TEST(HttpEventParserTest, SizeCountsEveryFieldOfTheItemExactly) {
  const std::string rich =
      R"({"type":"track","event":"Order \"Completed\"","userId":"u1",)"
      R"("properties":{"a":[1,2,{"b":"Ã©"}],"c":null,"d":true,"e":1.5},)"
      R"("context":{"ip":"1.2.3.4"},"integrations":{"All":true},"traits":{"x":"line\nbreak"},)"
      R"("messageId":"m1","timestamp":"2026-11-26T13:00:00Z","channel":"server"})";
  const std::string duplicated =
      R"({"type":"track","event":"E","userId":"u","properties":{"a":1},)"
      R"("properties":{"bb":"a longer value"}})";
  const std::string plain = R"({"type":"identify","userId":"u2","traits":{"plan":"pro"}})";
  for (const std::string* item : {&rich, &duplicated, &plain}) {
    auto r = Parse("batch", absl::StrCat(R"({"batch":[)", *item, "]}"));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->events.size(), 1u);
    EXPECT_EQ(r->events[0].json_bytes, item->size()) << *item;
  }
  auto merged = Parse("batch", absl::StrCat(R"({"batch":[)", rich, ",", plain,
                                            R"(],"context":{"library":{"name":"sdk"}},)"
                                            R"("integrations":{"Webhooks":true}})"));
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->events.size(), 2u);
  EXPECT_EQ(merged->events[0].json_bytes, rich.size());
  EXPECT_EQ(merged->events[1].json_bytes, plain.size());
  EXPECT_EQ(merged->events[0].properties, R"({"a":[1,2,{"b":"Ã©"}],"c":null,"d":true,"e":1.5})");
}

// 2,500 events pass; 2,501 are refused naming the limit.
TEST(HttpEventParserTest, BatchCountBoundary) {
  auto make = [](size_t n) {
    std::string body = R"({"batch":[)";
    for (size_t i = 0; i < n; ++i) {
      if (i) body += ',';
      body += R"({"type":"track","userId":"u","event":"E"})";
    }
    return body + "]}";
  };
  auto ok = Parse("batch", make(kMaxBatchEvents));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->events.size(), kMaxBatchEvents);
  auto bad = Parse("batch", make(kMaxBatchEvents + 1));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(bad.status().message()).find("2500"), std::string::npos);
}

// Unknown batch item types are kept for the error message.
TEST(HttpEventParserTest, UnknownType) {
  auto r = Parse("batch", R"({"batch":[{"type":"purchase","userId":"u"},{"userId":"u"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->events[0].unknown_type, "purchase");
  EXPECT_EQ(r->events[1].type, hookrelay::v1::EVENT_TYPE_UNSPECIFIED);
  EXPECT_TRUE(r->events[1].unknown_type.empty());
}

}  // namespace
}  // namespace hookrelay::collector
