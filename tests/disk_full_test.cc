// A full disk, for real: the collector's data dir on a small tmpfs in a private mount namespace,
// filled with a file. The collector must not abort, must refuse ingest (HTTP 503 + Retry-After,
// gRPC UNAVAILABLE, health NOT_SERVING, /healthz 503, a metric) while it cannot write, keep
// delivering what it stored, start on a nearly full volume, recover by itself within 30 s of
// space coming back, and lose nothing it acknowledged.
//
// Mounting needs CAP_SYS_ADMIN (CI runs as root); elsewhere the test skips, saying so.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/collector.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/collector_test_util.h"
#include "tests/pipeline_test_util.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {
namespace {

using receiver::ReceivedRequest;
using receiver::WebhookReceiver;

// Large enough that RocksDB's recovery finds room for one memtable flush (64 MB) once the filler
// is gone; the filler leaves only a few MB.
constexpr int64_t kTmpfsBytes = int64_t{160} << 20;
constexpr absl::Duration kWait = absl::Seconds(60);
constexpr absl::Duration kRecoveryLimit = absl::Seconds(30);

int64_t FreeBytes(const std::string& path) {
  struct statvfs st;
  if (statvfs(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

// Allocates `bytes` to a new file (really: tmpfs has no holes once fallocated).
bool Fill(const std::string& path, int64_t bytes) {
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  if (fd < 0) return false;
  const bool ok = bytes <= 0 || fallocate(fd, 0, 0, bytes) == 0;
  close(fd);
  return ok;
}

// A batch of 20 tracks with `pad` bytes of properties each; ids prefix-b-i.
std::string Batch(const std::string& prefix, int b, size_t pad, std::vector<std::string>* ids) {
  std::string body = R"({"batch":[)";
  for (int i = 0; i < 20; ++i) {
    ids->push_back(absl::StrCat(prefix, "-", b, "-", i));
    absl::StrAppend(&body, i ? "," : "",
                    R"({"type":"track","userId":"u","event":"e","messageId":")", ids->back(),
                    R"(","properties":{"pad":")", std::string(pad, 'x'), "\"}}");
  }
  return body + "]}";
}

// Posts batches until one is not answered 200 (or `max` were posted); acked ids go to `acked`.
// Returns the first non-200 answer, or status 0 when every batch was acknowledged.
HttpResponse PostUntilRefused(int port, const std::string& prefix, int max, size_t pad,
                              std::set<std::string>* acked) {
  for (int b = 0; b < max; ++b) {
    std::vector<std::string> ids;
    absl::StatusOr<HttpResponse> r = HttpPost(port, "/v1/batch", Batch(prefix, b, pad, &ids), kWebKey);
    if (!r.ok()) {
      HttpResponse failed;
      failed.status = -1;
      failed.body = std::string(r.status().message());
      return failed;
    }
    if (r->status != 200) return *r;
    acked->insert(ids.begin(), ids.end());
  }
  return HttpResponse{};
}

int HttpStatus(int port, const std::string& path) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(port);
  if (!c.ok()) return -1;
  absl::StatusOr<HttpResponse> r = (*c)->Request("GET", path, "", {});
  return r.ok() ? r->status : -1;
}

// The value of the first /metrics sample starting with `prefix` (name and labels), or -1.
double Metric(int metrics_port, const std::string& prefix) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(metrics_port);
  if (!c.ok()) return -1;
  absl::StatusOr<HttpResponse> r = (*c)->Request("GET", "/metrics", "", {});
  if (!r.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
    if (absl::StartsWith(line, prefix)) {
      double v = -1;
      if (absl::SimpleAtod(line.substr(prefix.size()), &v)) return v;
    }
  }
  return -1;
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(int grpc_port,
                                                            const std::string& service) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&context, request, &response);
  return s.ok() ? response.status() : grpc::health::v1::HealthCheckResponse::UNKNOWN;
}

grpc::Status GrpcIngestOne(int grpc_port) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                     grpc::InsecureChannelCredentials());
  auto stub = hookrelay::v1::Collector::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  context.AddMetadata("x-write-key", kWebKey);
  hookrelay::v1::IngestRequest request;
  hookrelay::v1::Event* event = request.add_events();
  event->set_type(hookrelay::v1::TRACK);
  event->set_user_id("u");
  event->set_event("grpc while full");
  hookrelay::v1::IngestResponse response;
  return stub->Ingest(&context, request, &response);
}

