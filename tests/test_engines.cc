#include "tests/test_engines.h"

#include <nats/nats.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/jetstream_layout.h"
#include "tests/nats_cluster.h"

namespace hookrelay::test {
namespace {

absl::Mutex cluster_mu;
NatsCluster* cluster ABSL_GUARDED_BY(cluster_mu) = nullptr;

void StopCluster() {
  absl::MutexLock lock(&cluster_mu);
  delete cluster;
  cluster = nullptr;
}

// A connection to the cluster at `urls` (comma-separated); the caller destroys it.
absl::StatusOr<natsConnection*> Connect(const std::string& urls) {
  natsConnection* nc = nullptr;
  if (natsStatus s = natsConnection_ConnectTo(&nc, urls.c_str()); s != NATS_OK) {
    return absl::UnavailableError(absl::StrCat("connecting to ", urls, ": ", natsStatus_GetText(s)));
  }
  return nc;
}

// Deletes hookrelay's streams and the config bucket's stream.
absl::Status Empty(const std::string& urls) {
  absl::StatusOr<natsConnection*> nc = Connect(urls);
  if (!nc.ok()) return nc.status();
  absl::Status st;
  for (const char* stream : {"HR_JOBS", "HR_DEAD", "HR_DEDUP", "HR_USERS", "HR_PROFILES",
                             "HR_DELETIONS", "HR_AUDIENCES", "KV_hr_config"}) {
    if (!st.ok()) break;
    for (int attempt = 0;; ++attempt) {
      absl::StatusOr<collector::JetStreamApiReply> reply = collector::JetStreamApi(
          *nc, absl::StrCat("$JS.API.STREAM.DELETE.", stream), "", absl::Seconds(5));
      constexpr int64_t kStreamNotFound = 10059;
      if (reply.ok() && (reply->error_code == 0 || reply->error_code == kStreamNotFound)) break;
      if (attempt == 50) {
        st = reply.ok() ? absl::InternalError(absl::StrCat("deleting ", stream, ": ", reply->error))
                        : reply.status();
        break;
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
  }
  natsConnection_Destroy(*nc);
  return st;
}

// Every message of HR_JOBS, read by sequence number through the stream API (the stream's own
// consumer is the collectors'; a read-only look must not take their jobs).
absl::StatusOr<std::vector<hookrelay::v1::Job>> ReadJetStreamJobs(natsConnection* nc) {
  absl::StatusOr<collector::JetStreamApiReply> info =
      collector::JetStreamApi(nc, "$JS.API.STREAM.INFO.HR_JOBS", "", absl::Seconds(5));
  if (!info.ok()) return info.status();
  if (info->error_code != 0) return absl::InternalError(absl::StrCat("HR_JOBS info: ", info->error));
  int64_t first = 0;
  int64_t last = 0;
  if (!absl::SimpleAtoi(JsonAt(info->body, "/state/first_seq"), &first) ||
      !absl::SimpleAtoi(JsonAt(info->body, "/state/last_seq"), &last)) {
    return absl::InternalError(absl::StrCat("HR_JOBS info without sequence numbers: ", info->body));
  }
  std::vector<hookrelay::v1::Job> jobs;
  for (int64_t seq = std::max<int64_t>(first, 1); seq <= last; ++seq) {
    absl::StatusOr<collector::JetStreamApiReply> got = collector::JetStreamApi(
        nc, "$JS.API.STREAM.MSG.GET.HR_JOBS", absl::StrCat(R"({"seq":)", seq, "}"),
        absl::Seconds(5));
    if (!got.ok()) return got.status();
    constexpr int64_t kNoMessage = 10037;  // deleted (acknowledged) since
    if (got->error_code == kNoMessage) continue;
    if (got->error_code != 0) {
      return absl::InternalError(absl::StrCat("HR_JOBS message ", seq, ": ", got->error));
    }
    std::string data;
    if (!absl::Base64Unescape(JsonStr(got->body, "/message/data"), &data) ||
        !jobs.emplace_back().ParseFromString(data)) {
      return absl::InternalError(absl::StrCat("HR_JOBS message ", seq, " is not a job"));
    }
  }
  return jobs;
}

}  // namespace

absl::StatusOr<EngineSetup> PrepareEngine(std::string_view engine) {
  EngineSetup setup;
  setup.engine = std::string(engine);
  if (engine == "embedded") return setup;
  if (engine != "jetstream") return absl::InvalidArgumentError(absl::StrCat("engine ", std::string(engine)));
  absl::MutexLock lock(&cluster_mu);
  if (cluster == nullptr) {
    absl::StatusOr<std::unique_ptr<NatsCluster>> started = NatsCluster::Start(3);
    if (!started.ok()) return started.status();
    cluster = started->release();
    std::atexit(StopCluster);
  }
  setup.nats_url = cluster->urls();
  if (absl::Status st = Empty(setup.nats_url); !st.ok()) return st;
  return setup;
}

absl::StatusOr<std::vector<hookrelay::v1::Job>> ReadAllJobs(const EngineSetup& engine,
                                                          const std::string& data_dir) {
  if (engine.engine != "jetstream") return LeaseAllJobs(data_dir);
  absl::StatusOr<natsConnection*> nc = Connect(engine.nats_url);
  if (!nc.ok()) return nc.status();
  absl::StatusOr<std::vector<hookrelay::v1::Job>> jobs = ReadJetStreamJobs(*nc);
  natsConnection_Destroy(*nc);
  return jobs;
}

}  // namespace hookrelay::test
