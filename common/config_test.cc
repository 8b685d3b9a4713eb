#include "common/config.h"

#include <stdlib.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

#include "hookrelay/v1/config.pb.h"

namespace hookrelay::common {
namespace {

using ::hookrelay::v1::Config;
using ::hookrelay::v1::Destination;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// The example of SPEC §8, verbatim.
constexpr char kSpecExample[] = R"yaml(
sources:
  - id: web
    name: Website
    kind: web                  # web | mobile | server
    write_keys: [wk_live_123]
destinations:
  - id: orders-hook
    type: webhooks             # the catalog name "Webhooks"
    sources: [web]
    enabled: true
    shared_secret: s3cr3t      # optional
    urls:                      # 1..5
      - url: https://hooks.example.com/segment
        headers:               # 0..5
          X-Api-Key: abc
)yaml";

Config SpecConfig() {
  absl::StatusOr<Config> config = ParseConfigYaml(kSpecExample);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : Config();
}

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

// The SPEC §8 example maps onto exactly the expected proto, and is valid.
TEST(ParseConfigYamlTest, SpecExampleParsesToExpectedProto) {
  Config expected;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"pb(
    sources { id: "web" name: "Website" kind: WEB write_keys: "wk_live_123" }
    destinations {
      id: "orders-hook"
      type: "webhooks"
      sources: "web"
      enabled: true
      shared_secret: "s3cr3t"
      urls {
        url: "https://hooks.example.com/segment"
        headers { name: "X-Api-Key" value: "abc" }
      }
    }
  )pb", &expected));
  absl::StatusOr<Config> config = ParseConfigYaml(kSpecExample);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*config, expected))
      << config->DebugString();
  EXPECT_TRUE(ValidateConfig(*config).ok()) << ValidateConfig(*config);
}

// Every field of options, kinds in any case, "Webhooks", several headers in order.
TEST(ParseConfigYamlTest, MapsOptionsKindsAndHeaders) {
  absl::StatusOr<Config> config = ParseConfigYaml(R"yaml(
sources:
  - {id: app, name: App, kind: Mobile, write_keys: [k1, k2]}
  - {id: api, kind: SERVER, write_keys: [k3]}
destinations:
  - id: d
    type: Webhooks
    sources: [app, api]
    enabled: false
    urls:
      - url: http://a.example/x
        headers: {A: "1", B: two, C: ""}
      - url: https://b.example/y
    options:
      timeout_ms: 2500
      retry_window_seconds: 3600
      initial_backoff_ms: 200
      max_backoff_ms: 30000
      standard_webhooks: true
      rate_limit_per_second: 50
      circuit_breaker: {failures: 5, pause_ms: 2000, max_pause_ms: 60000}
)yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(ValidateConfig(*config).ok()) << ValidateConfig(*config);
  EXPECT_EQ(config->destinations(0).options().rate_limit_per_second(), 50u);
  EXPECT_EQ(config->destinations(0).options().circuit_breaker().failures(), 5u);
  EXPECT_EQ(config->destinations(0).options().circuit_breaker().pause_ms(), 2000u);
  EXPECT_EQ(config->destinations(0).options().circuit_breaker().max_pause_ms(), 60000u);
  ASSERT_EQ(config->sources_size(), 2);
  EXPECT_EQ(config->sources(0).kind(), hookrelay::v1::MOBILE);
  EXPECT_EQ(config->sources(1).kind(), hookrelay::v1::SERVER);
  EXPECT_EQ(config->sources(0).write_keys_size(), 2);
  const Destination& d = config->destinations(0);
  EXPECT_EQ(d.type(), "Webhooks");
  EXPECT_FALSE(d.enabled());
  ASSERT_EQ(d.urls_size(), 2);
  ASSERT_EQ(d.urls(0).headers_size(), 3);
  EXPECT_EQ(d.urls(0).headers(1).name(), "B");
  EXPECT_EQ(d.urls(0).headers(1).value(), "two");
  EXPECT_EQ(d.urls(0).headers(2).value(), "");
  EXPECT_EQ(d.options().timeout_ms(), 2500u);
  EXPECT_EQ(d.options().retry_window_seconds(), 3600u);
  EXPECT_EQ(d.options().initial_backoff_ms(), 200u);
  EXPECT_EQ(d.options().max_backoff_ms(), 30000u);
  EXPECT_TRUE(d.options().standard_webhooks());
}

// An empty file is an empty (and valid) configuration.
TEST(ParseConfigYamlTest, EmptyDocumentIsEmptyConfig) {
  absl::StatusOr<Config> config = ParseConfigYaml("");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sources_size(), 0);
  EXPECT_TRUE(ValidateConfig(*config).ok());
}

struct ParseErrorCase {
  std::string name;
  std::string yaml;
  std::vector<std::string> expected;  // substrings of the error message
};

class ParseErrorTest : public ::testing::TestWithParam<ParseErrorCase> {};

