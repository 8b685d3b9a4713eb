// End-to-end tests of the collector's HTTP tracking API (SPEC §2.1, §3, §4): an in-process
// collector::Server on port 0 with a manual clock, a blocking HTTP/1.1 client, and the job store
// read back after Shutdown.
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/job.pb.h"
#include "tests/collector_test_util.h"
#include "tests/test_engines.h"

namespace hookrelay::test {
namespace {

using ::hookrelay::v1::Job;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

// Jobs grouped by messageId.
std::map<std::string, std::vector<Job>> ByMessageId(const std::vector<Job>& jobs) {
  std::map<std::string, std::vector<Job>> out;
  for (const Job& job : jobs) out[job.message_id()].push_back(job);
  return out;
}

std::vector<std::string> Destinations(const std::vector<Job>& jobs) {
  std::vector<std::string> out;
  for (const Job& job : jobs) out.push_back(job.destination_id());
  return out;
}

// A compact track event of exactly `size` bytes (its own JSON, as the collector measures it).
std::string TrackEventOfSize(size_t size, const std::string& message_id) {
  const std::string head = absl::StrCat(R"({"type":"track","userId":"u","event":"E","messageId":")",
                                        message_id, R"(","properties":{"pad":")");
  const std::string tail = R"("}})";
  const size_t fixed = head.size() + tail.size();
  if (size < fixed) abort();
  return absl::StrCat(head, std::string(size - fixed, 'x'), tail);
}

// A batch of one small event padded with whitespace (inside the JSON) to exactly `size` bytes.
std::string BatchBodyOfSize(size_t size, const std::string& message_id) {
  const std::string head = absl::StrCat(
      R"({"batch":[{"type":"track","userId":"u","event":"E","messageId":")", message_id, R"("}])");
  if (size < head.size() + 1) abort();
  return absl::StrCat(head, std::string(size - head.size() - 1, ' '), "}");
}

std::string SmallTrack(const std::string& message_id) {
  return absl::StrCat(R"({"type":"track","userId":"u","event":"E","messageId":")", message_id,
                      R"("})");
}

// On both job-store engines (tests/test_engines.h).
class CollectorHttpTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
    ASSERT_TRUE(engine.ok()) << engine.status();
    collector_ = std::make_unique<InProcessCollector>("collector_http_test", TestConfigYaml(), *engine);
    ASSERT_TRUE(collector_->Start().ok());
  }

  // POSTs on a new connection; a transport error fails the test and returns status 0.
  HttpResponse Post(std::string_view target, std::string_view body,
                    std::string_view write_key = kWebKey, HttpHeaders extra = {}) {
    absl::StatusOr<HttpResponse> r =
        HttpPost(collector_->http_port(), target, body, write_key, std::move(extra));
    EXPECT_TRUE(r.ok()) << target << ": " << r.status();
    return r.ok() ? *std::move(r) : HttpResponse{};
  }

  std::vector<Job> StopAndLeaseAll() {
    absl::StatusOr<std::vector<Job>> jobs = collector_->StopAndLeaseAll();
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    return jobs.ok() ? *std::move(jobs) : std::vector<Job>{};
  }

  std::unique_ptr<InProcessCollector> collector_;
};

// A valid traceparent (and its tracestate) is kept with every job of the request, a batch's and
// a fan-out's included; an invalid one is ignored and the events are still stored.
TEST_P(CollectorHttpTest, TraceparentHeaderIsKeptWithEachJob) {
  constexpr char kParent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const HttpResponse traced =
      Post("/v1/track", SmallTrack("traced"), kWebKey,
           {{"traceparent", kParent}, {"tracestate", "rojo=00f067aa0ba902b7"}});
  EXPECT_EQ(traced.status, 200) << traced.body;
  const HttpResponse batch = Post(
      "/v1/batch", absl::StrCat(R"({"batch":[)", SmallTrack("fan-1"), ",", SmallTrack("fan-2"), "]}"),
      kFanKey, {{"Traceparent", kParent}});
  EXPECT_EQ(batch.status, 200) << batch.body;
  // Uppercase hex is invalid (W3C): ignored, never an ingest error.
  const HttpResponse invalid = Post(
      "/v1/track", SmallTrack("invalid"), kWebKey,
      {{"traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"},
       {"tracestate", "rojo=1"}});
  EXPECT_EQ(invalid.status, 200) << invalid.body;
  EXPECT_EQ(Post("/v1/track", SmallTrack("plain")).status, 200);

  const auto jobs = ByMessageId(StopAndLeaseAll());
  ASSERT_THAT(jobs.at("traced"), SizeIs(1));
  EXPECT_EQ(jobs.at("traced")[0].traceparent(), kParent);
  EXPECT_EQ(jobs.at("traced")[0].tracestate(), "rojo=00f067aa0ba902b7");
  for (const char* id : {"fan-1", "fan-2"}) {
    ASSERT_THAT(jobs.at(id), SizeIs(2)) << id;
    for (const Job& job : jobs.at(id)) {
      EXPECT_EQ(job.traceparent(), kParent) << id;
      EXPECT_EQ(job.tracestate(), "") << id;
    }
  }
  ASSERT_THAT(jobs.at("invalid"), SizeIs(1));
  EXPECT_EQ(jobs.at("invalid")[0].traceparent(), "");
  EXPECT_EQ(jobs.at("invalid")[0].tracestate(), "");
  ASSERT_THAT(jobs.at("plain"), SizeIs(1));
  EXPECT_EQ(jobs.at("plain")[0].traceparent(), "");
}

