// The collector binary as users run it (SPEC §4, §8): a child process on port 0 whose ports are
// read from its log. Acknowledged events survive kill -9 and a restart; SIGTERM drains and exits
// 0; SIGHUP reloads the config, keeping the running one when the new file is broken.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/job.pb.h"
#include "tests/child_process.h"
#include "tests/collector_test_util.h"
#include "tests/test_engines.h"

extern char** environ;

namespace hookrelay::test {
namespace {

using ::hookrelay::v1::Job;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr absl::Duration kWaitTimeout = absl::Seconds(60);

std::string ConfigWithKey(const std::string& key) {
  return absl::StrCat(R"yaml(
sources:
  - id: web
    name: Website
    kind: web
    write_keys: [)yaml", key, R"yaml(]
destinations:
  - id: hook-web
    type: webhooks
    sources: [web]
    enabled: true
    urls:
      - url: https://hooks.example.com/web
)yaml");
}

// Threads that POST batches as fast as the collector answers, each on its own keep-alive
// connection, recording the messageIds of every batch answered 200. A thread stops at its first
// transport error (the collector died or closed the door) or when told to.
class Load {
 public:
  Load(int port, std::string write_key, std::string prefix, int threads, int batch_size)
      : port_(port), write_key_(std::move(write_key)), prefix_(std::move(prefix)),
        batch_size_(batch_size) {
    absl::MutexLock lock(&mu_);
    running_ = threads;
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { Run(t); });
  }
  ~Load() { Stop(); }

  // Waits until at least `n` batches were acknowledged; false if every thread stopped first.
  bool WaitForAckedBatches(int n) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return acked_batches_ >= n || running_ == 0;
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), kWaitTimeout);
    return acked_batches_ >= n;
  }

  // Waits for every thread to stop on its own (after the collector went away).
  void Join() {
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  void Stop() {
    stop_ = true;
    Join();
  }

  std::set<std::string> acked() {
    absl::MutexLock lock(&mu_);
    return acked_;
  }
  int unacknowledged() {
    absl::MutexLock lock(&mu_);
    return unacknowledged_;
  }

 private:
  void Run(int t) {
    std::unique_ptr<HttpConnection> conn;
    for (int b = 0; !stop_ && b < 5000; ++b) {
      std::vector<std::string> ids;
      std::string body = R"({"batch":[)";
      for (int i = 0; i < batch_size_; ++i) {
        ids.push_back(absl::StrCat(prefix_, "-t", t, "-b", b, "-e", i));
        absl::StrAppend(&body, i ? "," : "", R"({"type":"track","userId":"u)", t,
                        R"(","event":"Load","properties":{"batch":)", b, R"(},"messageId":")",
                        ids.back(), R"("})");
      }
      body += "]}";
      if (conn == nullptr) {
        absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(port_);
        if (!c.ok()) break;
        conn = *std::move(c);
      }
      absl::StatusOr<HttpResponse> r = conn->Post("/v1/batch", body, write_key_);
      absl::MutexLock lock(&mu_);
      if (!r.ok() || r->status != 200) {
        unacknowledged_ += 1;
        if (!r.ok()) break;
        if (r->Header("Connection") == "close") conn.reset();
        continue;
      }
      acked_.insert(ids.begin(), ids.end());
      ++acked_batches_;
    }
    absl::MutexLock lock(&mu_);
    --running_;
  }

  const int port_;
  const std::string write_key_;
  const std::string prefix_;
  const int batch_size_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  std::set<std::string> acked_ ABSL_GUARDED_BY(mu_);
  int acked_batches_ ABSL_GUARDED_BY(mu_) = 0;
  int unacknowledged_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
};

std::map<std::string, int> JobsPerMessageId(const EngineSetup& engine, const std::string& data_dir) {
  absl::StatusOr<std::vector<Job>> jobs = ReadAllJobs(engine, data_dir);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  std::map<std::string, int> out;
  if (!jobs.ok()) return out;
  for (const Job& job : *jobs) ++out[job.message_id()];
  return out;
}

void ExpectCleanExit(int status) {
  EXPECT_TRUE(WIFEXITED(status)) << "wait status " << status
                                 << (WIFSIGNALED(status) ? absl::StrCat(", signal ", WTERMSIG(status)) : "");
  if (WIFEXITED(status)) {
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
}

// On both job-store engines (tests/test_engines.h).
class CollectorDurabilityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *engine;
    dir_ = MakeTempDir("collector_durability_test");
    config_path_ = dir_ + "/collector.yaml";
    data_dir_ = dir_ + "/data";
    ASSERT_TRUE(WriteFile(config_path_, ConfigWithKey(kWebKey)).ok());
  }

  absl::StatusOr<std::unique_ptr<ChildProcess>> StartCollector() {
    return StartCollectorProcess(config_path_, data_dir_, CollectorEngineFlags(engine_));
  }

  EngineSetup engine_;
  std::string dir_;
  std::string config_path_;
  std::string data_dir_;
};