// Each structural mistake is an InvalidArgument naming the field path (and line).
TEST_P(ParseErrorTest, NamesFieldPath) {
  absl::StatusOr<Config> config = ParseConfigYaml(GetParam().yaml);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& part : GetParam().expected) {
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(part));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ParseErrorTest,
    ::testing::Values(
        ParseErrorCase{"UnknownKeyInUrl",
                       "destinations:\n"
                       "  - id: d\n"
                       "    urls:\n"
                       "      - url: https://a.example\n"
                       "      - url: https://b.example\n"
                       "        header: {A: b}\n",
                       {"destinations[0].urls[1]: unknown key \"header\" (line 6)"}},
        ParseErrorCase{"UnknownTopLevelKey", "source: []\n", {"config: unknown key \"source\""}},
        ParseErrorCase{"UnknownOption",
                       "destinations:\n  - options: {timeout: 5}\n",
                       {"destinations[0].options: unknown key \"timeout\""}},
        ParseErrorCase{"DuplicateKey",
                       "sources:\n  - id: a\n    id: b\n",
                       {"sources[0]: duplicate key \"id\" (line 3)"}},
        ParseErrorCase{"EnabledNotBool",
                       "destinations:\n  - enabled: maybe\n",
                       {"destinations[0].enabled: expected true or false"}},
        ParseErrorCase{"WriteKeysNotList",
                       "sources:\n  - write_keys: wk\n",
                       {"sources[0].write_keys: expected a list, got a scalar"}},
        ParseErrorCase{"WriteKeyNotString",
                       "sources:\n  - write_keys: [[a]]\n",
                       {"sources[0].write_keys[0]: expected a string, got a list"}},
        ParseErrorCase{"IdNotString",
                       "sources:\n  - id: {a: b}\n",
                       {"sources[0].id: expected a string, got a mapping"}},
        ParseErrorCase{"UrlsNotList",
                       "destinations:\n  - urls: {url: https://a.example}\n",
                       {"destinations[0].urls: expected a list, got a mapping"}},
        ParseErrorCase{"UrlEntryNotMapping",
                       "destinations:\n  - urls: [https://a.example]\n",
                       {"destinations[0].urls[0]: expected a mapping with \"url\""}},
        ParseErrorCase{"HeadersNotMapping",
                       "destinations:\n  - urls:\n    - url: https://a.example\n"
                       "      headers: [A]\n",
                       {"destinations[0].urls[0].headers: expected a mapping"}},
        ParseErrorCase{"HeaderValueNotString",
                       "destinations:\n  - urls:\n    - url: https://a.example\n"
                       "      headers: {A: [x]}\n",
                       {"destinations[0].urls[0].headers[\"A\"]: expected a string"}},
        ParseErrorCase{"TimeoutNotNumber",
                       "destinations:\n  - options: {timeout_ms: fast}\n",
                       {"destinations[0].options.timeout_ms: expected a positive integer"}},
        ParseErrorCase{"TimeoutNegative",
                       "destinations:\n  - options: {timeout_ms: -5}\n",
                       {"destinations[0].options.timeout_ms: expected a positive integer"}},
        ParseErrorCase{"TimeoutZero",
                       "destinations:\n  - options: {timeout_ms: 0}\n",
                       {"destinations[0].options.timeout_ms: expected a positive integer"}},
        ParseErrorCase{"BreakerFailuresZero",
                       "destinations:\n  - options: {circuit_breaker: {failures: 0}}\n",
                       {"destinations[0].options.circuit_breaker.failures: expected a positive "
                        "integer"}},
        ParseErrorCase{"BreakerUnknownKey",
                       "destinations:\n  - options: {circuit_breaker: {failure: 3}}\n",
                       {"destinations[0].options.circuit_breaker"}},
        ParseErrorCase{"WindowTooLargeForField",
                       "destinations:\n  - options: {retry_window_seconds: 5000000000}\n",
                       {"destinations[0].options.retry_window_seconds: expected a positive"}},
        ParseErrorCase{"UnknownKind",
                       "sources:\n  - kind: desktop\n",
                       {"sources[0].kind: unknown kind \"desktop\", expected web, mobile or "
                        "server"}},
        ParseErrorCase{"RootNotMapping", "- a\n- b\n", {"config: expected a mapping"}},
        ParseErrorCase{"SourcesNotList", "sources: {id: a}\n",
                       {"sources: expected a list, got a mapping"}}),
    [](const ::testing::TestParamInfo<ParseErrorCase>& info) { return info.param.name; });

// Structural errors are all reported in one message.
TEST(ParseConfigYamlTest, ReportsAllStructuralErrors) {
  absl::StatusOr<Config> config = ParseConfigYaml(
      "sources:\n  - idd: a\n    kind: tablet\ndestinations:\n  - enabled: perhaps\n");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr("sources[0]: unknown key \"idd\""),
                    HasSubstr("sources[0].kind: unknown kind \"tablet\""),
                    HasSubstr("destinations[0].enabled: expected true or false")));
}

