#include "tests/test_engines.h"

#include <nats/nats.h>

#include <memory>
#include <string>
#include <vector>

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

// Deletes hookrelay's streams and the config bucket's stream.
absl::Status Empty(const std::string& urls) {
  absl::StatusOr<natsConnection*> nc = ConnectNats(urls);
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

}  // namespace hookrelay::test
