#include "deliverer/renderer.h"

#include <simdjson.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hookrelay::deliverer {
namespace {

using ::testing::HasSubstr;

// Renders `event_json`, failing the test on error.
std::string Render(std::string_view event_json) {
  absl::StatusOr<std::string> body = RenderWebhookBody(event_json);
  EXPECT_TRUE(body.ok()) << body.status() << "\ninput: " << event_json;
  return body.ok() ? *body : std::string();
}

// The rendered body parses as one JSON object.
void ExpectValidJson(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  ASSERT_EQ(parser.parse(json.data(), json.size(), true).get(e), simdjson::SUCCESS) << json;
  EXPECT_TRUE(e.is_object()) << json;
}

absl::Status RenderError(std::string_view event_json) {
  absl::StatusOr<std::string> body = RenderWebhookBody(event_json);
  EXPECT_FALSE(body.ok()) << "rendered: " << *body;
  return body.status();
}

// A track body: common fields, event and properties; integrations and the other timestamps are
// left out.
TEST(RendererTest, Track) {
  const std::string body = Render(
      R"({"type":"track","messageId":"m-1","userId":"019mr8mf4r","event":"Item Purchased",)"
      R"("properties":{"name":"Leap to Conclusions Mat","revenue":14.99},)"
      R"("context":{"ip":"8.8.8.8"},"integrations":{"Webhooks":true},)"
      R"("timestamp":"2012-12-02T00:30:08.276Z","originalTimestamp":"2012-12-02T00:30:08.276Z",)"
      R"("sentAt":"2012-12-02T00:30:09.000Z","receivedAt":"2012-12-02T00:30:09.100Z"})");
  EXPECT_EQ(body,
            R"({"version":1,"type":"track","userId":"019mr8mf4r","messageId":"m-1",)"
            R"("event":"Item Purchased",)"
            R"("properties":{"name":"Leap to Conclusions Mat","revenue":14.99},)"
            R"("timestamp":"2012-12-02T00:30:08.276Z","context":{"ip":"8.8.8.8"}})");
  ExpectValidJson(body);
}

// A page body: the recognised and custom properties as given, name and category.
TEST(RendererTest, Page) {
  const std::string body = Render(
      R"({"type":"page","messageId":"m-2","userId":"u-2","anonymousId":"anon-2",)"
      R"("name":"Pricing","category":"Docs","properties":{"path":"/pricing",)"
      R"("referrer":"https://www.google.com/","title":"Pricing","url":"https://x.io/pricing",)"
      R"("plan":"team"},"context":{},"timestamp":"2012-12-02T00:30:08.276Z",)"
      R"("receivedAt":"2012-12-02T00:30:08.300Z"})");
  EXPECT_EQ(body,
            R"({"version":1,"type":"page","userId":"u-2","anonymousId":"anon-2",)"
            R"("messageId":"m-2","name":"Pricing","category":"Docs","properties":{)"
            R"("path":"/pricing","referrer":"https://www.google.com/","title":"Pricing",)"
            R"("url":"https://x.io/pricing","plan":"team"},)"
            R"("timestamp":"2012-12-02T00:30:08.276Z","context":{}})");
  ExpectValidJson(body);
}

// A screen body: name and properties; device, os and app pass through in context.
TEST(RendererTest, Screen) {
  const std::string body = Render(
      R"({"type":"screen","messageId":"m-3","userId":"u-3","name":"Home",)"
      R"("properties":{"variation":"blue"},"context":{"device":{"model":"iPhone15,2",)"
      R"("type":"ios"},"os":{"name":"iOS","version":"17.1"},"app":{"build":"3.0.1.545",)"
      R"("name":"Kiosk","version":"3.0.1"}},"timestamp":"2012-12-02T00:30:08.276Z"})");
  EXPECT_EQ(body,
            R"({"version":1,"type":"screen","userId":"u-3","messageId":"m-3","name":"Home",)"
            R"("properties":{"variation":"blue"},"timestamp":"2012-12-02T00:30:08.276Z",)"
            R"("context":{"device":{"model":"iPhone15,2","type":"ios"},)"
            R"("os":{"name":"iOS","version":"17.1"},)"
            R"("app":{"build":"3.0.1.545","name":"Kiosk","version":"3.0.1"}}})");
  ExpectValidJson(body);
}

// An identify body carries the free-form traits.
TEST(RendererTest, Identify) {
  const std::string body = Render(
      R"({"type":"identify","messageId":"m-4","userId":"u-4",)"
      R"("traits":{"email":"pgibbons@initech.com","name":"Peter Gibbons","logins":5},)"
      R"("context":{"ip":"1.2.3.4"},"timestamp":"2012-12-02T00:30:08.276Z"})");
  EXPECT_EQ(body,
            R"({"version":1,"type":"identify","userId":"u-4","messageId":"m-4",)"
            R"("traits":{"email":"pgibbons@initech.com","name":"Peter Gibbons","logins":5},)"
            R"("timestamp":"2012-12-02T00:30:08.276Z","context":{"ip":"1.2.3.4"}})");
  ExpectValidJson(body);
}

// A group body: groupId and traits whose keys contain spaces.
TEST(RendererTest, GroupTraitKeysWithSpaces) {
  const std::string body = Render(
      R"({"type":"group","messageId":"m-5","userId":"u-5","groupId":"0e8c78ea9d97a7b8185e8632",)"
      R"("traits":{"name":"Initech","industry":"Technology","employees":329,)"
      R"("Plan Tier":"enterprise","Total Billed":830.5},"context":{},)"
      R"("timestamp":"2012-12-02T00:30:08.276Z"})");
  EXPECT_EQ(body,
            R"({"version":1,"type":"group","userId":"u-5","messageId":"m-5",)"
            R"("groupId":"0e8c78ea9d97a7b8185e8632","traits":{"name":"Initech",)"
            R"("industry":"Technology","employees":329,"Plan Tier":"enterprise",)"
            R"("Total Billed":830.5},"timestamp":"2012-12-02T00:30:08.276Z","context":{}})");
  ExpectValidJson(body);
}

// An alias body carries previousId/userId and the same values under "Previous ID"/"User ID".
TEST(RendererTest, AliasCarriesSpacedKeys) {
  const std::string body = Render(
      R"({"type":"alias","messageId":"m-6","userId":"507f191e81","previousId":"39239-239239",)"
      R"("context":{},"timestamp":"2012-12-02T00:30:08.276Z"})");
  EXPECT_EQ(body,
            R"({"version":1,"type":"alias","userId":"507f191e81","messageId":"m-6",)"
            R"("previousId":"39239-239239","Previous ID":"39239-239239",)"
            R"("User ID":"507f191e81","timestamp":"2012-12-02T00:30:08.276Z","context":{}})");
  ExpectValidJson(body);
}

// A delete body has only type, userId and timestamp: no version, messageId or context.
TEST(RendererTest, DeleteHasNoVersion) {
  const std::string body = Render(
      R"({"type":"delete","messageId":"m-7","userId":"u-7","context":{"ip":"1.2.3.4"},)"
      R"("properties":{"x":1},"timestamp":"2012-12-02T00:30:08.276Z"})");
  EXPECT_EQ(body, R"({"type":"delete","userId":"u-7","timestamp":"2012-12-02T00:30:08.276Z"})");
  ExpectValidJson(body);
}

// Absent, null and empty optional fields are left out; a missing context is written as {}.
TEST(RendererTest, MissingOptionalFieldsOmitted) {
  EXPECT_EQ(Render(R"({"type":"identify","messageId":"m","anonymousId":"a",)"
                   R"("timestamp":"2012-12-02T00:30:08.276Z"})"),
            R"({"version":1,"type":"identify","anonymousId":"a","messageId":"m",)"
            R"("timestamp":"2012-12-02T00:30:08.276Z","context":{}})");
  EXPECT_EQ(Render(R"({"type":"page","messageId":"m","userId":"u","name":"","category":null,)"
                   R"("properties":null,"context":{},"timestamp":"2012-12-02T00:30:08.276Z"})"),
            R"({"version":1,"type":"page","userId":"u","messageId":"m",)"
            R"("timestamp":"2012-12-02T00:30:08.276Z","context":{}})");
  EXPECT_EQ(Render(R"({"type":"track","messageId":"m","userId":"u","event":"E","context":{},)"
                   R"("timestamp":"2012-12-02T00:30:08.276Z"})"),
            R"({"version":1,"type":"track","userId":"u","messageId":"m","event":"E",)"
            R"("timestamp":"2012-12-02T00:30:08.276Z","context":{}})");
  EXPECT_EQ(Render(R"({"type":"group","messageId":"m","userId":"u","groupId":"g","context":{},)"
                   R"("timestamp":"2012-12-02T00:30:08.276Z"})"),
            R"({"version":1,"type":"group","userId":"u","messageId":"m","groupId":"g",)"
            R"("timestamp":"2012-12-02T00:30:08.276Z","context":{}})");
}

// Numbers stay numbers (integers, fractions, exponents, 64-bit extremes), strings that look like
// numbers stay strings, and arrays, booleans and null are kept.
TEST(RendererTest, NumbersStayNumbers) {
  const std::string props =
      R"({"price":14.99,"qty":3,"neg":-7,"tiny":1e-07,"huge":1e+300,)"
      R"("u64":18446744073709551615,"i64":-9223372036854775808,"asText":"14.99",)"
      R"("list":[1,2.5,"3",true,null],"ok":false,"none":null})";
  const std::string body =
      Render(R"({"type":"track","messageId":"m","userId":"u","event":"E","properties":)" + props +
             R"(,"context":{},"timestamp":"2012-12-02T00:30:08.276Z"})");
  EXPECT_THAT(body, HasSubstr(R"("properties":)" + props + ","));
}

// Non-ASCII text is passed through as UTF-8 in values and keys; control characters stay escaped.
TEST(RendererTest, UnicodePreserved) {
  const std::string body = Render(
      "{\"type\":\"track\",\"messageId\":\"m\",\"userId\":\"\xE7\x94\xA8\xE6\x88\xB7\","
      "\"event\":\"Caf\xC3\xA9 \xE2\x98\x95\",\"properties\":{\"\xE5\x90\x8D\xE5\x89\x8D\":"
      "\"\xF0\x9F\x98\x80\",\"ctl\":\"a\\nb\\u0001\\\"\"},\"context\":{\"locale\":\"fr-FR\"},"
      "\"timestamp\":\"2012-12-02T00:30:08.276Z\"}");
  EXPECT_EQ(body,
            "{\"version\":1,\"type\":\"track\",\"userId\":\"\xE7\x94\xA8\xE6\x88\xB7\","
            "\"messageId\":\"m\",\"event\":\"Caf\xC3\xA9 \xE2\x98\x95\",\"properties\":{"
            "\"\xE5\x90\x8D\xE5\x89\x8D\":\"\xF0\x9F\x98\x80\",\"ctl\":\"a\\nb\\u0001\\\"\"},"
            "\"timestamp\":\"2012-12-02T00:30:08.276Z\",\"context\":{\"locale\":\"fr-FR\"}}");
  ExpectValidJson(body);
}

// Escaped non-ASCII input (\u00e9, surrogate pairs) comes out as the UTF-8 it stands for.
TEST(RendererTest, UnicodeEscapesDecoded) {
  const std::string body = Render(
      R"({"type":"track","messageId":"m","userId":"u","event":"Caf\u00e9",)"
      R"("properties":{"e":"\ud83d\ude00"},"context":{},"timestamp":"2012-12-02T00:30:08.276Z"})");
  EXPECT_THAT(body, HasSubstr("\"event\":\"Caf\xC3\xA9\""));
  EXPECT_THAT(body, HasSubstr("\"properties\":{\"e\":\"\xF0\x9F\x98\x80\"}"));
}

// Free-form maps keep their key order, including duplicated and nested keys.
TEST(RendererTest, KeyOrderKept) {
  const std::string traits = R"({"z":1,"a":2,"m":{"y":1,"b":2},"a":3})";
  const std::string body =
      Render(R"({"type":"identify","messageId":"m","userId":"u","traits":)" + traits +
             R"(,"context":{"z":0,"a":0},"timestamp":"2012-12-02T00:30:08.276Z"})");
  EXPECT_THAT(body, HasSubstr(R"("traits":)" + traits + ","));
  EXPECT_THAT(body, HasSubstr(R"("context":{"z":0,"a":0}})"));
}

// A timestamp in another ISO 8601 form is written as UTC with milliseconds.
TEST(RendererTest, TimestampNormalised) {
  EXPECT_EQ(Render(R"({"type":"delete","userId":"u","timestamp":"2012-12-02T01:30:08.2+01:00"})"),
            R"({"type":"delete","userId":"u","timestamp":"2012-12-02T00:30:08.200Z"})");
}

// Whitespace around and inside the input does not reach the body.
TEST(RendererTest, OutputIsCompact) {
  EXPECT_EQ(Render(" {\n \"type\" : \"alias\", \"messageId\":\"m\", \"userId\":\"u\",\n"
                   " \"previousId\":\"p\", \"context\" : { \"a\" : [ 1, 2 ] },\n"
                   " \"timestamp\":\"2012-12-02T00:30:08.276Z\" }\n"),
            R"({"version":1,"type":"alias","userId":"u","messageId":"m","previousId":"p",)"
            R"("Previous ID":"p","User ID":"u","timestamp":"2012-12-02T00:30:08.276Z",)"
            R"("context":{"a":[1,2]}})");
}

// Malformed input is InvalidArgument, and the message names the problem.
TEST(RendererTest, MalformedInputIsInvalidArgument) {
  struct Case {
    std::string_view json;
    std::string_view message;
  };
  const Case cases[] = {
      {"", "not valid JSON"},
      {R"({"type":"track")", "not valid JSON"},
      {"{\"type\":\"track\",\"event\":\"\xFF\"}", "not valid JSON"},
      {R"(["track"])", "not a JSON object"},
      {R"({"messageId":"m","userId":"u","timestamp":"2012-12-02T00:30:08.276Z"})",
       "\"type\" is required"},
      {R"({"type":"purchase","messageId":"m","userId":"u"})", "unknown type \"purchase\""},
      {R"({"type":7})", "\"type\" must be a string"},
      {R"({"type":"track","userId":42})", "\"userId\" must be a string"},
      {R"({"type":"track","properties":[1]})", "\"properties\" must be an object"},
      {R"({"type":"identify","traits":"x"})", "\"traits\" must be an object"},
      {R"({"type":"identify","context":5})", "\"context\" must be an object"},
      {R"({"type":"track","messageId":"m","event":"E","timestamp":"2012-12-02T00:30:08.276Z"})",
       "\"userId\" or \"anonymousId\" is required for track"},
      {R"({"type":"track","messageId":"m","userId":"u","timestamp":"2012-12-02T00:30:08.276Z"})",
       "\"event\" is required for track"},
      {R"({"type":"group","messageId":"m","userId":"u","timestamp":"2012-12-02T00:30:08.276Z"})",
       "\"groupId\" is required for group"},
      {R"({"type":"alias","messageId":"m","userId":"u","timestamp":"2012-12-02T00:30:08.276Z"})",
       "\"previousId\" is required for alias"},
      {R"({"type":"alias","messageId":"m","anonymousId":"a","previousId":"p"})",
       "\"userId\" is required for alias"},
      {R"({"type":"delete","timestamp":"2012-12-02T00:30:08.276Z"})",
       "\"userId\" is required for delete"},
      {R"({"type":"screen","userId":"u","timestamp":"2012-12-02T00:30:08.276Z"})",
       "\"messageId\" is required for screen"},
      {R"({"type":"page","messageId":"m","userId":"u"})", "\"timestamp\" is required for page"},
      {R"({"type":"page","messageId":"m","userId":"u","timestamp":"yesterday"})",
       "\"timestamp\" is not an ISO 8601 date-time"},
  };
  for (const Case& c : cases) {
    const absl::Status status = RenderError(c.json);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(std::string(status.message()), HasSubstr(std::string(c.message))) << c.json;
  }
}

// One renderer serves many events: a large body does not leak into the next, and an error
// leaves the output empty.
TEST(RendererTest, RendererIsReusable) {
  WebhookRenderer renderer;
  std::string body;
  const std::string big_props = "{\"blob\":\"" + std::string(10000, 'x') + "\"}";
  ASSERT_TRUE(renderer
                  .Render(R"({"type":"track","messageId":"m","userId":"u","event":"E",)"
                          R"("properties":)" + big_props +
                              R"(,"timestamp":"2012-12-02T00:30:08.276Z"})",
                          &body)
                  .ok());
  EXPECT_THAT(body, HasSubstr(big_props));
  ASSERT_TRUE(
      renderer.Render(R"({"type":"delete","userId":"u","timestamp":"2012-12-02T00:30:08.276Z"})",
                      &body)
          .ok());
  EXPECT_EQ(body, R"({"type":"delete","userId":"u","timestamp":"2012-12-02T00:30:08.276Z"})");
  EXPECT_FALSE(renderer.Render("{", &body).ok());
  EXPECT_EQ(body, "");
}

}  // namespace
}  // namespace hookrelay::deliverer