// Malformed YAML is a syntax error with line and column.
TEST(ParseConfigYamlTest, MalformedYamlNamesLine) {
  absl::StatusOr<Config> config =
      ParseConfigYaml("sources:\n  - id: web\n    write_keys: [a, b\ndestinations: []\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("YAML syntax error at line "));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(", column "));

  absl::StatusOr<Config> tab = ParseConfigYaml("sources:\n  - id: web\n\t  name: x\n");
  ASSERT_FALSE(tab.ok());
  EXPECT_THAT(std::string(tab.status().message()), HasSubstr("YAML syntax error at line 3"));
}

struct ViolationCase {
  std::string name;
  std::function<void(Config&)> mutate;
  std::vector<std::string> expected;  // substrings of the error message
};

class ViolationTest : public ::testing::TestWithParam<ViolationCase> {};

Destination& Dest(Config& c) { return *c.mutable_destinations(0); }
hookrelay::v1::WebhookUrl& Url0(Config& c) { return *Dest(c).mutable_urls(0); }
void AddHeader(Config& c, const std::string& name, const std::string& value) {
  hookrelay::v1::Header* h = Url0(c).add_headers();
  h->set_name(name);
  h->set_value(value);
}
void AddUrls(Config& c, int n) {
  for (int i = 0; i < n; ++i) {
    Dest(c).add_urls()->set_url(absl::StrCat("https://h", i, ".example/"));
  }
}

// Each limit violation on top of the valid SPEC example is refused, naming field path and limit.
TEST_P(ViolationTest, RefusedWithFieldPathAndLimit) {
  Config config = SpecConfig();
  GetParam().mutate(config);
  const absl::Status status = ValidateConfig(config);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& part : GetParam().expected) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(part));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ViolationTest,
    ::testing::Values(
        ViolationCase{"SixUrls", [](Config& c) { AddUrls(c, 5); },
                      {"destinations[0].urls: 6 entries, at most 5 allowed"}},
        ViolationCase{"NoUrls", [](Config& c) { Dest(c).clear_urls(); },
                      {"destinations[0].urls: no URLs, at least 1 required"}},
        ViolationCase{"SixHeaders",
                      [](Config& c) {
                        for (int i = 0; i < 5; ++i) AddHeader(c, absl::StrCat("X-H", i), "v");
                      },
                      {"destinations[0].urls[0].headers: 6 headers, at most 5 allowed"}},
        ViolationCase{"FtpScheme",
                      [](Config& c) {
                        AddUrls(c, 1);
                        Dest(c).mutable_urls(1)->set_url("ftp://x");
                      },
                      {"destinations[0].urls[1].url \"ftp://x\": scheme must be http or https"}},
        ViolationCase{"NoScheme", [](Config& c) { Url0(c).set_url("hooks.example.com/x"); },
                      {"destinations[0].urls[0].url \"hooks.example.com/x\": not a full URL, "
                       "must start with http:// or https://"}},
        ViolationCase{"NoHost", [](Config& c) { Url0(c).set_url("https:///segment"); },
                      {"destinations[0].urls[0].url \"https:///segment\": has no host"}},
        ViolationCase{"OnlyPort", [](Config& c) { Url0(c).set_url("http://:8080/"); },
                      {"destinations[0].urls[0].url \"http://:8080/\": has no host"}},
        ViolationCase{"BadPort", [](Config& c) { Url0(c).set_url("http://h.example:99999/"); },
                      {"destinations[0].urls[0].url", "port must be a number between 1 and 65535"}},
        ViolationCase{"SpaceInUrl", [](Config& c) { Url0(c).set_url("https://h.example/a b"); },
                      {"destinations[0].urls[0].url", "contains whitespace or control characters"}},
        ViolationCase{"EmptyUrl", [](Config& c) { Url0(c).set_url(""); },
                      {"destinations[0].urls[0].url: missing or empty"}},
        ViolationCase{"LongUrl",
                      [](Config& c) {
                        Url0(c).set_url("https://h.example/" + std::string(2100, 'a'));
                      },
                      {"destinations[0].urls[0].url", "at most 2048 allowed"}},
        ViolationCase{"DuplicateUrl",
                      [](Config& c) { Dest(c).add_urls()->set_url(Url0(c).url()); },
                      {"destinations[0].urls[1].url: same URL as destinations[0].urls[0]"}},
        ViolationCase{"HeaderNameNotToken", [](Config& c) { AddHeader(c, "X Bad", "v"); },
                      {"destinations[0].urls[0].headers[\"X Bad\"]: header name is not an RFC "
                       "7230 token"}},
        ViolationCase{"HeaderNameEmpty", [](Config& c) { AddHeader(c, "", "v"); },
                      {"destinations[0].urls[0].headers[\"\"]: empty header name"}},
        ViolationCase{"ReservedContentType", [](Config& c) { AddHeader(c, "content-type", "x"); },
                      {"destinations[0].urls[0].headers[\"content-type\"]: header name is "
                       "reserved"}},
        ViolationCase{"ReservedUserAgent", [](Config& c) { AddHeader(c, "User-Agent", "x"); },
                      {"headers[\"User-Agent\"]: header name is reserved"}},
        ViolationCase{"ReservedSignature", [](Config& c) { AddHeader(c, "X-SIGNATURE", "x"); },
                      {"headers[\"X-SIGNATURE\"]: header name is reserved"}},
        ViolationCase{"ReservedContentLength",
                      [](Config& c) { AddHeader(c, "Content-Length", "1"); },
                      {"headers[\"Content-Length\"]: header name is reserved"}},
        ViolationCase{"ReservedHost", [](Config& c) { AddHeader(c, "host", "x"); },
                      {"headers[\"host\"]: header name is reserved"}},
        ViolationCase{"StandardWebhooksHeader",
                      [](Config& c) {
                        Dest(c).mutable_options()->set_standard_webhooks(true);
                        AddHeader(c, "Webhook-Id", "x");
                      },
                      {"headers[\"Webhook-Id\"]: header name is reserved when "
                       "options.standard_webhooks is on"}},
        ViolationCase{"DuplicateHeader", [](Config& c) { AddHeader(c, "x-api-key", "x"); },
                      {"headers[\"x-api-key\"]: duplicate header name"}},
        ViolationCase{"HeaderValueCrLf", [](Config& c) { AddHeader(c, "X-A", "a\r\nX-Evil: 1"); },
                      {"destinations[0].urls[0].headers[\"X-A\"]: header value contains CR, LF, "
                       "NUL"}},
        ViolationCase{"HeaderValueNul",
                      [](Config& c) { AddHeader(c, "X-A", std::string("a\0b", 3)); },
                      {"headers[\"X-A\"]: header value contains CR, LF, NUL"}},
        ViolationCase{"UnknownSource",
                      [](Config& c) { Dest(c).add_sources("mobile"); },
                      {"destinations[0].sources: unknown source \"mobile\""}},
        ViolationCase{"SourceListedTwice", [](Config& c) { Dest(c).add_sources("web"); },
                      {"destinations[0].sources: source \"web\" listed twice"}},
        ViolationCase{"NoSources", [](Config& c) { Dest(c).clear_sources(); },
                      {"destinations[0].sources: no sources, at least 1 required"}},
        ViolationCase{"DuplicateWriteKeyAcrossSources",
                      [](Config& c) {
                        auto* s = c.add_sources();
                        s->set_id("app");
                        s->add_write_keys("wk_other");
                        s->add_write_keys("wk_live_123");
                      },
                      {"sources[1].write_keys[1]: duplicate write key (also "
                       "sources[0].write_keys[0])"}},
        ViolationCase{"DuplicateWriteKeyWithinSource",
                      [](Config& c) { c.mutable_sources(0)->add_write_keys("wk_live_123"); },
                      {"sources[0].write_keys[1]: duplicate write key"}},
        ViolationCase{"NoWriteKeys", [](Config& c) { c.mutable_sources(0)->clear_write_keys(); },
                      {"sources[0].write_keys: no write keys, at least 1 required"}},
        ViolationCase{"EmptyWriteKey", [](Config& c) { c.mutable_sources(0)->add_write_keys(""); },
                      {"sources[0].write_keys[1]: empty write key"}},
        ViolationCase{"WriteKeyWithSpace",
                      [](Config& c) { c.mutable_sources(0)->add_write_keys("a b"); },
                      {"sources[0].write_keys[1]: write key may hold only"}},
        ViolationCase{"DuplicateSourceId",
                      [](Config& c) {
                        auto* s = c.add_sources();
                        s->set_id("web");
                        s->add_write_keys("wk_2");
                      },
                      {"sources[1].id: duplicate source id \"web\" (also sources[0])"}},
        ViolationCase{"DuplicateDestinationId",
                      [](Config& c) { *c.add_destinations() = c.destinations(0); },
                      {"destinations[1].id: duplicate destination id \"orders-hook\" (also "
                       "destinations[0])"}},
        ViolationCase{"EmptySourceId", [](Config& c) { c.mutable_sources(0)->clear_id(); },
                      {"sources[0].id: missing or empty"}},
        ViolationCase{"EmptyDestinationId", [](Config& c) { Dest(c).clear_id(); },
                      {"destinations[0].id: missing or empty"}},
        ViolationCase{"BadIdCharacters", [](Config& c) { Dest(c).set_id("orders hook"); },
                      {"destinations[0].id \"orders hook\": must be 1 to 64 letters, digits"}},
        ViolationCase{"UnknownType", [](Config& c) { Dest(c).set_type("email"); },
                      {"destinations[0].type \"email\": unknown destination type, must be "
                       "\"webhooks\""}},
        ViolationCase{"MissingType", [](Config& c) { Dest(c).clear_type(); },
                      {"destinations[0].type: missing, must be \"webhooks\""}},
        ViolationCase{"UnknownKindNumber",
                      [](Config& c) {
                        c.mutable_sources(0)->set_kind(static_cast<hookrelay::v1::SourceKind>(9));
                      },
                      {"sources[0].kind: unknown kind 9"}},
        ViolationCase{"TimeoutTooSmall",
                      [](Config& c) { Dest(c).mutable_options()->set_timeout_ms(99); },
                      {"destinations[0].options.timeout_ms: 99, must be between 100 and 60000"}},
        ViolationCase{"TimeoutTooLarge",
                      [](Config& c) { Dest(c).mutable_options()->set_timeout_ms(60001); },
                      {"destinations[0].options.timeout_ms: 60001, must be between 100 and "
                       "60000"}},
        ViolationCase{"RetryWindowTooLarge",
                      [](Config& c) {
                        Dest(c).mutable_options()->set_retry_window_seconds(7 * 86400 + 1);
                      },
                      {"destinations[0].options.retry_window_seconds: 604801, must be between 1 "
                       "and 604800"}},
        ViolationCase{"RateLimitTooLarge",
                      [](Config& c) { Dest(c).mutable_options()->set_rate_limit_per_second(100001); },
                      {"destinations[0].options.rate_limit_per_second: 100001, must be between 1 "
                       "and 100000 (omit it for no limit)"}},
        ViolationCase{"BreakerWithoutFailures",
                      [](Config& c) {
                        Dest(c).mutable_options()->mutable_circuit_breaker()->set_pause_ms(1000);
                      },
                      {"destinations[0].options.circuit_breaker.failures: missing, must be "
                       "between 1 and 1000 (omit circuit_breaker for none)"}},
        ViolationCase{"BreakerFailuresTooLarge",
                      [](Config& c) {
                        Dest(c).mutable_options()->mutable_circuit_breaker()->set_failures(1001);
                      },
                      {"destinations[0].options.circuit_breaker.failures: 1001, must be between "
                       "1 and 1000"}},
        ViolationCase{"BreakerPauseTooSmall",
                      [](Config& c) {
                        auto* b = Dest(c).mutable_options()->mutable_circuit_breaker();
                        b->set_failures(3);
                        b->set_pause_ms(99);
                      },
                      {"destinations[0].options.circuit_breaker.pause_ms: 99, must be between "
                       "100 and 3600000"}},
        ViolationCase{"BreakerMaxPauseBelowPause",
                      [](Config& c) {
                        auto* b = Dest(c).mutable_options()->mutable_circuit_breaker();
                        b->set_failures(3);
                        b->set_pause_ms(10000);
                        b->set_max_pause_ms(5000);
                      },
                      {"destinations[0].options.circuit_breaker.max_pause_ms: 5000, must be at "
                       "least pause_ms (10000)"}},
        ViolationCase{"InitialBackoffTooSmall",
                      [](Config& c) { Dest(c).mutable_options()->set_initial_backoff_ms(5); },
                      {"destinations[0].options.initial_backoff_ms: 5, must be between 10 and "
                       "3600000"}},
        ViolationCase{"MaxBackoffTooLarge",
                      [](Config& c) {
                        Dest(c).mutable_options()->set_max_backoff_ms(86400001);
                      },
                      {"destinations[0].options.max_backoff_ms: 86400001, must be between 100 "
                       "and 86400000"}},
        ViolationCase{"MaxBackoffBelowInitial",
                      [](Config& c) {
                        Dest(c).mutable_options()->set_initial_backoff_ms(2000);
                        Dest(c).mutable_options()->set_max_backoff_ms(1000);
                      },
                      {"destinations[0].options.max_backoff_ms: 1000, must be at least "
                       "initial_backoff_ms (2000)"}},
        ViolationCase{"DefaultMaxBackoffBelowInitial",
                      [](Config& c) {
                        Dest(c).mutable_options()->set_initial_backoff_ms(1200000);
                      },
                      {"destinations[0].options.max_backoff_ms: 600000 (default), must be at "
                       "least initial_backoff_ms (1200000)"}}),
    [](const ::testing::TestParamInfo<ViolationCase>& info) { return info.param.name; });

