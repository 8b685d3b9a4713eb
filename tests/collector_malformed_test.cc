// Hostile and broken input to the collector's HTTP API: every malformed request gets a 4xx with
// a JSON error body, nothing of it is stored, and the collector keeps serving valid requests.
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/job.pb.h"
#include "tests/collector_test_util.h"

namespace hookrelay::test {
namespace {

using ::hookrelay::v1::Job;
using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr char kValidTrack[] = R"({"userId":"u","event":"Still Alive","messageId":"alive"})";

struct BadBody {
  const char* name;
  const char* target;
  std::string body;
  HttpHeaders extra;
};

class CollectorMalformedTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(collector_.Start().ok()); }

  // After everything a test threw at it, the collector still accepts a valid event, and that
  // event is the only thing stored.
  void ExpectStillServingAndNothingElseStored() {
    absl::StatusOr<HttpResponse> r = HttpPost(collector_.http_port(), "/v1/track", kValidTrack, kWebKey);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200) << r->body;
    absl::StatusOr<std::vector<Job>> jobs = collector_.StopAndLeaseAll();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_THAT(*jobs, SizeIs(1));
    EXPECT_EQ((*jobs)[0].message_id(), "alive");
  }

  // Sends raw bytes on a fresh connection, optionally half-closes, and reads one response.
  absl::StatusOr<HttpResponse> SendRaw(std::string_view bytes, bool half_close) {
    absl::StatusOr<std::unique_ptr<HttpConnection>> conn = HttpConnection::Connect(collector_.http_port());
    if (!conn.ok()) return conn.status();
    const absl::Status sent = (*conn)->SendAll(bytes);
    if (half_close) (*conn)->ShutdownWrite();
    absl::StatusOr<HttpResponse> r = (*conn)->ReadResponse();
    if (!r.ok() && !sent.ok()) return sent;
    return r;
  }

  InProcessCollector collector_{"collector_malformed_test"};
};

void ExpectJsonError4xx(const absl::StatusOr<HttpResponse>& r, const std::string& name,
                        int expected_status = 0) {
  ASSERT_TRUE(r.ok()) << name << ": " << r.status();
  if (expected_status != 0) {
    EXPECT_EQ(r->status, expected_status) << name << ": " << r->body;
  } else {
    EXPECT_GE(r->status, 400) << name << ": " << r->body;
    EXPECT_LT(r->status, 500) << name << ": " << r->body;
  }
  EXPECT_TRUE(IsJsonError(r->body)) << name << ": " << r->body;
  EXPECT_EQ(r->Header("Content-Type"), "application/json") << name;
}

// Each malformed JSON body is 400 with a JSON error, and the collector keeps serving.
TEST_F(CollectorMalformedTest, MalformedBodiesAre400WithJsonError) {
  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage.push_back(static_cast<char>((i * 7919 + 13) % 256));
  static constexpr char kNul[] = "{\"userId\":\"u\0\",\"event\":\"E\"}";
  const std::string deep_open = std::string(10000, '[');
  const std::string deep_balanced = deep_open + std::string(10000, ']');
  const std::vector<BadBody> cases = {
      {"truncated", "/v1/track", R"({"userId":"u","event":"E")", {}},
      {"truncated string", "/v1/track", R"({"userId":"u","event":"E)", {}},
      {"truncated batch", "/v1/batch", R"({"batch":[{"type":"track","userId":"u","event":"E"},)", {}},
      {"trailing comma", "/v1/track", R"({"userId":"u","event":"E",})", {}},
      {"empty body", "/v1/track", "", {}},
      {"whitespace body", "/v1/track", "   \n ", {}},
      {"array body", "/v1/track", R"([{"userId":"u","event":"E"}])", {}},
      {"string body", "/v1/identify", R"("hello")", {}},
      {"null body", "/v1/identify", "null", {}},
      {"userId object", "/v1/track", R"({"userId":{"id":"u"},"event":"E"})", {}},
      {"properties array", "/v1/track", R"({"userId":"u","event":"E","properties":[1,2,3]})", {}},
      {"batch not array", "/v1/batch", R"({"batch":{"type":"track","userId":"u","event":"E"}})", {}},
      {"batch missing", "/v1/batch", R"({"events":[]})", {}},
      {"batch string", "/v1/batch", R"({"batch":"[]"})", {}},
      {"batch-level context array", "/v1/batch",
       R"({"context":[1],"batch":[{"type":"track","userId":"u","event":"E"}]})", {}},
      {"1e999", "/v1/track", R"({"userId":"u","event":"E","properties":{"n":1e999}})", {}},
      {"-1e999", "/v1/track", R"({"userId":"u","event":"E","properties":{"n":-1e999}})", {}},
      {"bigint", "/v1/track",
       R"({"userId":"u","event":"E","properties":{"n":123456789012345678901234567890}})", {}},
      {"invalid UTF-8", "/v1/track", "{\"userId\":\"u\xff\xfe\",\"event\":\"E\"}", {}},
      {"overlong UTF-8", "/v1/track", "{\"userId\":\"u\",\"event\":\"\xc0\xaf\"}", {}},
      {"invalid UTF-8 key", "/v1/track", "{\"userId\":\"u\",\"event\":\"E\",\"\xed\xa0\x80\":1}", {}},
      {"deep nesting unbalanced", "/v1/track",
       absl::StrCat(R"({"userId":"u","event":"E","properties":{"x":)", deep_open), {}},
      {"deep nesting balanced", "/v1/track",
       absl::StrCat(R"({"userId":"u","event":"E","properties":{"x":)", deep_balanced, "}}"), {}},
      {"deep batch", "/v1/batch", absl::StrCat(R"({"batch":)", deep_balanced, "}"), {}},
      {"garbage", "/v1/track", garbage, {}},
      {"garbage batch", "/v1/batch", garbage, {}},
      {"NUL in a string", "/v1/track", std::string(kNul, sizeof(kNul) - 1), {}},
      {"not gzip", "/v1/track", kValidTrack, {{"Content-Encoding", "gzip"}}},
      {"truncated gzip", "/v1/track", Gzip(kValidTrack).substr(0, 20), {{"Content-Encoding", "gzip"}}},
      {"gzip of garbage", "/v1/track", Gzip(garbage), {{"Content-Encoding", "gzip"}}},
  };
  for (const BadBody& c : cases) {
    ExpectJsonError4xx(HttpPost(collector_.http_port(), c.target, c.body, kWebKey, c.extra), c.name, 400);
  }
  ExpectStillServingAndNothingElseStored();
}

