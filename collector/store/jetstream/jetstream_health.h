// The NATS cluster's health as the JetStream engine sees it, for the dashboard's NATS row (SPEC
// §11): every few seconds one STREAM.INFO of HR_JOBS and one CONSUMER.INFO of its dispatch
// consumer, whose cluster parts say which servers hold a copy, whether each is current, how far
// behind, and which one leads the Raft group. Exported per Raft group ("HR_JOBS",
// "HR_JOBS/dispatch"):
//   hookrelay_jetstream_replicas{group,state}      copies current / behind / offline (the
//                                                 leader counts as current; behind: catching
//                                                 up, or a server down that the cluster still
//                                                 lists; offline: as the servers report it)
//   hookrelay_jetstream_replica_lag{group}         the largest lag of a copy, in Raft operations
//   hookrelay_jetstream_has_leader{group}          1 while the group has a leader
//   hookrelay_jetstream_leader_changes_total{group} leader changes seen (sampled: two changes
//                                                 between two readings count as one or none)
// Every collector of a cluster reports the same servers: dashboards take the max.
#ifndef HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_HEALTH_H_
#define HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_HEALTH_H_

#include <nats/nats.h>

#include <array>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace prometheus {
class Counter;
class Gauge;
class Registry;
}  // namespace prometheus

namespace hookrelay::collector {

class JetStreamClusterHealth {
 public:
  // Registers the series in `registry` and starts watching (`js` is not owned and must outlive
  // this object). INVALID_ARGUMENT when the series clash with others of the registry.
  static absl::StatusOr<std::unique_ptr<JetStreamClusterHealth>> Start(
      jsCtx* js, prometheus::Registry& registry, absl::Duration every = absl::Seconds(5));
  ~JetStreamClusterHealth();

  JetStreamClusterHealth(const JetStreamClusterHealth&) = delete;
  JetStreamClusterHealth& operator=(const JetStreamClusterHealth&) = delete;

  // One reading now (the thread's; public for tests).
  void Read();

 private:
  struct Group {
    prometheus::Gauge* current = nullptr;
    prometheus::Gauge* behind = nullptr;
    prometheus::Gauge* offline = nullptr;
    prometheus::Gauge* lag = nullptr;
    prometheus::Gauge* has_leader = nullptr;
    prometheus::Counter* leader_changes = nullptr;
    std::string leader;  // last seen; "" before the first reading
  };
  JetStreamClusterHealth(jsCtx* js, absl::Duration every) : js_(js), every_(every) {}
  // `cluster` null: no answer (the group counts as leaderless, its copies unknown).
  static void Update(Group& group, const jsClusterInfo* cluster);
  void Loop();

  jsCtx* const js_;
  const absl::Duration every_;
  std::array<Group, 2> groups_;  // the stream, its consumer
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_HEALTH_H_