// Exactly at the limits is fine: 5 URLs, 5 headers each, options at both ends of their ranges,
// hosts with ports, user info and IPv6 literals.
TEST(ValidateConfigTest, BoundariesAreAccepted) {
  Config config = SpecConfig();
  AddUrls(config, 4);
  for (int i = 0; i < 4; ++i) AddHeader(config, absl::StrCat("X-H", i), "v\tw");
  Dest(config).mutable_urls(1)->set_url("http://user:pw@h.example:8080/a?b=c#d");
  Dest(config).mutable_urls(2)->set_url("https://[::1]:65535/");
  Dest(config).mutable_urls(3)->set_url("HTTPS://H.EXAMPLE");
  Dest(config).set_type("Webhooks");
  EXPECT_EQ(Dest(config).urls_size(), kMaxUrlsPerDestination);
  EXPECT_EQ(Dest(config).urls(0).headers_size(), kMaxHeadersPerUrl);
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);

  auto* options = Dest(config).mutable_options();
  options->set_timeout_ms(100);
  options->set_retry_window_seconds(1);
  options->set_initial_backoff_ms(10);
  options->set_max_backoff_ms(100);
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  options->set_timeout_ms(60000);
  options->set_retry_window_seconds(604800);
  options->set_initial_backoff_ms(3600000);
  options->set_max_backoff_ms(86400000);
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
}

// Several violations come back together, joined with "; ".
TEST(ValidateConfigTest, ReportsAllViolations) {
  Config config = SpecConfig();
  AddUrls(config, 5);
  AddHeader(config, "X Bad", "v");
  Dest(config).add_sources("mobile");
  Dest(config).mutable_options()->set_timeout_ms(1);
  const absl::Status status = ValidateConfig(config);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("destinations[0].urls: 6 entries, at most 5 allowed"),
                    HasSubstr("destinations[0].urls[0].headers[\"X Bad\"]"),
                    HasSubstr("destinations[0].sources: unknown source \"mobile\""),
                    HasSubstr("destinations[0].options.timeout_ms: 1, must be between")));
  const std::vector<std::string> parts = absl::StrSplit(std::string(status.message()), "; ");
  EXPECT_EQ(parts.size(), 4u) << status;
}

// Secrets never appear in messages: write keys, shared secrets, header values, URL credentials.
TEST(ValidateConfigTest, SecretsNeverAppearInMessages) {
  Config config;
  auto* a = config.add_sources();
  a->set_id("a");
  a->add_write_keys("wk_SECRET_A");
  a->add_write_keys("wk_SECRET_A");
  auto* b = config.add_sources();
  b->set_id("b");
  b->add_write_keys("wk_SECRET_A");
  b->add_write_keys("wk SECRET_B");
  Destination* d = config.add_destinations();
  d->set_id("d");
  d->set_type("webhooks");
  d->add_sources("a");
  d->set_shared_secret("SECRET_SHARED\n");
  d->add_urls()->set_url("ftp://user:SECRET_PW@h.example/x?token=SECRET_Q");
  auto* h = d->mutable_urls(0)->add_headers();
  h->set_name("X-Api-Key");
  h->set_value("SECRET_HEADER\r\n");
  auto* h2 = d->mutable_urls(0)->add_headers();
  h2->set_name("Host");
  h2->set_value("SECRET_HOST_VALUE");
  const absl::Status status = ValidateConfig(config);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("SECRET"))) << status;
  // The problems themselves are still reported.
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("sources[0].write_keys[1]: duplicate write key"),
                    HasSubstr("sources[1].write_keys[0]: duplicate write key"),
                    HasSubstr("sources[1].write_keys[1]: write key may hold only"),
                    HasSubstr("url \"ftp://redacted@h.example/x?token=redacted\": scheme must be "
                              "http or https"),
                    HasSubstr("headers[\"X-Api-Key\"]: header value contains"),
                    HasSubstr("headers[\"Host\"]: header name is reserved")));
}

