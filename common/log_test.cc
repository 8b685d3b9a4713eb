#include "common/log.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rapidjson/error/en.h"

#include "common/clock.h"

namespace hookrelay::common {
namespace {

using ::testing::HasSubstr;

// Captures lines through the test sink; restores every global setting afterwards.
class LogTest : public ::testing::Test {
 protected:
  LogTest() : clock_(absl::FromUnixMillis(1763719200123)) {  // 2025-11-21T10:00:00.123Z
    SetLogClockForTesting(&clock_);
    SetLogSinkForTesting([this](std::string_view line) {
      absl::MutexLock lock(&mu_);
      lines_.emplace_back(line);
    });
  }
  ~LogTest() override {
    SetLogSinkForTesting(nullptr);
    SetLogClockForTesting(nullptr);
    SetMinLogLevel(LogLevel::kInfo);
  }

  std::vector<std::string> Lines() {
    absl::MutexLock lock(&mu_);
    return lines_;
  }

  static void ParseJson(const std::string& line, rapidjson::Document& doc) {
    doc.Parse<rapidjson::kParseValidateEncodingFlag>(line.data(), line.size());
    ASSERT_FALSE(doc.HasParseError())
        << rapidjson::GetParseError_En(doc.GetParseError()) << " at " << doc.GetErrorOffset()
        << " in " << line;
    ASSERT_TRUE(doc.IsObject());
  }