// A browser's CORS preflight for a request with trace context headers is allowed.
TEST_P(CollectorHttpTest, PreflightAllowsTraceContextHeaders) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(collector_->http_port());
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<HttpResponse> r =
      (*c)->Request("OPTIONS", "/v1/track", "",
                    {{"Origin", "https://shop.example"},
                     {"Access-Control-Request-Method", "POST"},
                     {"Access-Control-Request-Headers", "content-type,traceparent,tracestate"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 204);
  EXPECT_THAT(r->Header("Access-Control-Allow-Headers"),
              AllOf(HasSubstr("Content-Type"), HasSubstr("traceparent"), HasSubstr("tracestate")));
}

// Every endpoint accepts Basic auth and a body writeKey, storing one job of the right type.
TEST_P(CollectorHttpTest, EveryEndpointAcceptsBasicAuthAndBodyWriteKey) {
  const std::vector<std::pair<std::string, std::string>> endpoints = {
      {"track", R"("userId":"u1","event":"Signed Up")"},
      {"identify", R"("userId":"u1","traits":{"plan":"pro"})"},
      {"page", R"("anonymousId":"a1","name":"Home")"},
      {"screen", R"("userId":"u1","name":"Main")"},
      {"group", R"("userId":"u1","groupId":"g1")"},
      {"alias", R"("userId":"u1","previousId":"a1")"},
  };
  for (const auto& [endpoint, fields] : endpoints) {
    const HttpResponse basic = Post(absl::StrCat("/v1/", endpoint),
                                    absl::StrCat("{", fields, R"(,"messageId":"basic-)", endpoint, R"("})"));
    EXPECT_EQ(basic.status, 200) << endpoint << ": " << basic.body;
    EXPECT_EQ(basic.body, R"({"success":true})");
    EXPECT_EQ(basic.Header("Content-Type"), "application/json");
    const HttpResponse body_key =
        Post(absl::StrCat("/v1/", endpoint),
             absl::StrCat(R"({"writeKey":")", kWebKey, R"(",)", fields, R"(,"messageId":"body-)",
                          endpoint, R"("})"),
             /*write_key=*/"");
    EXPECT_EQ(body_key.status, 200) << endpoint << ": " << body_key.body;
    EXPECT_EQ(body_key.body, R"({"success":true})");
  }
  const std::string batch = R"({"batch":[{"type":"track","userId":"u1","event":"B","messageId":"basic-batch"}]})";
  EXPECT_EQ(Post("/v1/batch", batch).status, 200);
  const std::string batch_key = absl::StrCat(
      R"({"writeKey":")", kWebKey,
      R"(","batch":[{"type":"identify","userId":"u1","messageId":"body-batch"}]})");
  EXPECT_EQ(Post("/v1/batch", batch_key, "").status, 200);

  const auto jobs = ByMessageId(StopAndLeaseAll());
  ASSERT_THAT(jobs, SizeIs(14));
  for (const auto& [endpoint, fields] : endpoints) {
    for (const char* auth : {"basic-", "body-"}) {
      const std::string id = absl::StrCat(auth, endpoint);
      ASSERT_THAT(jobs.at(id), SizeIs(1)) << id;
      const Job& job = jobs.at(id)[0];
      EXPECT_EQ(job.source_id(), "web");
      EXPECT_EQ(job.destination_id(), "hook-web");
      EXPECT_EQ(JsonStr(job.event_json(), "/type"), endpoint);
      EXPECT_EQ(JsonStr(job.event_json(), "/messageId"), id);
      // The write key is never part of the stored event.
      EXPECT_THAT(job.event_json(), Not(HasSubstr(kWebKey)));
    }
  }
  EXPECT_EQ(jobs.at("basic-batch")[0].type(), hookrelay::v1::TRACK);
  EXPECT_EQ(jobs.at("body-batch")[0].type(), hookrelay::v1::IDENTIFY);
  EXPECT_EQ(jobs.at("basic-alias")[0].type(), hookrelay::v1::ALIAS);
  EXPECT_EQ(JsonStr(jobs.at("basic-identify")[0].event_json(), "/traits/plan"), "pro");
}