// The collector must never die by a signal (RocksDB used to abort on a full disk).
void ExpectNoCrash(ChildProcess& p) {
  const std::string out = p.Output();
  EXPECT_FALSE(absl::StrContains(out, "Assertion")) << out;
}

class DiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("diskfull");
    mount_ = dir_ + "/volume";
    ASSERT_EQ(mkdir(mount_.c_str(), 0700), 0) << strerror(errno);
    // A private mount namespace for this thread and the children it starts: the tmpfs is gone
    // with the test, whatever happens to it.
    if (unshare(CLONE_NEWNS) != 0) {
      GTEST_SKIP() << "cannot make a mount namespace (" << strerror(errno)
                   << "); the full-disk test needs CAP_SYS_ADMIN (run as root)";
    }
    ASSERT_EQ(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << strerror(errno);
    const std::string options = absl::StrCat("size=", kTmpfsBytes);
    if (mount("tmpfs", mount_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs (" << strerror(errno) << ")";
    }
    mounted_ = true;
    auto r = WebhookReceiver::Start(WebhookReceiver::Options{}, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    receiver_ = *std::move(r);
    config_path_ = dir_ + "/config.yaml";
    ASSERT_TRUE(WriteFile(config_path_, PipelineConfig({receiver_->Url()}, "s")).ok());
    data_dir_ = mount_ + "/data";
  }

  void TearDown() override {
    if (mounted_) umount2(mount_.c_str(), MNT_DETACH);
  }

  std::string dir_, mount_, config_path_, data_dir_;
  bool mounted_ = false;
  std::unique_ptr<WebhookReceiver> receiver_;
};

// The whole life of a full disk: refuse, keep delivering, restart nearly full, recover.
TEST_F(DiskFullTest, RefusesWhileFullDeliversStoredAndRecoversWithoutRestart) {
  std::set<std::string> acked;

  // 1. Events stored while there is room (no deliverer yet: they wait in the store).
  {
    auto collector = StartCollectorProcess(config_path_, data_dir_);
    ASSERT_TRUE(collector.ok()) << collector.status();
    const HttpResponse r = PostUntilRefused((*collector)->IntField("http_port"), "early", 5, 100, &acked);
    ASSERT_EQ(r.status, 0) << r.body;
    ASSERT_TRUE((*collector)->Signal(SIGTERM));
    const int status = (*collector)->Wait();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  ASSERT_EQ(acked.size(), 100u);

  // 2. The volume fills up to a few MB; the collector still starts on it.
  const std::string big = mount_ + "/filler-big";
  const std::string small = mount_ + "/filler-small";
  ASSERT_TRUE(Fill(big, FreeBytes(mount_) - (int64_t{3} << 20)));
  ASSERT_TRUE(Fill(small, int64_t{1} << 20));
  auto full = StartCollectorProcess(config_path_, data_dir_);
  ASSERT_TRUE(full.ok()) << "start on a nearly full volume: " << full.status();
  const int grpc_port = (*full)->IntField("grpc_port");
  const int http_port = (*full)->IntField("http_port");
  const int metrics_port = (*full)->IntField("metrics_port");
  EXPECT_EQ(Metric(metrics_port, "hookrelay_store_writable "), 1);

  // 3. Ingest until the disk is full: a clean refusal, never a crash or a 500.
  const HttpResponse refused = PostUntilRefused(http_port, "fill", 2000, 1500, &acked);
  ASSERT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.Header("Retry-After"), "5");
  EXPECT_TRUE(absl::StrContains(refused.body, "no space")) << refused.body;
  EXPECT_FALSE(absl::StrContains(refused.body, mount_)) << "a path leaked: " << refused.body;
  EXPECT_EQ(HttpStatus(http_port, "/healthz"), 503);
  EXPECT_EQ(Health(grpc_port, ""), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Health(grpc_port, "hookrelay.v1.Collector"),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  const grpc::Status grpc_refused = GrpcIngestOne(grpc_port);
  EXPECT_EQ(grpc_refused.error_code(), grpc::StatusCode::UNAVAILABLE) << grpc_refused.error_message();
  EXPECT_EQ(Metric(metrics_port, "hookrelay_store_writable "), 0);
  EXPECT_GE(Metric(metrics_port, "hookrelay_store_errors_total{kind=\"no_space\"} "), 1);
  // One error line for the change of state, however many requests were refused.
  {
    const std::string out = (*full)->Output();
    size_t lines = 0;
    for (size_t at = out.find("job store cannot write"); at != std::string::npos;
         at = out.find("job store cannot write", at + 1)) {
      ++lines;
    }
    EXPECT_EQ(lines, 1u) << out;
  }

  // 4. What was stored is delivered while ingest is refused.
  auto deliverer = StartDelivererProcess({grpc_port});
  ASSERT_TRUE(deliverer.ok()) << deliverer.status();
  EXPECT_TRUE(WaitDelivered(*receiver_, acked, kWait))
      << DeliveredIds(*receiver_).size() << " of " << acked.size();
  EXPECT_EQ(HttpStatus(http_port, "/healthz"), 503) << "space came back by itself?";

  // 5. kill -9 while full, a little space freed, restart on the same port: it starts.
  ASSERT_TRUE((*full)->Signal(SIGKILL));
  (*full)->Wait();
  ExpectNoCrash(**full);
  ASSERT_EQ(unlink(small.c_str()), 0);
  auto restarted = StartCollectorProcess(config_path_, data_dir_,
                                         {absl::StrCat("--grpc_address=127.0.0.1:", grpc_port)});
  ASSERT_TRUE(restarted.ok()) << "restart with little free space: " << restarted.status();
  const int http2 = (*restarted)->IntField("http_port");
  const int metrics2 = (*restarted)->IntField("metrics_port");

  // 6. Space comes back: writable again within 30 s, without a restart.
  const HttpResponse refused_again = PostUntilRefused(http2, "refill", 2000, 1500, &acked);
  ASSERT_EQ(refused_again.status, 503) << refused_again.body;
  ASSERT_EQ(unlink(big.c_str()), 0);
  const absl::Time freed = absl::Now();
  while (HttpStatus(http2, "/healthz") != 200 && absl::Now() - freed < kRecoveryLimit) {
    absl::SleepFor(absl::Milliseconds(100));  // Waits for the disk: real time.
  }
  const absl::Duration took = absl::Now() - freed;
  EXPECT_LT(took, kRecoveryLimit) << "still not serving after space came back";
  EXPECT_EQ(Health(grpc_port, ""), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(grpc_port, "hookrelay.v1.Collector"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Metric(metrics2, "hookrelay_store_writable "), 1);
  EXPECT_TRUE(absl::StrContains((*restarted)->Output(), "job store writable again"));
  std::cerr << "recovered " << absl::FormatDuration(took) << " after space came back\n";

  // 7. Ingest works again, and every event ever acknowledged reaches the receiver.
  const HttpResponse after = PostUntilRefused(http2, "after", 5, 100, &acked);
  EXPECT_EQ(after.status, 0) << after.body;
  EXPECT_TRUE(GrpcIngestOne(grpc_port).ok());
  EXPECT_TRUE(WaitDelivered(*receiver_, acked, kWait))
      << DeliveredIds(*receiver_).size() << " of " << acked.size();

  ASSERT_TRUE((*deliverer)->Signal(SIGTERM));
  (*deliverer)->Wait();
  ASSERT_TRUE((*restarted)->Signal(SIGTERM));
  const int status = (*restarted)->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ExpectNoCrash(**restarted);
}

}  // namespace
}  // namespace hookrelay::test