// Parse errors do not echo secret values either, even under misspelled keys.
TEST(ParseConfigYamlTest, SecretsNeverAppearInParseErrors) {
  absl::StatusOr<Config> config = ParseConfigYaml(R"yaml(
sources:
  - id: web
    write_key: wk_SECRET_1
    write_keys: [{k: wk_SECRET_2}]
destinations:
  - id: d
    sharedsecret: SECRET_3
    shared_secret: [SECRET_4]
    urls:
      - url: https://h.example
        headers: {X-Api-Key: [SECRET_5]}
)yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), Not(HasSubstr("SECRET"))) << config.status();
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr("sources[0]: unknown key \"write_key\""),
                    HasSubstr("sources[0].write_keys[0]: expected a string"),
                    HasSubstr("destinations[0]: unknown key \"sharedsecret\""),
                    HasSubstr("destinations[0].shared_secret: expected a string")));
}

// Absent options take the documented defaults; given ones are kept.
TEST(EffectiveOptionsTest, AppliesDefaults) {
  Destination d;
  hookrelay::v1::DeliveryOptions o = EffectiveOptions(d);
  EXPECT_EQ(o.timeout_ms(), 5000u);
  EXPECT_EQ(o.retry_window_seconds(), 14400u);
  EXPECT_EQ(o.initial_backoff_ms(), 1000u);
  EXPECT_EQ(o.max_backoff_ms(), 600000u);
  EXPECT_FALSE(o.standard_webhooks());

  d.mutable_options()->set_timeout_ms(250);
  d.mutable_options()->set_standard_webhooks(true);
  o = EffectiveOptions(d);
  EXPECT_EQ(o.timeout_ms(), 250u);
  EXPECT_EQ(o.retry_window_seconds(), 14400u);
  EXPECT_TRUE(o.standard_webhooks());
}

// A valid file loads whole.
TEST(LoadConfigFileTest, LoadsValidFile) {
  const std::string path = TempPath("valid.yaml");
  WriteFile(path, kSpecExample);
  absl::StatusOr<Config> config = LoadConfigFile(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->destinations(0).urls(0).url(), "https://hooks.example.com/segment");
}

// A missing file is NotFound and names the path.
TEST(LoadConfigFileTest, MissingFileNamesPath) {
  const std::string path = TempPath("does-not-exist.yaml");
  absl::StatusOr<Config> config = LoadConfigFile(path);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(path));
}

// A directory cannot be read as a file; the error names it.
TEST(LoadConfigFileTest, DirectoryNamesPath) {
  const std::string path = TempPath("");
  absl::StatusOr<Config> config = LoadConfigFile(path);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(path));
}

// Syntax and validation errors are prefixed with the path; nothing is returned half-applied.
TEST(LoadConfigFileTest, InvalidFileIsRefusedWhole) {
  const std::string bad_syntax = TempPath("bad-syntax.yaml");
  WriteFile(bad_syntax, "sources: [\n");
  absl::StatusOr<Config> config = LoadConfigFile(bad_syntax);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr(bad_syntax), HasSubstr("YAML syntax error at line")));

  const std::string invalid = TempPath("invalid.yaml");
  WriteFile(invalid, std::string(kSpecExample) + "  - id: second\n    type: webhooks\n");
  config = LoadConfigFile(invalid);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr(invalid), HasSubstr("destinations[1].sources: no sources"),
                    HasSubstr("destinations[1].urls: no URLs")));
}

// Write keys travel in HTTP Basic auth: 1..128 characters of A-Z a-z 0-9 . _ ~ + / = -; the
// error names the position and the rule, never the key.
TEST(ValidateConfigTest, WriteKeyCharactersAndLength) {
  auto config_with_key = [](const std::string& key) {
    Config config;
    auto* source = config.add_sources();
    source->set_id("web");
    source->add_write_keys(key);
    return config;
  };
  for (const std::string& good : {std::string("wk_live_123"), std::string("a.b~c+d/e=f-g"),
                                  std::string(128, 'k')}) {
    EXPECT_TRUE(ValidateConfig(config_with_key(good)).ok()) << good;
  }
  for (const std::string& bad :
       {std::string("wk:colon"), std::string("wk\x04" "ctl"), std::string("wk\xc3\xa9"),
        std::string("wk key"), std::string("wk@x"), std::string(129, 'k')}) {
    const absl::Status status = ValidateConfig(config_with_key(bad));
    ASSERT_FALSE(status.ok()) << bad;
    EXPECT_THAT(std::string(status.message()), HasSubstr("sources[0].write_keys[0]: write key"));
    if (bad.size() < 100) {
      EXPECT_THAT(std::string(status.message()), Not(HasSubstr(bad)));
    }
  }
  EXPECT_THAT(std::string(ValidateConfig(config_with_key(std::string(129, 'k'))).message()),
              HasSubstr("at most 128"));
}

// Idempotency-Key is set by hookrelay on every request: a static header of that name (any case)
// is refused like Content-Type.
TEST(ValidateConfigTest, IdempotencyKeyIsReserved) {
  Config config;
  auto* source = config.add_sources();
  source->set_id("web");
  source->add_write_keys("wk");
  Destination* d = config.add_destinations();
  d->set_id("d");
  d->set_type("webhooks");
  d->add_sources("web");
  d->add_urls()->set_url("https://h.example/x");
  auto* h = d->mutable_urls(0)->add_headers();
  h->set_name("idempotency-KEY");
  h->set_value("x");
  const absl::Status status = ValidateConfig(config);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("headers[\"idempotency-KEY\"]: header name is reserved"));
}

// shared_secret_file: the loader reads the secret from the file (a mounted Secret), so it never
// sits in the config file; a missing file, or both fields, are refused naming the field.
TEST(LoadConfigFileTest, SharedSecretFromFile) {
  const std::string secret_path = TempPath("orders-hook.secret");
  WriteFile(secret_path, "s3cr3t-from-file\n");
  const std::string yaml = absl::StrCat(R"yaml(
sources:
  - {id: web, name: Web, kind: web, write_keys: [wk_live_123]}
destinations:
  - id: orders-hook
    type: webhooks
    sources: [web]
    enabled: true
    shared_secret_file: )yaml", secret_path, R"yaml(
    urls:
      - url: https://hooks.example.com/segment
)yaml");
  const std::string path = TempPath("secret-file.yaml");
  WriteFile(path, yaml);
  absl::StatusOr<Config> config = LoadConfigFile(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->destinations(0).shared_secret(), "s3cr3t-from-file");
  EXPECT_TRUE(config->destinations(0).shared_secret_file().empty());

  WriteFile(path, absl::StrReplaceAll(yaml, {{secret_path, TempPath("missing.secret")}}));
  absl::StatusOr<Config> missing = LoadConfigFile(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("destinations[0].shared_secret_file: secret file"));

  WriteFile(path, absl::StrReplaceAll(yaml, {{"    urls:", "    shared_secret: inline\n    urls:"}}));
  absl::StatusOr<Config> both = LoadConfigFile(path);
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(std::string(both.status().message()), HasSubstr("not both"));
  EXPECT_THAT(std::string(both.status().message()), Not(HasSubstr("inline")));
}