  ManualClock clock_;
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

// The line has exactly the documented shape: ts, level, msg, then the fields in order.
TEST_F(LogTest, WritesDocumentedShape) {
  LogInfo("collector started", {{"grpc_address", "0.0.0.0:50051"}});
  ASSERT_EQ(Lines().size(), 1u);
  EXPECT_EQ(Lines()[0],
            R"({"ts":"2025-11-21T10:00:00.123Z","level":"info","msg":"collector started",)"
            R"("grpc_address":"0.0.0.0:50051"})");
}

// Every value kind is written as the matching JSON type.
TEST_F(LogTest, FieldKinds) {
  const std::string owned = "owned";
  LogWarning("kinds", {{"s", owned},
                       {"sv", std::string_view("view")},
                       {"i", -42},
                       {"u64", std::numeric_limits<uint64_t>::max()},
                       {"i64", std::numeric_limits<int64_t>::min()},
                       {"d", 0.25},
                       {"nan", std::numeric_limits<double>::quiet_NaN()},
                       {"b", true},
                       {"latency_s", absl::Milliseconds(1500)},
                       {"null_cstr", static_cast<const char*>(nullptr)}});
  ASSERT_EQ(Lines().size(), 1u);
  const std::string line = Lines()[0];
  EXPECT_THAT(line, HasSubstr(R"("level":"warning")"));
  EXPECT_THAT(line, HasSubstr(R"("s":"owned","sv":"view","i":-42,"u64":18446744073709551615,)"
                              R"("i64":-9223372036854775808,"d":0.25,"nan":null,"b":true,)"
                              R"("latency_s":1.5,"null_cstr":"")"));
  rapidjson::Document doc;
  ParseJson(line, doc);
}

// Quotes, backslashes, control characters, multi-byte UTF-8 and invalid bytes all come out as
// valid JSON that decodes to the intended text (invalid bytes as U+FFFD).
TEST_F(LogTest, EscapesTrickyStrings) {
  struct Case {
    std::string in;
    std::string decoded;
  };
  const std::vector<Case> cases = {
      {"plain", "plain"},
      {"quote\" backslash\\ slash/", "quote\" backslash\\ slash/"},
      {"nl\ncr\rtab\t", "nl\ncr\rtab\t"},
      {std::string("nul\0x", 5), std::string("nul\0x", 5)},
      {"\x01\x1f\x7f", "\x01\x1f\x7f"},
      {"caf\xC3\xA9 \xF0\x9F\x98\x80 \xE2\x80\xA8", "caf\xC3\xA9 \xF0\x9F\x98\x80 \xE2\x80\xA8"},
      {"bad\xFF", "bad\xEF\xBF\xBD"},
      {"overlong\xC0\xAF", "overlong\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"surrogate\xED\xA0\x80", "surrogate\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"truncated\xE2\x82", "truncated\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"too big\xF4\x90\x80\x80",
       "too big\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xE2\x82\xAC euro", "\xE2\x82\xAC euro"},
  };
  for (const Case& c : cases) {
    LogInfo(c.in, {{c.in, c.in}});
  }
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    for (char ch : lines[i]) {
      EXPECT_GE(static_cast<unsigned char>(ch), 0x20) << "raw control character in line";
    }
    rapidjson::Document doc;
    ParseJson(lines[i], doc);
    ASSERT_TRUE(doc.HasMember("msg"));
    EXPECT_EQ(std::string(doc["msg"].GetString(), doc["msg"].GetStringLength()),
              cases[i].decoded);
    const rapidjson::Value key(cases[i].decoded.data(),
                               static_cast<rapidjson::SizeType>(cases[i].decoded.size()));
    ASSERT_TRUE(doc.HasMember(key));
    EXPECT_EQ(std::string(doc[key].GetString(), doc[key].GetStringLength()), cases[i].decoded);
  }
  EXPECT_THAT(lines[4], HasSubstr(R"(\u0001\u001f\u007f)"));
}

// Fields named like the fixed keys are renamed, so the object never has duplicate keys.
TEST_F(LogTest, ReservedKeysAreRenamed) {
  LogInfo("real", {{"msg", "fake"}, {"level", 1}, {"ts", "x"}});
  ASSERT_EQ(Lines().size(), 1u);
  EXPECT_THAT(Lines()[0], HasSubstr(R"("msg":"real","_msg":"fake","_level":1,"_ts":"x")"));
}

// Lines below the minimum level are dropped; kInfo is the default.
TEST_F(LogTest, FiltersByLevel) {
  EXPECT_EQ(MinLogLevel(), LogLevel::kInfo);
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug));
  LogDebug("d");
  LogInfo("i");
  SetMinLogLevel(LogLevel::kWarning);
  LogInfo("i2");
  LogWarning("w");
  LogError("e");
  SetMinLogLevel(LogLevel::kDebug);
  LogDebug("d2");
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[0], HasSubstr(R"("level":"info","msg":"i")"));
  EXPECT_THAT(lines[1], HasSubstr(R"("level":"warning","msg":"w")"));
  EXPECT_THAT(lines[2], HasSubstr(R"("level":"error","msg":"e")"));
  EXPECT_THAT(lines[3], HasSubstr(R"("level":"debug","msg":"d2")"));
}

// Level names parse in any case; HOOKRELAY_LOG_LEVEL is applied, and a bad value refused.
TEST_F(LogTest, ParsesLevelsAndEnvironment) {
  EXPECT_EQ(ParseLogLevel("DEBUG"), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("warn"), LogLevel::kWarning);
  EXPECT_EQ(ParseLogLevel("Error"), LogLevel::kError);
  EXPECT_EQ(ParseLogLevel("verbose"), std::nullopt);

  setenv("HOOKRELAY_LOG_LEVEL", "debug", 1);
  EXPECT_TRUE(SetMinLogLevelFromEnv().ok());
  EXPECT_EQ(MinLogLevel(), LogLevel::kDebug);
  setenv("HOOKRELAY_LOG_LEVEL", "loud", 1);
  const absl::Status status = SetMinLogLevelFromEnv();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("loud"));
  EXPECT_EQ(MinLogLevel(), LogLevel::kDebug);
  unsetenv("HOOKRELAY_LOG_LEVEL");
  EXPECT_TRUE(SetMinLogLevelFromEnv().ok());
  EXPECT_EQ(MinLogLevel(), LogLevel::kDebug);
}

