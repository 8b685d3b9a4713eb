#include "collector/store/jetstream/jetstream_health.h"

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collector/store/jetstream/jetstream_layout.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace hookrelay::collector {

absl::StatusOr<std::unique_ptr<JetStreamClusterHealth>> JetStreamClusterHealth::Start(
    jsCtx* js, prometheus::Registry& registry, absl::Duration every) {
  std::unique_ptr<JetStreamClusterHealth> health(new JetStreamClusterHealth(js, every));
  try {
    auto& replicas = prometheus::BuildGauge()
                         .Name("hookrelay_jetstream_replicas")
                         .Help("Copies of a JetStream Raft group (the jobs stream, its consumer) "
                               "by state: current, behind (catching up, or gone unnoticed yet), offline")
                         .Register(registry);
    auto& lag = prometheus::BuildGauge()
                    .Name("hookrelay_jetstream_replica_lag")
                    .Help("The largest lag of a copy of a JetStream Raft group, in operations")
                    .Register(registry);
    auto& has_leader = prometheus::BuildGauge()
                           .Name("hookrelay_jetstream_has_leader")
                           .Help("1 while a JetStream Raft group has a leader, 0 while it has "
                                 "none or the cluster does not answer")
                           .Register(registry);
    auto& changes = prometheus::BuildCounter()
                        .Name("hookrelay_jetstream_leader_changes_total")
                        .Help("Leader changes of a JetStream Raft group seen by this collector "
                              "(sampled every few seconds)")
                        .Register(registry);
    const std::string names[2] = {kJobsStream, absl::StrCat(kJobsStream, "/", kDispatchConsumer)};
    for (size_t i = 0; i < health->groups_.size(); ++i) {
      Group& g = health->groups_[i];
      g.current = &replicas.Add({{"group", names[i]}, {"state", "current"}});
      g.behind = &replicas.Add({{"group", names[i]}, {"state", "behind"}});
      g.offline = &replicas.Add({{"group", names[i]}, {"state", "offline"}});
      g.lag = &lag.Add({{"group", names[i]}});
      g.has_leader = &has_leader.Add({{"group", names[i]}});
      g.leader_changes = &changes.Add({{"group", names[i]}});
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("JetStream health metrics: ", e.what()));
  }
  health->Read();
  health->thread_ = std::thread([raw = health.get()] { raw->Loop(); });
  return health;
}

JetStreamClusterHealth::~JetStreamClusterHealth() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void JetStreamClusterHealth::Loop() {
  pthread_setname_np(pthread_self(), "nats-health");
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), every_);
      if (stopping_) return;
    }
    Read();
  }
}

void JetStreamClusterHealth::Read() {
  jsErrCode code = static_cast<jsErrCode>(0);
  jsStreamInfo* si = nullptr;
  if (js_GetStreamInfo(&si, js_, kJobsStream, nullptr, &code) == NATS_OK) {
    Update(groups_[0], si->Cluster);
    jsStreamInfo_Destroy(si);
  } else {
    Update(groups_[0], nullptr);
  }
  jsConsumerInfo* ci = nullptr;
  if (js_GetConsumerInfo(&ci, js_, kJobsStream, kDispatchConsumer, nullptr, &code) == NATS_OK) {
    Update(groups_[1], ci->Cluster);
    jsConsumerInfo_Destroy(ci);
  } else {
    Update(groups_[1], nullptr);
  }
}

void JetStreamClusterHealth::Update(Group& group, const jsClusterInfo* cluster) {
  const std::string leader =
      cluster != nullptr && cluster->Leader != nullptr ? cluster->Leader : "";
  group.has_leader->Set(leader.empty() ? 0 : 1);
  if (cluster == nullptr) return;  // Copies unknown: the last reading stays.
  // A new leader (not the first one seen, nor the return of one after a leaderless reading).
  if (!leader.empty()) {
    if (!group.leader.empty() && leader != group.leader) group.leader_changes->Increment();
    group.leader = leader;
  }
  int current = leader.empty() ? 0 : 1;  // The leader is not among the replicas listed.
  int behind = 0;
  int offline = 0;
  uint64_t max_lag = 0;
  for (int i = 0; i < cluster->ReplicasLen; ++i) {
    const jsPeerInfo* peer = cluster->Replicas[i];
    if (peer == nullptr) continue;
    // A server killed is listed as not current (not as offline) until the cluster removes it:
    // "behind" covers a copy catching up and one that is gone; "offline" is the server's word.
    if (peer->Offline) {
      ++offline;
    } else if (peer->Current) {
      ++current;
    } else {
      ++behind;
    }
    max_lag = std::max(max_lag, peer->Lag);
  }
  group.current->Set(current);
  group.behind->Set(behind);
  group.offline->Set(offline);
  group.lag->Set(static_cast<double>(max_lag));
}

}  // namespace hookrelay::collector