constexpr char kAudienceBase[] = R"yaml(
sources:
  - {id: web, name: Web, kind: web, write_keys: [wk_web]}
  - {id: app, name: App, kind: mobile, write_keys: [wk_app]}
)yaml";

// The audience shape of SPEC §6.2 in the YAML bootstrap: all/any, trait and event conditions,
// typed values, the sync interval.
TEST(AudienceConfigTest, ParsesRulesAndTypedValues) {
  absl::StatusOr<Config> config = ParseConfigYaml(absl::StrCat(kAudienceBase, R"yaml(
audiences:
  - id: power-users
    name: Power Users!
    sources: [web, app]
    sync_interval: 5m
    rule:
      all:
        - {trait: plan, op: eq, value: pro}
        - {trait: seats, op: gte, value: 10}
        - {trait: beta, op: eq, value: true}
        - {trait: zip, op: eq, value: "02139"}
        - {trait: email, op: exists}
        - {event: Order Completed, count_gte: 3, within: 30d}
        - {event: Churned, count_lte: 0, within: 1h}
)yaml"));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(ValidateConfig(*config).ok()) << ValidateConfig(*config);
  ASSERT_EQ(config->audiences_size(), 1);
  const hookrelay::v1::Audience& a = config->audiences(0);
  EXPECT_EQ(a.sync_interval_seconds(), 300u);
  EXPECT_EQ(a.rule().match(), "all");
  ASSERT_EQ(a.rule().conditions_size(), 7);
  EXPECT_EQ(a.rule().conditions(0).value().string_value(), "pro");
  EXPECT_EQ(a.rule().conditions(1).value().number_value(), 10);
  EXPECT_TRUE(a.rule().conditions(2).value().bool_value());
  EXPECT_EQ(a.rule().conditions(3).value().string_value(), "02139");  // quoted: a string
  EXPECT_FALSE(a.rule().conditions(4).has_value());
  EXPECT_EQ(a.rule().conditions(5).count_gte(), 3u);
  EXPECT_TRUE(a.rule().conditions(6).has_count_lte());
  EXPECT_EQ(a.rule().conditions(6).count_lte(), 0u);
}

// The rule's canonical shape (match + conditions, as in the admin API's JSON), the shorthand
// (all: / any: list) and the API's JSON itself read as the same rule.
TEST(AudienceConfigTest, CanonicalAndShorthandRulesAreTheSame) {
  absl::StatusOr<Config> config = ParseConfigYaml(absl::StrCat(kAudienceBase, R"yaml(
audiences:
  - id: canonical
    name: Canonical
    sources: [web]
    rule:
      match: any
      conditions:
        - {trait: plan, op: eq, value: pro}
        - {event: Order Completed, count_gte: 3, within: 30d}
  - id: shorthand
    name: Shorthand
    sources: [web]
    rule:
      any:
        - {trait: plan, op: eq, value: pro}
        - {event: Order Completed, count_gte: 3, within: 30d}
  - id: json
    name: Json
    sources: [web]
    rule: {"match": "any", "conditions": [{"trait": "plan", "op": "eq", "value": "pro"},
           {"event": "Order Completed", "countGte": 3, "within": "30d"}]}
)yaml"));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(ValidateConfig(*config).ok()) << ValidateConfig(*config);
  ASSERT_EQ(config->audiences_size(), 3);
  EXPECT_EQ(config->audiences(0).rule().match(), "any");
  ASSERT_EQ(config->audiences(0).rule().conditions_size(), 2);
  EXPECT_EQ(config->audiences(0).rule().SerializeAsString(),
            config->audiences(1).rule().SerializeAsString());
  // The admin API's JSON, pasted into the file (YAML is a superset of JSON), is the same rule.
  EXPECT_EQ(config->audiences(0).rule().SerializeAsString(),
            config->audiences(2).rule().SerializeAsString());
}

// Each bad audience is refused with the field path and the rule broken.
TEST(AudienceConfigTest, ViolationsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{id: a, name: A, sources: [web], rule: {all: [{trait: plan, op: like, value: x}]}}",
       "audiences[0].rule.conditions[0].op: \"like\" is not one of eq, neq"},
      {"{id: a, name: A, sources: [web], rule: {all: [{event: E, count_gte: 1, within: 2w}]}}",
       "audiences[0].rule.conditions[0].within: \"2w\" expected a unit m"},
      {"{id: a, name: A, sources: [web], rule: {all: [{event: E, count_gte: 1, within: 91d}]}}",
       "within: \"91d\" at most 90d"},
      {"{id: a, name: A, sources: [nope], rule: {any: [{trait: t, op: exists}]}}",
       "audiences[0].sources: unknown source \"nope\""},
      {"{id: a, name: A, sources: [web], rule: {all: [{trait: n, op: gt, value: big}]}}",
       "audiences[0].rule.conditions[0].value: op gt compares numbers"},
      {"{id: a, name: A, sources: [web], rule: {all: [{event: E, within: 1h}]}}",
       "audiences[0].rule.conditions[0]: an event condition needs count_gte and/or count_lte"},
      {"{id: a, name: A, sources: [web], rule: {all: [{trait: t, op: eq, value: x, event: E}]}}",
       "audiences[0].rule.conditions[0]: give either a trait condition"},
      {"{id: a, name: '!!!', sources: [web], rule: {all: [{trait: t, op: exists}]}}",
       "audiences[0].name \"!!!\": needs a letter or digit"},
      {"{id: a, name: A, sources: [web], rule: {}}",
       "audiences[0].rule.match: missing; give match \"all\" or \"any\""},
      {"{id: a, name: A, sources: [web], rule: {match: some, conditions: [{trait: t, op: exists}]}}",
       "audiences[0].rule.match: \"some\" is not \"all\" or \"any\""},
      {"{id: a, name: A, sources: [web], rule: {match: all, conditions: []}}",
       "audiences[0].rule.conditions: no conditions, at least 1"},
      {"{id: a, name: A, sources: [web], rule: {match: all, all: [{trait: t, op: exists}]}}",
       "audiences[0].rule: give match and conditions, or the shorthand"},
      {"{id: a, name: A, sources: [web], rule: {all: [{trait: t, op: exists}], any: []}}",
       "audiences[0].rule.any: give \"all\" or \"any\", not both"},
      {"{id: a, name: A, sources: [web], rule: {all: [{event: E, count_gte: 5, count_lte: 2, within: 1d}]}}",
       "count_lte: 2 is below count_gte 5"},
      {"{id: a, name: A, sources: [web], sync_interval: 2s, rule: {all: [{trait: t, op: exists}]}}",
       "audiences[0].sync_interval: 2 s, allowed 10 s to 86400 s"},
  };
  for (const auto& [audience, message] : cases) {
    absl::StatusOr<Config> config =
        ParseConfigYaml(absl::StrCat(kAudienceBase, "audiences:\n  - ", audience, "\n"));
    absl::Status status = config.ok() ? ValidateConfig(*config) : config.status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << audience;
    EXPECT_THAT(std::string(status.message()), HasSubstr(message)) << audience;
  }
  // Two audiences whose names give the same trait.
  absl::StatusOr<Config> config = ParseConfigYaml(absl::StrCat(kAudienceBase, R"yaml(
audiences:
  - {id: a, name: Power Users, sources: [web], rule: {all: [{trait: t, op: exists}]}}
  - {id: b, name: power-users, sources: [web], rule: {all: [{trait: t, op: exists}]}}
)yaml"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(std::string(ValidateConfig(*config).message()),
              HasSubstr("audiences[1].name \"power-users\": same trait name \"power_users\""));
}