// Any Content-Type (or none) is fine when the body is JSON, as with Segment's API: the
// RudderStack Node SDK sends gzip JSON as application/x-www-form-urlencoded. Only an encoding that
// cannot be decoded is 415 (naming Content-Encoding); a non-JSON body stays 400.
TEST_F(CollectorMalformedTest, AnyContentTypeWithJsonIsAcceptedUnknownEncodingIs415) {
  struct Case {
    std::string name;
    HttpHeaders headers;
    bool gzip;
  };
  const std::vector<Case> accepted = {
      {"text-html", {{"Content-Type", "text/html"}}, false},
      {"xml", {{"Content-Type", "application/xml"}}, false},
      {"form-gzip", {{"Content-Type", "application/x-www-form-urlencoded"}, {"Content-Encoding", "gzip"}}, true},
      {"text-plain", {{"Content-Type", "text/plain"}}, false},
      {"charset", {{"Content-Type", "Application/JSON; charset=utf-8"}}, false},
      {"missing", {}, false},
      {"identity", {{"Content-Type", "application/json"}, {"Content-Encoding", "identity"}}, false},
  };
  for (const Case& c : accepted) {
    absl::StatusOr<std::unique_ptr<HttpConnection>> conn = HttpConnection::Connect(collector_.http_port());
    ASSERT_TRUE(conn.ok()) << conn.status();
    HttpHeaders all = c.headers;
    all.emplace_back("Authorization", BasicAuth(kWebKey));
    const std::string body = absl::StrCat(R"({"userId":"u","event":"E","messageId":")", c.name, R"("})");
    absl::StatusOr<HttpResponse> r =
        (*conn)->Request("POST", "/v1/track", c.gzip ? Gzip(body) : body, all);
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status();
    EXPECT_EQ(r->status, 200) << c.name << ": " << r->body;
  }
  for (const char* encoding : {"br", "deflate", "zstd"}) {
    absl::StatusOr<std::unique_ptr<HttpConnection>> conn = HttpConnection::Connect(collector_.http_port());
    ASSERT_TRUE(conn.ok()) << conn.status();
    absl::StatusOr<HttpResponse> r = (*conn)->Request(
        "POST", "/v1/track", kValidTrack,
        {{"Content-Encoding", encoding}, {"Authorization", BasicAuth(kWebKey)}});
    ExpectJsonError4xx(r, encoding, 415);
    if (r.ok()) {
      EXPECT_EQ(JsonStr(r->body, "/field"), "Content-Encoding") << r->body;
    }
  }
  absl::StatusOr<std::unique_ptr<HttpConnection>> conn = HttpConnection::Connect(collector_.http_port());
  ASSERT_TRUE(conn.ok()) << conn.status();
  ExpectJsonError4xx((*conn)->Request("POST", "/v1/track", "userId=u&event=E",
                                      {{"Content-Type", "application/json"},
                                       {"Authorization", BasicAuth(kWebKey)}}),
                     "form body", 400);
  conn->reset();
  absl::StatusOr<std::vector<Job>> jobs = collector_.StopAndLeaseAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::vector<std::string> ids;
  for (const Job& job : *jobs) ids.push_back(job.message_id());
  std::vector<std::string> want;
  for (const Case& c : accepted) want.push_back(c.name);
  EXPECT_THAT(ids, ::testing::UnorderedElementsAreArray(want));
}