// Every batch acknowledged before a mid-stream kill -9 has exactly one job after a restart.
TEST_P(CollectorDurabilityTest, AcknowledgedEventsSurviveKill9) {
  std::set<std::string> acked;
  {
    absl::StatusOr<std::unique_ptr<ChildProcess>> first = StartCollector();
    ASSERT_TRUE(first.ok()) << first.status();
    Load load((*first)->IntField("http_port"), kWebKey, "kill", /*threads=*/4, /*batch_size=*/20);
    ASSERT_TRUE(load.WaitForAckedBatches(60));
    (*first)->Signal(SIGKILL);  // the senders are mid-stream
    const int status = (*first)->Wait();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    load.Join();
    acked = load.acked();
    fprintf(stderr, "acknowledged %zu events before kill -9; %d requests unanswered\n", acked.size(),
            load.unacknowledged());
  }
  ASSERT_GE(acked.size(), 60u * 20u);

  absl::StatusOr<std::unique_ptr<ChildProcess>> second = StartCollector();
  ASSERT_TRUE(second.ok()) << second.status();
  // It serves again after the crash.
  absl::StatusOr<HttpResponse> r = HttpPost((*second)->IntField("http_port"), "/v1/track",
                                            R"({"userId":"u","event":"After","messageId":"after-restart"})",
                                            kWebKey);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200) << r->body;
  (*second)->Signal(SIGTERM);
  ExpectCleanExit((*second)->Wait());
  second->reset();

  const std::map<std::string, int> jobs = JobsPerMessageId(engine_, data_dir_);
  std::vector<std::string> lost;
  for (const std::string& id : acked) {
    auto it = jobs.find(id);
    if (it == jobs.end()) {
      lost.push_back(id);
    } else {
      EXPECT_EQ(it->second, 1) << id;
    }
  }
  EXPECT_THAT(lost, IsEmpty()) << lost.size() << " acknowledged events lost, e.g. " << lost.front();
  EXPECT_EQ(jobs.count("after-restart"), 1u);
}

// SIGTERM under load drains and exits 0, and every acknowledged batch is stored.
TEST_P(CollectorDurabilityTest, SigtermDrainsAndExitsZero) {
  std::set<std::string> acked;
  {
    absl::StatusOr<std::unique_ptr<ChildProcess>> proc = StartCollector();
    ASSERT_TRUE(proc.ok()) << proc.status();
    Load load((*proc)->IntField("http_port"), kWebKey, "term", /*threads=*/4, /*batch_size=*/20);
    ASSERT_TRUE(load.WaitForAckedBatches(30));
    (*proc)->Signal(SIGTERM);
    ExpectCleanExit((*proc)->Wait());
    load.Join();
    acked = load.acked();
    (*proc)->WaitForEof();
    EXPECT_TRUE((*proc)->WaitForMsg("collector stopped")) << (*proc)->Output();
  }
  const std::map<std::string, int> jobs = JobsPerMessageId(engine_, data_dir_);
  size_t lost = 0;
  for (const std::string& id : acked) lost += jobs.count(id) == 0 ? 1 : 0;
  EXPECT_EQ(lost, 0u) << "of " << acked.size() << " acknowledged";
}

// SIGHUP keeps the old config when the file is broken and switches keys when it is valid.
TEST_P(CollectorDurabilityTest, SighupReloadsConfigAndKeepsTheOldOneWhenBroken) {
  const std::string old_key = "wk_reload_old_1234";
  const std::string new_key = "wk_reload_new_5678";
  ASSERT_TRUE(WriteFile(config_path_, ConfigWithKey(old_key)).ok());
  absl::StatusOr<std::unique_ptr<ChildProcess>> started = StartCollector();
  ASSERT_TRUE(started.ok()) << started.status();
  ChildProcess& proc = **started;
  auto post = [&](const std::string& key, const std::string& id) {
    absl::StatusOr<HttpResponse> r = HttpPost(
        proc.IntField("http_port"), "/v1/track",
        absl::StrCat(R"({"userId":"u","event":"E","messageId":")", id, R"("})"), key);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->status : 0;
  };
  EXPECT_EQ(post(old_key, "before"), 200);

  // Broken YAML.
  ASSERT_TRUE(WriteFile(config_path_, "sources: [ {id: web, write_keys: [\n  - oops: ]").ok());
  proc.Signal(SIGHUP);
  ASSERT_TRUE(proc.WaitForMsg("config reload refused", 1)) << proc.Output();
  EXPECT_EQ(post(old_key, "after-bad-yaml"), 200);

  // Well-formed YAML that breaks a limit (a 6th URL) and drops the old key.
  std::string six_urls = ConfigWithKey(new_key);
  for (int i = 0; i < 5; ++i) absl::StrAppend(&six_urls, "      - url: https://hooks.example.com/", i, "\n");
  ASSERT_TRUE(WriteFile(config_path_, six_urls).ok());
  proc.Signal(SIGHUP);
  ASSERT_TRUE(proc.WaitForMsg("config reload refused", 2)) << proc.Output();
  EXPECT_EQ(post(old_key, "after-bad-limits"), 200);
  EXPECT_EQ(post(new_key, "new-too-early"), 401);

  // A valid config with a new key.
  ASSERT_TRUE(WriteFile(config_path_, ConfigWithKey(new_key)).ok());
  proc.Signal(SIGHUP);
  ASSERT_TRUE(proc.WaitForMsg("config reloaded", 1)) << proc.Output();
  EXPECT_EQ(post(new_key, "after-reload"), 200);
  EXPECT_EQ(post(old_key, "old-after-reload"), 401);

  proc.Signal(SIGTERM);
  ExpectCleanExit(proc.Wait());
  proc.WaitForEof();
  const std::string output = proc.Output();
  EXPECT_THAT(output, HasSubstr("collector stopped"));
  EXPECT_THAT(output, Not(HasSubstr(old_key)));
  EXPECT_THAT(output, Not(HasSubstr(new_key)));
  started->reset();

  const std::map<std::string, int> jobs = JobsPerMessageId(engine_, data_dir_);
  std::vector<std::string> ids;
  for (const auto& [id, n] : jobs) ids.push_back(id);
  EXPECT_THAT(ids, ::testing::UnorderedElementsAre("before", "after-bad-yaml", "after-bad-limits",
                                                   "after-reload"));
}

INSTANTIATE_TEST_SUITE_P(Engines, CollectorDurabilityTest, EngineParams(), EngineParamName);

}  // namespace
}  // namespace hookrelay::test