TEST(AudienceTraitNameTest, SnakeCase) {
  EXPECT_EQ(AudienceTraitName("Power Users!"), "power_users");
  EXPECT_EQ(AudienceTraitName("  High--Value   Customers 2024 "), "high_value_customers_2024");
  EXPECT_EQ(AudienceTraitName("VIP"), "vip");
  EXPECT_EQ(AudienceTraitName("7-day actives"), "7_day_actives");
  EXPECT_EQ(AudienceTraitName("Café Lovers"), "café_lovers");
  EXPECT_EQ(AudienceTraitName("Клиенты VIP"), "клиенты_vip");
  EXPECT_EQ(AudienceTraitName("ΑΓΑΠΗ Ѐ"), "αγαπη_ѐ");
  EXPECT_EQ(AudienceTraitName("2024 Kunden – Über «Alle»"), "2024_kunden_über_alle");
  EXPECT_EQ(AudienceTraitName("Fans 🎉 2025"), "fans_2025");
  EXPECT_EQ(AudienceTraitName("!!!"), "");
  EXPECT_EQ(AudienceTraitName(""), "");
}

TEST(AudienceWindowTest, Parses) {
  EXPECT_EQ(*ParseAudienceWindow("15m"), absl::Minutes(15));
  EXPECT_EQ(*ParseAudienceWindow("1h"), absl::Hours(1));
  EXPECT_EQ(*ParseAudienceWindow("30d"), absl::Hours(24 * 30));
  EXPECT_EQ(*ParseAudienceWindow("90d"), absl::Hours(24 * 90));
  for (const char* bad : {"", "d", "0d", "-1h", "1w", "1.5h", "91d", "h1"}) {
    EXPECT_FALSE(ParseAudienceWindow(bad).ok()) << bad;
  }
}


constexpr char kFilterBase[] = R"yaml(
sources:
  - {id: web, write_keys: [wk_1]}
destinations:
  - id: d
    type: webhooks
    sources: [web]
    urls: [{url: "https://h.example/x"}]
)yaml";

// A destination's filter maps from YAML field by field, values typed like audience values, and
// is valid.
TEST(FilterConfigTest, ParsesTypesEventsAndConditions) {
  absl::StatusOr<Config> config = ParseConfigYaml(absl::StrCat(kFilterBase, R"yaml(
    filter:
      types: [track, identify]
      events: ["Order *", Signed Up]
      where:
        - {path: properties.plan, op: eq, value: pro}
        - {path: properties.total, op: gte, value: 10.5}
        - {path: context.app.version, op: in, value: ["1.2", 3, true]}
        - {path: traits.email, op: exists}
        - {path: userId, op: contains, value: "0"}
)yaml"));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(ValidateConfig(*config).ok()) << ValidateConfig(*config);
  const hookrelay::v1::DestinationFilter& f = config->destinations(0).filter();
  EXPECT_THAT(std::vector<std::string>(f.types().begin(), f.types().end()),
              ::testing::ElementsAre("track", "identify"));
  EXPECT_THAT(std::vector<std::string>(f.events().begin(), f.events().end()),
              ::testing::ElementsAre("Order *", "Signed Up"));
  ASSERT_EQ(f.where_size(), 5);
  EXPECT_EQ(f.where(0).path(), "properties.plan");
  EXPECT_EQ(f.where(0).value().string_value(), "pro");
  EXPECT_EQ(f.where(1).value().number_value(), 10.5);
  ASSERT_EQ(f.where(2).value().list_value().values_size(), 3);
  EXPECT_EQ(f.where(2).value().list_value().values(0).string_value(), "1.2");  // quoted
  EXPECT_EQ(f.where(2).value().list_value().values(1).number_value(), 3);
  EXPECT_TRUE(f.where(2).value().list_value().values(2).bool_value());
  EXPECT_FALSE(f.where(3).has_value());
  EXPECT_EQ(f.where(4).value().string_value(), "0");
}

// Each bad filter is refused naming the field path and the rule or limit broken.
TEST(FilterConfigTest, ViolationsNameTheField) {
  const std::string many_values = [] {
    std::string out = "[";
    for (int i = 0; i <= kMaxFilterInValues; ++i) absl::StrAppend(&out, i > 0 ? "," : "", i);
    return out + "]";
  }();
  const std::string many_conditions = [] {
    std::string out = "[";
    for (int i = 0; i <= kMaxFilterConditions; ++i) {
      absl::StrAppend(&out, i > 0 ? "," : "", "{path: traits.a, op: exists}");
    }
    return out + "]";
  }();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{where: [{path: properties.a, op: exists}, {path: properties.plan, op: like, value: x}]}",
       "destinations[0].filter.where[1].op: unknown op \"like\", one of eq neq in exists gt gte "
       "lt lte contains"},
      {"{where: [{path: properties.plan, value: x}]}",
       "destinations[0].filter.where[0].op: missing, one of eq neq"},
      {"{types: [track, Track]}",
       "destinations[0].filter.types[1]: unknown type \"Track\", one of track identify page"},
      {"{types: [page, page]}", "destinations[0].filter.types[1]: type \"page\" listed twice"},
      {"{types: [identify], events: [Signed Up]}",
       "destinations[0].filter.events: names track events, but types leaves out track"},
      {"{events: [\"Order * Done\"]}",
       "destinations[0].filter.events[0] \"Order * Done\": * is allowed only at the end"},
      {"{events: [\"\"]}", "destinations[0].filter.events[0]: empty"},
      {"{where: [{path: plan, op: exists}]}",
       "destinations[0].filter.where[0].path \"plan\": must start with properties, traits, "
       "context"},
      {"{where: [{path: userId.x, op: exists}]}",
       "destinations[0].filter.where[0].path \"userId.x\": userId is a string, it has no fields"},
      {"{where: [{path: properties..a, op: exists}]}",
       "destinations[0].filter.where[0].path \"properties..a\": empty segment"},
      {"{where: [{path: properties.a.b.c.d.e.f.g.h.i.j, op: exists}]}",
       "destinations[0].filter.where[0].path: 11 segments, at most 10 allowed"},
      {absl::StrCat("{where: [{path: properties.", std::string(kMaxFilterPathLength, 'a'),
                    ", op: exists}]}"),
       "destinations[0].filter.where[0].path: 267 characters, at most 256 allowed"},
      {"{where: [{path: properties.n, op: gt, value: big}]}",
       "destinations[0].filter.where[0].value: op gt compares numbers, give a number"},
      {"{where: [{path: properties.n, op: lte}]}",
       "destinations[0].filter.where[0].value: op lte compares numbers"},
      {"{where: [{path: properties.n, op: in, value: x}]}",
       "destinations[0].filter.where[0].value: op in takes a list"},
      {"{where: [{path: properties.n, op: in, value: []}]}",
       "destinations[0].filter.where[0].value: empty list"},
      {absl::StrCat("{where: [{path: properties.n, op: in, value: ", many_values, "}]}"),
       "destinations[0].filter.where[0].value: 101 values, at most 100 allowed"},
      {"{where: [{path: properties.n, op: exists, value: 1}]}",
       "destinations[0].filter.where[0].value: not used with op exists"},
      {"{where: [{path: properties.n, op: contains, value: 3}]}",
       "destinations[0].filter.where[0].value: op contains looks for a string"},
      {"{where: [{path: properties.n, op: eq}]}",
       "destinations[0].filter.where[0].value: missing for op eq"},
      {absl::StrCat("{where: [{path: properties.n, op: eq, value: ",
                    std::string(kMaxFilterValueLength + 1, 'v'), "}]}"),
       "destinations[0].filter.where[0].value: 1025 characters, at most 1024 allowed"},
      {absl::StrCat("{where: ", many_conditions, "}"),
       "destinations[0].filter.where: 21 conditions, at most 20 allowed"},
      {"{where: [{path: properties.a, op: exists, values: 1}]}",
       "destinations[0].filter.where[0]: unknown key \"values\""},
      {"{typ: [track]}", "destinations[0].filter: unknown key \"typ\""},
      {"[track]", "destinations[0].filter: expected a mapping with types, events and/or where"},
  };
  for (const auto& [filter, message] : cases) {
    absl::StatusOr<Config> config =
        ParseConfigYaml(absl::StrCat(kFilterBase, "    filter: ", filter, "\n"));
    absl::Status status = config.ok() ? ValidateConfig(*config) : config.status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << filter;
    EXPECT_THAT(std::string(status.message()), HasSubstr(message)) << filter;
  }
}