// An unknown or missing write key gets 401 with a JSON error body, and nothing is stored.
TEST_P(CollectorHttpTest, UnknownOrMissingWriteKeyIs401) {
  const std::string event = R"({"userId":"u","event":"E"})";
  struct Case {
    const char* name;
    std::string body;
    std::string key;
    HttpHeaders extra;
  };
  const std::vector<Case> cases = {
      {"unknown basic", event, "wk_nope", {}},
      {"unknown body key", R"({"writeKey":"wk_nope","userId":"u","event":"E"})", "", {}},
      {"missing", event, "", {}},
      {"empty basic user", event, "", {{"Authorization", BasicAuth("")}}},
      {"malformed basic", event, "", {{"Authorization", "Basic !!!not-base64"}}},
      {"batch unknown", R"({"batch":[{"type":"track","userId":"u","event":"E"}]})", "wk_nope", {}},
  };
  for (const Case& c : cases) {
    const char* target = absl::StartsWith(c.body, R"({"batch")") ? "/v1/batch" : "/v1/track";
    const HttpResponse r = Post(target, c.body, c.key, c.extra);
    EXPECT_EQ(r.status, 401) << c.name << ": " << r.body;
    EXPECT_TRUE(IsJsonError(r.body)) << c.name << ": " << r.body;
    EXPECT_THAT(r.Header("WWW-Authenticate"), HasSubstr("Basic")) << c.name;
    EXPECT_THAT(r.body, Not(HasSubstr("wk_nope"))) << c.name;
  }
  EXPECT_THAT(JsonStr(Post("/v1/track", event, "").body, "/error"), HasSubstr("missing"));
  EXPECT_THAT(JsonStr(Post("/v1/track", event, "wk_nope").body, "/error"), HasSubstr("unknown"));
  EXPECT_THAT(StopAndLeaseAll(), IsEmpty());
}

// Each single-event validation rule answers 400 naming its field; nothing is stored.
TEST_P(CollectorHttpTest, SingleEventViolationIs400NamingTheField) {
  const std::string id101(101, 'm');
  struct Case {
    const char* endpoint;
    std::string body;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"track", R"({"event":"E"})", "userId"},
      {"identify", R"({"traits":{"a":1}})", "userId"},
      {"page", R"({})", "userId"},
      {"screen", R"({"name":"S"})", "userId"},
      {"group", R"({"groupId":"g"})", "userId"},
      {"group", R"({"userId":"u"})", "groupId"},
      {"track", R"({"userId":"u"})", "event"},
      {"track", R"({"userId":"u","event":""})", "event"},
      {"alias", R"({"previousId":"p"})", "userId"},
      {"alias", R"({"anonymousId":"a","previousId":"p"})", "userId"},
      {"alias", R"({"userId":"u"})", "previousId"},
      {"track", absl::StrCat(R"({"userId":"u","event":"E","messageId":")", id101, R"("})"), "messageId"},
      {"track", R"({"userId":"u","event":"E","messageId":7.5})", "messageId"},
      {"track", R"({"userId":{"id":1},"event":"E"})", "userId"},
      {"track", R"({"userId":"u","event":["E"]})", "event"},
      {"track", R"({"userId":"u","event":"E","timestamp":"yesterday"})", "timestamp"},
      {"track", R"({"userId":"u","event":"E","sentAt":5})", "sentAt"},
      {"track", R"({"userId":"u","event":"E","properties":[1,2]})", "properties"},
      {"identify", R"({"userId":"u","traits":"vip"})", "traits"},
      {"track", R"({"userId":"u","event":"E","context":1})", "context"},
      {"track", R"({"userId":"u","event":"E","integrations":[]})", "integrations"},
  };
  for (const Case& c : cases) {
    const HttpResponse r = Post(absl::StrCat("/v1/", c.endpoint), c.body);
    EXPECT_EQ(r.status, 400) << c.endpoint << " " << c.body << ": " << r.body;
    EXPECT_TRUE(IsJsonError(r.body)) << r.body;
    EXPECT_EQ(JsonStr(r.body, "/field"), c.field) << c.endpoint << " " << c.body << ": " << r.body;
  }
  // messageId becomes the Idempotency-Key header: control characters and non-ASCII are refused
  // (JSON escapes decode to the raw bytes first); so are control characters in identifiers.
  const std::vector<Case> header_cases = {
      {"track", R"({"userId":"u","event":"E","messageId":"a\u0000b"})", "messageId"},
      {"track", R"({"userId":"u","event":"E","messageId":"a\r\nX-Evil: 1"})", "messageId"},
      {"track", R"({"userId":"u","event":"E","messageId":"a\u0004"})", "messageId"},
      {"track", R"({"userId":"u","event":"E","messageId":"a\u007f"})", "messageId"},
      {"track", R"({"userId":"u","event":"E","messageId":"caf\u00e9"})", "messageId"},
      {"track", R"({"userId":"u\n","event":"E"})", "userId"},
      {"track", R"({"anonymousId":"a\u0000","event":"E"})", "anonymousId"},
      {"group", R"({"userId":"u","groupId":"g\u001b[2J"})", "groupId"},
      {"alias", R"({"userId":"u","previousId":"p\u0085"})", "previousId"},
      {"identify", absl::StrCat(R"({"userId":")", std::string(257, 'u'), R"("})"), "userId"},
  };
  for (const Case& c : header_cases) {
    const HttpResponse r = Post(absl::StrCat("/v1/", c.endpoint), c.body);
    EXPECT_EQ(r.status, 400) << c.endpoint << " " << c.body << ": " << r.body;
    EXPECT_EQ(JsonStr(r.body, "/field"), c.field) << c.body << ": " << r.body;
  }
  // 100 printable ASCII characters: the longest messageId accepted.
  const std::string alphabet = "abcXYZ0123456789-_.:~ @#$%&*+=";
  std::string id100 = "msg";
  while (id100.size() < 100) id100 += alphabet[id100.size() % (alphabet.size() - 11)];
  const HttpResponse ok =
      Post("/v1/track", absl::StrCat(R"({"userId":"u","event":"E","messageId":")", id100, R"("})"));
  EXPECT_EQ(ok.status, 200) << ok.body;

  const std::vector<Job> jobs = StopAndLeaseAll();
  ASSERT_THAT(jobs, SizeIs(1));
  EXPECT_EQ(jobs[0].message_id(), id100);
}

