// A user deletion on the JetStream engine survives a crash of the collector applying it (issue 24
// §3). The deletion is several writes across streams; the collector kills itself (SIGKILL, as
// kill -9 would) right after one step (HOOKRELAY_CRASH_IN_DELETION, see
// collector/store/jetstream/jetstream_user_deletions.cc), once per step. The request carries no
// request id, so nothing but the engine's own progress record can bring the deletion back. A
// collector started again on the same cluster must then, by itself:
// - finish the deletion: listed COMPLETED, with the counts of what it purged (the user's 5 jobs);
// - deliver none of the deleted user's events, every event of another user, and exactly one
//   `delete` notification for the destination.
// A real 3-node cluster at 3 replicas (tests/test_engines.h), the real collector and deliverer
// binaries, a receiver on 127.0.0.1.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/collector_test_util.h"
#include "tests/pipeline_test_util.h"
#include "tests/test_engines.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {
namespace {

using receiver::ReceivedRequest;
using receiver::WebhookReceiver;

constexpr absl::Duration kWait = absl::Seconds(60);

// Posts `n` track events of `user` (message ids <user>-0..n-1); true when all were accepted.
bool PostTracks(int http_port, const std::string& user, int n) {
  std::string body = R"({"batch":[)";
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&body, i ? "," : "", R"({"type":"track","event":"Order","userId":")", user,
                    R"(","messageId":")", user, "-", i, "\"}");
  }
  body += "]}";
  absl::StatusOr<HttpResponse> r = HttpPost(http_port, "/v1/batch", body, kWebKey);
  return r.ok() && r->status == 200;
}

struct Seen {
  int kept = 0;     // events of the user not deleted
  int gone = 0;     // events of the deleted user (must stay 0)
  int deletes = 0;  // `delete` notifications
};

Seen Count(const WebhookReceiver& receiver) {
  Seen seen;
  for (const ReceivedRequest& r : receiver.Requests()) {
    const std::string type = JsonStr(r.body, "/type");
    const std::string user = JsonStr(r.body, "/userId");
    if (type == "delete") {
      ++seen.deletes;
    } else if (user == "gone") {
      ++seen.gone;
    } else if (user == "kept") {
      ++seen.kept;
    }
  }
  return seen;
}

// The deletions the admin API lists (JSON), or "" when it does not answer.
std::string ListDeletions(int admin_port) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(admin_port);
  if (!c.ok()) return "";
  absl::StatusOr<HttpResponse> r = (*c)->Request("GET", "/admin/v1/deletions", "", {});
  return r.ok() && r->status == 200 ? r->body : "";
}

class JetStreamDeletionCrashTest : public ::testing::TestWithParam<std::string> {};

TEST_P(JetStreamDeletionCrashTest, FinishedByTheNextCollector) {
  const std::string step = GetParam();
  absl::StatusOr<EngineSetup> engine = PrepareEngine("jetstream");
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto receiver = WebhookReceiver::Start({}, [](const ReceivedRequest&) {
    return receiver::Response();
  });
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  const std::string dir = MakeTempDir("delcrash");
  const std::string config = dir + "/config.yaml";
  ASSERT_TRUE(WriteFile(config, PipelineConfig({(*receiver)->Url()}, "s")).ok());
  std::vector<std::string> flags = CollectorEngineFlags(*engine);
  flags.push_back("--nats_deletion_resume_after=1s");

  // The collector that dies mid-deletion. No deliverer yet: the jobs wait in the stream.
  ASSERT_EQ(setenv("HOOKRELAY_CRASH_IN_DELETION", step.c_str(), 1), 0);
  auto doomed = StartCollectorProcess(config, dir + "/a", flags);
  unsetenv("HOOKRELAY_CRASH_IN_DELETION");
  ASSERT_TRUE(doomed.ok()) << doomed.status();
  const int http_port = (*doomed)->IntField("http_port");
  ASSERT_TRUE(PostTracks(http_port, "gone", 5));
  ASSERT_TRUE(PostTracks(http_port, "kept", 3));
  // No request id: a retry by the caller could not resume it; the engine must.
  absl::StatusOr<HttpResponse> answer =
      HttpPost((*doomed)->IntField("admin_http_port"), "/admin/v1/deletions",
               R"({"userId":"gone"})");
  EXPECT_FALSE(answer.ok() && answer->status == 200)
      << "the deletion was answered: the collector did not die at step " << step;
  const int status = (*doomed)->Wait();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the collector was not killed at step " << step << " (status " << status << ")";

  // Another collector on the same cluster finishes it by itself.
  auto next = StartCollectorProcess(config, dir + "/b", flags);
  ASSERT_TRUE(next.ok()) << next.status();
  // (Killed after "completed", only the progress record is left: it is removed.)
  EXPECT_TRUE((*next)->WaitForMsg("finished an interrupted deletion"))
      << "step " << step << ": " << (*next)->Output();
  std::string listed;
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline) {
    listed = ListDeletions((*next)->IntField("admin_http_port"));
    if (JsonStr(listed, "/deletions/0/state") == "COMPLETED") break;
    absl::SleepFor(absl::Milliseconds(100));  // Polls the admin API of a child process.
  }
  EXPECT_EQ(JsonStr(listed, "/deletions/0/userId"), "gone") << listed;
  EXPECT_EQ(JsonStr(listed, "/deletions/0/state"), "COMPLETED") << listed;
  EXPECT_EQ(JsonAt(listed, "/deletions/0/purgedJobs"), "\"5\"") << listed;
  EXPECT_EQ(JsonAt(listed, "/deletions/0/notifications"), "\"1\"") << listed;
  EXPECT_EQ(JsonAt(listed, "/deletions/1"), "<missing>") << "one deletion only: " << listed;

  // Deliveries: the other user's 3 events and one notification; then a last event of the kept
  // user, sent after everything else was stored, shows nothing more is on its way.
  auto deliverer = StartDelivererProcess({(*next)->IntField("grpc_port")});
  ASSERT_TRUE(deliverer.ok()) << deliverer.status();
  ASSERT_TRUE((*receiver)->WaitForRequests(4, kWait));
  ASSERT_TRUE(PostTracks((*next)->IntField("http_port"), "last", 1));
  const absl::Time last_deadline = absl::Now() + kWait;
  while (absl::Now() < last_deadline) {
    bool last = false;
    for (const ReceivedRequest& r : (*receiver)->Requests()) {
      last = last || JsonStr(r.body, "/userId") == "last";
    }
    if (last) break;
    absl::SleepFor(absl::Milliseconds(50));  // Polls the receiver's record.
  }
  const Seen seen = Count(**receiver);
  EXPECT_EQ(seen.kept, 3) << "step " << step;
  EXPECT_EQ(seen.gone, 0) << "step " << step << ": a deleted user's event was delivered";
  EXPECT_EQ(seen.deletes, 1) << "step " << step;

  ASSERT_TRUE((*deliverer)->Signal(SIGTERM));
  (*deliverer)->Wait();
  ASSERT_TRUE((*next)->Signal(SIGTERM));
  (*next)->Wait();
}

INSTANTIATE_TEST_SUITE_P(Steps, JetStreamDeletionCrashTest,
                         ::testing::Values("planned", "fenced", "recorded", "counted", "purging",
                                           "purged", "memberships", "notifying", "notified",
                                           "swept", "completed"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace hookrelay::test