// A limiter allows its burst, then one line per 1/rate, and reports what it suppressed.
TEST_F(LogTest, RateLimiterAllowsBurstThenRate) {
  LogRateLimiter limiter(/*per_second=*/2.0, /*burst=*/3, clock_);
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_TRUE(limiter.Allow());
  EXPECT_TRUE(limiter.Allow());
  EXPECT_FALSE(limiter.Allow());
  EXPECT_FALSE(limiter.Allow());
  clock_.Advance(absl::Milliseconds(499));
  EXPECT_FALSE(limiter.Allow());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 3u);
  EXPECT_FALSE(limiter.Allow());
  // Refill never exceeds the burst.
  clock_.Advance(absl::Hours(1));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Allow());
  EXPECT_FALSE(limiter.Allow());
}

// LogRateLimited drops excess lines and counts them on the next one; disabled levels cost no token.
TEST_F(LogTest, RateLimitedLogAddsSuppressedCount) {
  LogRateLimiter limiter(1.0, 1, clock_);
  LogRateLimited(limiter, LogLevel::kDebug, "invisible");  // below kInfo: no token taken
  LogRateLimited(limiter, LogLevel::kWarning, "first", {{"destination", "d"}});
  LogRateLimited(limiter, LogLevel::kWarning, "dropped");
  LogRateLimited(limiter, LogLevel::kWarning, "dropped");
  clock_.Advance(absl::Seconds(1));
  LogRateLimited(limiter, LogLevel::kWarning, "second", {{"destination", "d"}});
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], HasSubstr(R"("msg":"first","destination":"d"})"));
  EXPECT_THAT(lines[1], HasSubstr(R"("msg":"second","destination":"d","suppressed":2})"));
}

constexpr int kThreads = 8;
constexpr int kLinesPerThread = 2000;

void LogConcurrently() {
  const std::string payload(300, 'x');
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &payload] {
      for (int i = 0; i < kLinesPerThread; ++i) {
        LogInfo("concurrent", {{"thread", t}, {"i", i}, {"payload", payload}});
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Checks that `lines` are exactly the whole lines LogConcurrently writes, each valid JSON.
void ExpectWholeLines(const std::vector<std::string>& lines) {
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLinesPerThread));
  std::vector<int> next(kThreads, 0);
  for (const std::string& line : lines) {
    rapidjson::Document doc;
    doc.Parse(line.data(), line.size());
    ASSERT_FALSE(doc.HasParseError()) << line;
    ASSERT_TRUE(doc.IsObject() && doc.HasMember("thread") && doc.HasMember("i")) << line;
    const int t = doc["thread"].GetInt();
    ASSERT_GE(t, 0);
    ASSERT_LT(t, kThreads);
    // Each thread's lines appear whole and in its own order.
    EXPECT_EQ(doc["i"].GetInt(), next[t]++);
    EXPECT_EQ(doc["payload"].GetStringLength(), 300u);
  }
}

// Eight threads logging through the sink produce whole lines only.
TEST_F(LogTest, ConcurrentLinesThroughSinkAreWhole) {
  LogConcurrently();
  ExpectWholeLines(Lines());
}

// Eight threads logging to the real stdout (redirected to a file here) produce whole lines only.
TEST_F(LogTest, ConcurrentLinesOnStdoutAreWhole) {
  SetLogSinkForTesting(nullptr);
  const char* dir = getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/stdout.log");
  std::fflush(stdout);
  const int saved = dup(STDOUT_FILENO);
  ASSERT_GE(saved, 0);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_GE(dup2(fd, STDOUT_FILENO), 0);
  close(fd);

  LogConcurrently();

  ASSERT_GE(dup2(saved, STDOUT_FILENO), 0);
  close(saved);
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  const std::string text = contents.str();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  ExpectWholeLines(lines);
}

}  // namespace
}  // namespace hookrelay::common