// A mixed batch stores valid items normalised (ids, timestamps, context) and lists rejects.
TEST_P(CollectorHttpTest, BatchStoresValidItemsAndRejectsInvalidOnes) {
  const std::string body = R"({"batch":[
      {"type":"track","userId":"u0","event":"E0","messageId":"m0","context":{"ip":"9.9.9.9"},
       "timestamp":"2020-01-01T00:00:00.000Z"},
      {"type":"track","userId":"u1"},
      {"type":"identify","anonymousId":"a2","traits":{"n":1},
       "timestamp":"2020-06-01T12:00:00.5Z","sentAt":"2020-06-01T12:00:00.250Z"},
      {"type":"bogus","userId":"u3"},
      7,
      {"userId":"u5","event":"no type"},
      {"type":"page","userId":"u6","name":"Home","messageId":"m6"}
    ],
    "context":{"ip":"1.1.1.1","library":{"name":"analytics-go","version":"2.0.0"}},
    "sentAt":"2020-01-01T00:00:05.000Z"})";
  const HttpResponse r = Post("/v1/batch", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonAt(r.body, "/success"), "true");
  EXPECT_EQ(JsonAt(r.body, "/rejected/0/index"), "1");
  EXPECT_EQ(JsonStr(r.body, "/rejected/0/field"), "event");
  EXPECT_EQ(JsonAt(r.body, "/rejected/1/index"), "3");
  EXPECT_EQ(JsonStr(r.body, "/rejected/1/field"), "type");
  EXPECT_THAT(JsonStr(r.body, "/rejected/1/reason"), HasSubstr("bogus"));
  EXPECT_EQ(JsonAt(r.body, "/rejected/2/index"), "4");
  EXPECT_EQ(JsonStr(r.body, "/rejected/2/field"), "event");
  EXPECT_EQ(JsonAt(r.body, "/rejected/3/index"), "5");
  EXPECT_EQ(JsonStr(r.body, "/rejected/3/field"), "type");
  EXPECT_EQ(JsonAt(r.body, "/rejected/4"), "<missing>");
  for (int i = 0; i < 4; ++i) {
    EXPECT_THAT(JsonStr(r.body, absl::StrCat("/rejected/", i, "/reason")), Not(IsEmpty()));
  }

  const std::vector<Job> all = StopAndLeaseAll();
  ASSERT_THAT(all, SizeIs(3));
  const auto jobs = ByMessageId(all);
  for (const Job& job : all) {
    EXPECT_EQ(job.received_at_unix_ms(), kNowUnixSeconds * 1000);
    EXPECT_EQ(JsonStr(job.event_json(), "/receivedAt"), kNowIso);
    EXPECT_EQ(JsonStr(job.event_json(), "/messageId"), job.message_id());
  }

  // Batch sentAt applies: timestamp = receivedAt − (sentAt − originalTimestamp) = now − 5 s.
  const std::string& m0 = jobs.at("m0").at(0).event_json();
  EXPECT_EQ(JsonStr(m0, "/type"), "track");
  EXPECT_EQ(JsonStr(m0, "/originalTimestamp"), "2020-01-01T00:00:00.000Z");
  EXPECT_EQ(JsonStr(m0, "/sentAt"), "2020-01-01T00:00:05.000Z");
  EXPECT_EQ(JsonStr(m0, "/timestamp"), "2023-11-14T22:13:15.000Z");
  EXPECT_EQ(JsonAt(m0, "/context"), R"({"ip":"9.9.9.9","library":{"name":"analytics-go","version":"2.0.0"}})");

  // No timestamp: timestamp = receivedAt and no originalTimestamp; batch context as is.
  const std::string& m6 = jobs.at("m6").at(0).event_json();
  EXPECT_EQ(JsonStr(m6, "/timestamp"), kNowIso);
  EXPECT_EQ(JsonAt(m6, "/originalTimestamp"), "<missing>");
  EXPECT_EQ(JsonStr(m6, "/sentAt"), "2020-01-01T00:00:05.000Z");
  EXPECT_EQ(JsonAt(m6, "/context"), R"({"ip":"1.1.1.1","library":{"name":"analytics-go","version":"2.0.0"}})");

  // The identify had no messageId: a UUID v4 was generated. Its own sentAt wins over the batch's:
  // sent 250 ms *before* its timestamp, so timestamp = now + 250 ms.
  std::string generated;
  for (const auto& [id, js] : jobs) {
    if (id != "m0" && id != "m6") generated = id;
  }
  EXPECT_TRUE(std::regex_match(
      generated, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")))
      << generated;
  const std::string& m2 = jobs.at(generated).at(0).event_json();
  EXPECT_EQ(JsonStr(m2, "/type"), "identify");
  EXPECT_EQ(JsonStr(m2, "/anonymousId"), "a2");
  EXPECT_EQ(JsonAt(m2, "/traits"), R"({"n":1})");
  EXPECT_EQ(JsonStr(m2, "/originalTimestamp"), "2020-06-01T12:00:00.500Z");
  EXPECT_EQ(JsonStr(m2, "/sentAt"), "2020-06-01T12:00:00.250Z");
  EXPECT_EQ(JsonStr(m2, "/timestamp"), "2023-11-14T22:13:20.250Z");
  EXPECT_EQ(JsonStr(m2, "/context/ip"), "1.1.1.1");
}

// Single-event timestamps become UTC millis, skew-corrected by sentAt, else server time.
TEST_P(CollectorHttpTest, TimestampsAreNormalisedToUtcMillis) {
  EXPECT_EQ(Post("/v1/track", R"({"userId":"u","event":"E","messageId":"t-offset",
      "timestamp":"2020-01-01T02:00:00.123456+02:00"})").status, 200);
  EXPECT_EQ(Post("/v1/track", R"({"userId":"u","event":"E","messageId":"t-skew",
      "timestamp":"2030-01-01T00:00:00Z","sentAt":"2030-01-01T00:01:00Z"})").status, 200);
  EXPECT_EQ(Post("/v1/identify", R"({"userId":"u","messageId":"t-none","sentAt":"2030-01-01T00:01:00Z"})").status,
            200);
  const auto jobs = ByMessageId(StopAndLeaseAll());
  const std::string& offset = jobs.at("t-offset").at(0).event_json();
  EXPECT_EQ(JsonStr(offset, "/timestamp"), "2020-01-01T00:00:00.123Z");
  EXPECT_EQ(JsonStr(offset, "/originalTimestamp"), "2020-01-01T00:00:00.123Z");
  EXPECT_EQ(JsonAt(offset, "/sentAt"), "<missing>");
  const std::string& skew = jobs.at("t-skew").at(0).event_json();
  EXPECT_EQ(JsonStr(skew, "/timestamp"), "2023-11-14T22:12:20.000Z");
  EXPECT_EQ(JsonStr(skew, "/originalTimestamp"), "2030-01-01T00:00:00.000Z");
  EXPECT_EQ(JsonStr(skew, "/receivedAt"), kNowIso);
  const std::string& none = jobs.at("t-none").at(0).event_json();
  EXPECT_EQ(JsonStr(none, "/timestamp"), kNowIso);
  EXPECT_EQ(JsonAt(none, "/originalTimestamp"), "<missing>");
  EXPECT_EQ(JsonAt(none, "/context"), "{}");
}

// gzip bodies are accepted up to 500,000 inflated bytes; beyond that 413 and nothing stored.
TEST_P(CollectorHttpTest, GzipBodyIsAccepted) {
  const std::string batch = absl::StrCat(R"({"batch":[)", SmallTrack("gz-1"), ",", SmallTrack("gz-2"),
                                         ",", SmallTrack("gz-3"), "]}");
  const HttpResponse ok = Post("/v1/batch", Gzip(batch), kWebKey, {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(ok.status, 200) << ok.body;
  const HttpResponse single = Post("/v1/track", Gzip(SmallTrack("gz-single")), kWebKey,
                                   {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(single.status, 200) << single.body;
  // Small on the wire, 500,001 bytes once inflated.
  const std::string bomb = Gzip(BatchBodyOfSize(500001, "gz-bomb"));
  ASSERT_LT(bomb.size(), 10000u);
  const HttpResponse big = Post("/v1/batch", bomb, kWebKey, {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(big.status, 413) << big.body;
  EXPECT_TRUE(IsJsonError(big.body)) << big.body;
  // Exactly at the limit once inflated is fine.
  const HttpResponse edge = Post("/v1/batch", Gzip(BatchBodyOfSize(500000, "gz-edge")), kWebKey,
                                 {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(edge.status, 200) << edge.body;

  const auto jobs = ByMessageId(StopAndLeaseAll());
  std::vector<std::string> ids;
  for (const auto& [id, js] : jobs) ids.push_back(id);
  EXPECT_THAT(ids, UnorderedElementsAre("gz-1", "gz-2", "gz-3", "gz-single", "gz-edge"));
}

// A 500,000-byte body is accepted; 500,001 bytes is 413 with a JSON error, nothing stored.
TEST_P(CollectorHttpTest, RequestBodyLimitIs500000Bytes) {
  const std::string exact = BatchBodyOfSize(500000, "size-exact");
  ASSERT_EQ(exact.size(), 500000u);
  const HttpResponse ok = Post("/v1/batch", exact);
  EXPECT_EQ(ok.status, 200) << ok.body;

  const std::string over = BatchBodyOfSize(500001, "size-over");
  ASSERT_EQ(over.size(), 500001u);
  const HttpResponse big = Post("/v1/batch", over);
  EXPECT_EQ(big.status, 413) << big.body;
  EXPECT_TRUE(IsJsonError(big.body)) << big.body;
  EXPECT_THAT(big.body, HasSubstr("500000"));

  const std::vector<Job> jobs = StopAndLeaseAll();
  ASSERT_THAT(jobs, SizeIs(1));
  EXPECT_EQ(jobs[0].message_id(), "size-exact");
}

// A 32,000-byte event is accepted; 32,001 bytes is 413 and nothing of that request is stored.
TEST_P(CollectorHttpTest, EventLimitIs32000Bytes) {
  ASSERT_EQ(TrackEventOfSize(32000, "single-ok").size(), 32000u);
  EXPECT_EQ(Post("/v1/track", TrackEventOfSize(32000, "single-ok")).status, 200);
  const HttpResponse single_big = Post("/v1/track", TrackEventOfSize(32001, "single-big"));
  EXPECT_EQ(single_big.status, 413) << single_big.body;
  EXPECT_TRUE(IsJsonError(single_big.body)) << single_big.body;
  EXPECT_THAT(single_big.body, HasSubstr("32000"));

  const HttpResponse batch_ok =
      Post("/v1/batch", absl::StrCat(R"({"batch":[)", SmallTrack("batch-small-1"), ",",
                                     TrackEventOfSize(32000, "batch-ok"), "]}"));
  EXPECT_EQ(batch_ok.status, 200) << batch_ok.body;
  const HttpResponse batch_big =
      Post("/v1/batch", absl::StrCat(R"({"batch":[)", SmallTrack("batch-small-2"), ",",
                                     TrackEventOfSize(32001, "batch-big"), "]}"));
  EXPECT_EQ(batch_big.status, 413) << batch_big.body;
  EXPECT_TRUE(IsJsonError(batch_big.body)) << batch_big.body;

  const auto jobs = ByMessageId(StopAndLeaseAll());
  std::vector<std::string> ids;
  for (const auto& [id, js] : jobs) ids.push_back(id);
  EXPECT_THAT(ids, UnorderedElementsAre("single-ok", "batch-small-1", "batch-ok"));
  EXPECT_EQ(JsonAt(jobs.at("batch-ok")[0].event_json(), "/properties"),
            JsonAt(TrackEventOfSize(32000, "batch-ok"), "/properties"));
}

// A batch of 2,500 events is accepted; 2,501 is 413 and stores nothing.
TEST_P(CollectorHttpTest, BatchLimitIs2500Events) {
  auto batch = [](int n, const std::string& prefix) {
    std::vector<std::string> items;
    for (int i = 0; i < n; ++i) items.push_back(SmallTrack(absl::StrCat(prefix, i)));
    return absl::StrCat(R"({"batch":[)", absl::StrJoin(items, ","), "]}");
  };
  const HttpResponse ok = Post("/v1/batch", batch(2500, "ok-"));
  EXPECT_EQ(ok.status, 200) << ok.body;
  const HttpResponse big = Post("/v1/batch", batch(2501, "big-"));
  EXPECT_EQ(big.status, 413) << big.body;
  EXPECT_TRUE(IsJsonError(big.body)) << big.body;
  EXPECT_THAT(big.body, HasSubstr("2500"));

  const std::vector<Job> jobs = StopAndLeaseAll();
  EXPECT_THAT(jobs, SizeIs(2500));
  for (const Job& job : jobs) EXPECT_TRUE(absl::StartsWith(job.message_id(), "ok-")) << job.message_id();
}

// A repeated messageId from one source is stored once; another source's is separate.
TEST_P(CollectorHttpTest, DuplicateMessageIdIsStoredOnce) {
  EXPECT_EQ(Post("/v1/track", SmallTrack("dup-1")).status, 200);
  EXPECT_EQ(Post("/v1/track", SmallTrack("dup-1")).status, 200);
  EXPECT_EQ(Post("/v1/batch", absl::StrCat(R"({"batch":[)", SmallTrack("dup-2"), ",",
                                           SmallTrack("dup-2"), ",", SmallTrack("dup-1"), "]}"))
                .status,
            200);
  EXPECT_EQ(Post("/v1/track", SmallTrack("dup-1"), kFanKey).status, 200);

  const std::vector<Job> all = StopAndLeaseAll();
  std::map<std::pair<std::string, std::string>, int> count;
  for (const Job& job : all) ++count[{job.source_id(), job.message_id()}];
  EXPECT_EQ(count[std::make_pair(std::string("web"), std::string("dup-1"))], 1);
  EXPECT_EQ(count[std::make_pair(std::string("web"), std::string("dup-2"))], 1);
  EXPECT_EQ(count[std::make_pair(std::string("fan"), std::string("dup-1"))], 2);  // two destinations
  EXPECT_THAT(all, SizeIs(4));
}

// Integrations flags, disabled and multiple destinations decide the jobs per event.
TEST_P(CollectorHttpTest, IntegrationsAndDestinationsRouteJobs) {
  auto track = [](const std::string& id, const std::string& integrations) {
    return absl::StrCat(R"({"userId":"u","event":"E","messageId":")", id, R"(")",
                        integrations.empty() ? "" : R"(,"integrations":)", integrations, "}");
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"all-false", R"({"All":false})"},
      {"all-false-webhooks-true", R"({"All":false,"Webhooks":true})"},
      {"webhooks-false", R"({"Webhooks":false})"},
      {"webhooks-true", R"({"Webhooks":true})"},
      {"all-true-webhooks-false", R"({"All":true,"Webhooks":false})"},
      {"lowercase-key", R"({"webhooks":false,"all":false})"},
      {"other-destination", R"({"Mixpanel":false})"},
      {"absent", ""},
  };
  for (const auto& [id, integrations] : cases) {
    const HttpResponse r = Post("/v1/track", track(id, integrations));
    EXPECT_EQ(r.status, 200) << id << ": " << r.body;
  }
  // Batch-level integrations apply to items; an item's own keys win.
  EXPECT_EQ(Post("/v1/batch", R"({"integrations":{"All":false},"batch":[
      {"type":"track","userId":"u","event":"E","messageId":"batch-off"},
      {"type":"track","userId":"u","event":"E","messageId":"batch-item-on","integrations":{"Webhooks":true}}]})")
                .status,
            200);
  EXPECT_EQ(Post("/v1/track", track("fan-out", ""), kFanKey).status, 200);
  EXPECT_EQ(Post("/v1/track", track("fan-off", R"({"Webhooks":false})"), kFanKey).status, 200);
  EXPECT_EQ(Post("/v1/track", track("quiet", ""), kQuietKey).status, 200);

  const auto jobs = ByMessageId(StopAndLeaseAll());
  std::vector<std::string> ids;
  for (const auto& [id, js] : jobs) ids.push_back(id);
  EXPECT_THAT(ids, UnorderedElementsAre("all-false-webhooks-true", "webhooks-true", "lowercase-key",
                                        "other-destination", "absent", "batch-item-on", "fan-out"));
  EXPECT_THAT(Destinations(jobs.at("fan-out")), UnorderedElementsAre("hook-web", "hook-fan"));
  for (const auto& [id, js] : jobs) {
    for (const Job& job : js) EXPECT_NE(job.destination_id(), "hook-off") << id;
  }
  // The two fan-out jobs carry the same event.
  EXPECT_EQ(jobs.at("fan-out")[0].event_json(), jobs.at("fan-out")[1].event_json());
  EXPECT_EQ(JsonAt(jobs.at("all-false-webhooks-true")[0].event_json(), "/integrations"),
            R"({"All":false,"Webhooks":true})");
}

// One keep-alive connection carries 200 requests without being closed.
TEST_P(CollectorHttpTest, KeepAliveServesManyRequestsOnOneConnection) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> conn = HttpConnection::Connect(collector_->http_port());
  ASSERT_TRUE(conn.ok()) << conn.status();
  constexpr int kRequests = 200;
  for (int i = 0; i < kRequests; ++i) {
    absl::StatusOr<HttpResponse> r = (*conn)->Post("/v1/track", SmallTrack(absl::StrCat("ka-", i)), kWebKey);
    ASSERT_TRUE(r.ok()) << "request " << i << ": " << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_NE(r->Header("Connection"), "close");
  }
  absl::StatusOr<HttpResponse> health = (*conn)->Request("GET", "/healthz", "", {});
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);
  conn->reset();
  EXPECT_THAT(StopAndLeaseAll(), SizeIs(kRequests));
}

// GET /healthz answers 200 with JSON; an unknown path is a 404 with a JSON error.
TEST_P(CollectorHttpTest, HealthzIs200) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> conn = HttpConnection::Connect(collector_->http_port());
  ASSERT_TRUE(conn.ok()) << conn.status();
  absl::StatusOr<HttpResponse> r = (*conn)->Request("GET", "/healthz", "", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(JsonStr(r->body, "/status"), "serving");
  absl::StatusOr<HttpResponse> missing = (*conn)->Post("/v2/track", SmallTrack("x"), kWebKey);
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(IsJsonError(missing->body)) << missing->body;
}

// RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400 naming Host, and nothing is stored;
// HTTP/1.0 has no such rule.
TEST_P(CollectorHttpTest, Http11WithoutHostIs400) {
  const std::string body = SmallTrack("no-host");
  absl::StatusOr<std::unique_ptr<HttpConnection>> conn =
      HttpConnection::Connect(collector_->http_port());
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE((*conn)
                  ->SendAll(absl::StrCat("POST /v1/track HTTP/1.1\r\nContent-Type: application/json\r\n"
                                         "Authorization: ", BasicAuth(kWebKey),
                                         "\r\nContent-Length: ", body.size(), "\r\n\r\n", body))
                  .ok());
  absl::StatusOr<HttpResponse> r = (*conn)->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(JsonStr(r->body, "/field"), "Host") << r->body;

  absl::StatusOr<std::unique_ptr<HttpConnection>> old =
      HttpConnection::Connect(collector_->http_port());
  ASSERT_TRUE(old.ok()) << old.status();
  const std::string body10 = SmallTrack("http10");
  ASSERT_TRUE((*old)
                  ->SendAll(absl::StrCat("POST /v1/track HTTP/1.0\r\nContent-Type: application/json\r\n"
                                         "Authorization: ", BasicAuth(kWebKey),
                                         "\r\nContent-Length: ", body10.size(), "\r\n\r\n", body10))
                  .ok());
  absl::StatusOr<HttpResponse> r10 = (*old)->ReadResponse();
  ASSERT_TRUE(r10.ok()) << r10.status();
  EXPECT_EQ(r10->status, 200) << r10->body;
  const std::vector<Job> jobs = StopAndLeaseAll();
  ASSERT_THAT(jobs, SizeIs(1));
  EXPECT_EQ(jobs[0].message_id(), "http10");
}

INSTANTIATE_TEST_SUITE_P(Engines, CollectorHttpTest, EngineParams(), EngineParamName);

}  // namespace
}  // namespace hookrelay::test