// Methods other than POST on an ingest endpoint get 405 with Allow and a JSON error.
TEST_F(CollectorMalformedTest, NonPostMethodIs405) {
  for (const char* method : {"GET", "PUT", "DELETE", "PATCH", "HEAD"}) {
    absl::StatusOr<std::unique_ptr<HttpConnection>> conn = HttpConnection::Connect(collector_.http_port());
    ASSERT_TRUE(conn.ok()) << conn.status();
    if (std::string_view(method) == "HEAD") {
      // A HEAD response has no body; only the status and headers can be checked.
      absl::StatusOr<HttpResponse> head = (*conn)->Request("HEAD", "/v1/track", "", {});
      ASSERT_TRUE(head.ok()) << head.status();
      EXPECT_EQ(head->status, 405);
      EXPECT_THAT(head->Header("Allow"), HasSubstr("POST"));
      continue;
    }
    absl::StatusOr<HttpResponse> r = (*conn)->Request(method, "/v1/track", method == std::string_view("GET") ? "" : kValidTrack,
                         {{"Content-Type", "application/json"}, {"Authorization", BasicAuth(kWebKey)}});
    ExpectJsonError4xx(r, method, 405);
    EXPECT_THAT(r->Header("Allow"), HasSubstr("POST"));
  }
  ExpectStillServingAndNothingElseStored();
}

// Broken HTTP framing gets 400 with a JSON error, and the collector keeps serving.
TEST_F(CollectorMalformedTest, BrokenHttpFramingIs400AndServerSurvives) {
  std::string garbage = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all";
  garbage.push_back('\0');
  garbage += "\xff\xfe\r\n\r\n";
  ExpectJsonError4xx(SendRaw(garbage, /*half_close=*/false), "garbage request line", 400);
  ExpectJsonError4xx(SendRaw("\x01\x02\x03\x04 garbage without a line end", /*half_close=*/true),
                     "garbage then close", 400);

  const std::string short_body = absl::StrCat(
      "POST /v1/track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Authorization: ", BasicAuth(kWebKey), "\r\nContent-Length: 1000\r\n\r\n", R"({"userId":)");
  ExpectJsonError4xx(SendRaw(short_body, /*half_close=*/true), "Content-Length larger than body", 400);

  const std::string header_only = absl::StrCat(
      "POST /v1/track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 64\r\n\r\n");
  ExpectJsonError4xx(SendRaw(header_only, /*half_close=*/true), "headers only then close", 400);

  ExpectJsonError4xx(
      SendRaw("POST /v1/track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              "Content-Length: banana\r\n\r\n{}",
              /*half_close=*/false),
      "invalid Content-Length", 400);
  ExpectJsonError4xx(
      SendRaw("POST /v1/track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
              /*half_close=*/false),
      "broken chunk", 400);
  ExpectJsonError4xx(
      SendRaw(absl::StrCat("POST /v1/track HTTP/1.1\r\nHost: x\r\nX-Big: ", std::string(20000, 'b'),
                           "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"),
              /*half_close=*/false),
      "20 KB header", 400);

  // A client that connects and goes away without a byte.
  {
    absl::StatusOr<std::unique_ptr<HttpConnection>> conn = HttpConnection::Connect(collector_.http_port());
    ASSERT_TRUE(conn.ok());
    (*conn)->ShutdownWrite();
    EXPECT_TRUE((*conn)->WaitPeerClosed());
  }
  ExpectStillServingAndNothingElseStored();
}

// 4xx answers to well-framed requests keep the keep-alive connection usable.
TEST_F(CollectorMalformedTest, BadRequestsKeepTheConnectionUsable) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> conn = HttpConnection::Connect(collector_.http_port());
  ASSERT_TRUE(conn.ok()) << conn.status();
  HttpConnection& c = **conn;
  ExpectJsonError4xx(c.Post("/v1/track", R"({"userId":)", kWebKey), "truncated", 400);
  ExpectJsonError4xx(c.Post("/v1/track", R"({"event":"E"})", kWebKey), "no userId", 400);
  ExpectJsonError4xx(c.Post("/v1/track", kValidTrack, "wk_nope"), "unknown key", 401);
  ExpectJsonError4xx(c.Request("POST", "/v1/track", kValidTrack, {{"Content-Encoding", "br"}}),
                     "brotli", 415);
  ExpectJsonError4xx(c.Request("GET", "/v1/track", "", {}), "GET", 405);
  absl::StatusOr<HttpResponse> ok = c.Post("/v1/track", kValidTrack, kWebKey);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->status, 200) << ok->body;
  conn->reset();
  absl::StatusOr<std::vector<Job>> jobs = collector_.StopAndLeaseAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, SizeIs(1));
}

}  // namespace
}  // namespace hookrelay::test