// The ops and roots the filter validator and the routing step share.
TEST(FilterConfigTest, OpAndRootNames) {
  for (absl::string_view name : absl::StrSplit(kFilterOpNames, ' ')) {
    EXPECT_TRUE(ParseFilterOp(name).has_value()) << name;
  }
  EXPECT_FALSE(ParseFilterOp("EQ").has_value());
  EXPECT_FALSE(ParseFilterOp("like").has_value());
  EXPECT_EQ(ParseFilterRoot("properties"), FilterRoot::kProperties);
  EXPECT_EQ(ParseFilterRoot("userId"), FilterRoot::kUserId);
  EXPECT_FALSE(ParseFilterRoot("userid").has_value());
}

// A secret rotation in YAML (SPEC §5.4): the previous secret inline or from a file, the end of the
// overlap as an RFC 3339 time; each mistake is refused naming the field, never showing a secret.
TEST(RotationConfigTest, ParsesFromYamlAndFile) {
  const std::string previous_path = TempPath("previous.secret");
  WriteFile(previous_path, "old-from-file\n");
  const std::string yaml = absl::StrCat(kFilterBase, R"yaml(
    shared_secret: new-secret
    rotation:
      previous_secret_file: )yaml", previous_path, R"yaml(
      ends_at: "2026-12-01T12:00:00.250Z"
)yaml");
  const std::string path = TempPath("rotation.yaml");
  WriteFile(path, yaml);
  absl::StatusOr<Config> config = LoadConfigFile(path);
  ASSERT_TRUE(config.ok()) << config.status();
  const hookrelay::v1::SecretRotation& r = config->destinations(0).rotation();
  EXPECT_EQ(r.previous_secret(), "old-from-file");
  EXPECT_TRUE(r.previous_secret_file().empty());
  absl::Time expected;
  std::string error;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, "2026-12-01T12:00:00.250Z", &expected, &error));
  EXPECT_EQ(r.ends_at().seconds(), absl::ToUnixSeconds(expected));
  EXPECT_EQ(r.ends_at().nanos(), 250000000);
}

TEST(RotationConfigTest, ViolationsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"    shared_secret: new-one\n    rotation: {ends_at: \"2026-12-01T12:00:00Z\"}\n",
       "destinations[0].rotation.previous_secret: missing"},
      {"    shared_secret: new-one\n    rotation: {previous_secret: old-one}\n",
       "destinations[0].rotation.ends_at: missing"},
      {"    rotation: {previous_secret: old-one, ends_at: \"2026-12-01T12:00:00Z\"}\n",
       "destinations[0].rotation: no shared_secret (the new secret) to rotate to"},
      {"    shared_secret: same-one\n"
       "    rotation: {previous_secret: same-one, ends_at: \"2026-12-01T12:00:00Z\"}\n",
       "destinations[0].rotation.previous_secret: the same as shared_secret"},
      {"    shared_secret: new-one\n"
       "    rotation: {previous_secret: old-one, ends_at: \"tomorrow\"}\n",
       "destinations[0].rotation.ends_at: \"tomorrow\" is not an RFC 3339 time"},
      {"    shared_secret: new-one\n    rotation: [old-one]\n",
       "destinations[0].rotation: expected a mapping {previous_secret, ends_at}"},
      {"    shared_secret: new-one\n"
       "    rotation: {previous_secret: old-one, ends_at: \"2026-12-01T12:00:00Z\", grace: 1}\n",
       "destinations[0].rotation: unknown key \"grace\""},
  };
  for (const auto& [yaml, want] : cases) {
    absl::StatusOr<Config> config = ParseConfigYaml(absl::StrCat(kFilterBase, yaml));
    const absl::Status status = config.ok() ? ValidateConfig(*config) : config.status();
    EXPECT_THAT(std::string(status.message()), HasSubstr(want)) << yaml;
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr("old-one"))) << yaml;
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr("new-one"))) << yaml;
  }
}

}  // namespace
}  // namespace hookrelay::common
