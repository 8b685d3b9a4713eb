// The engine behind --store (issue 12 §1): one place that knows both engines' options, so the
// server, tools and tests open a store the same way.
//
//   embedded    RocksDB under data_dir; one collector per directory.
//   jetstream   a NATS JetStream cluster at nats_url, shared by any number of collectors
//               (docs/DESIGN.md, "The JetStream engine").
#ifndef HOOKRELAY_COLLECTOR_STORE_FACTORY_JOB_STORE_FACTORY_H_
#define HOOKRELAY_COLLECTOR_STORE_FACTORY_JOB_STORE_FACTORY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collector/store/jetstream/nats_connect.h"
#include "collector/store/store.h"
#include "common/clock.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace hookrelay::collector {

struct JobStoreOptions {
  // "embedded" or "jetstream" (--store).
  std::string engine = "embedded";
  // embedded: --data_dir.
  std::string data_dir;
  // jetstream: --nats_url (comma-separated nats:// URLs) and --nats_replicas (1, 3 or 5).
  std::string nats_url;
  int nats_replicas = 3;
  int nats_dedup_replicas = 1;  // HR_DEDUP's copies; 0: as nats_replicas.
  // A deletion left unfinished this long (its collector died) is finished by another.
  absl::Duration nats_deletion_resume_after = absl::Seconds(30);
  // jetstream: credentials and TLS (--nats_creds_file, --nats_tls_ca_file, ...).
  NatsConnectOptions nats_connect;
  // How long a dispatched job stays with a deliverer (jetstream: the consumer's ack wait).
  absl::Duration lease_duration = absl::Seconds(90);
  // embedded: how long a small group commit waits for company (RocksDbJobStore::Options).
  absl::Duration commit_linger = absl::ZeroDuration();
  // A (source, messageId) is de-duplicated for this long.
  absl::Duration dedup_window = absl::Hours(24);
  // Not owned; nullptr = real time.
  common::Clock* clock = nullptr;
  // Optional: the store's metric families are registered in it.
  prometheus::Registry* registry = nullptr;
  // Called with false when the store can no longer take writes (disk full, cluster unreachable)
  // and with true once it can again; from a store thread.
  std::function<void(bool writable)> on_write_health;
  // Called once when the store cannot recover by itself and only a restart mends it (jetstream:
  // the NATS client stopped reconnecting); from a store thread.
  std::function<void()> on_gave_up;
  // jetstream, tests with a manual clock only: retries due later than this (on the store's
  // clock) are sent back after this much real time instead, and held by the collector until the
  // clock reaches their due time (the server's schedules run on real time). Infinite = off.
  absl::Duration max_schedule_delay = absl::InfiniteDuration();
};

// INVALID_ARGUMENT naming the flag for an unknown engine or a missing setting.
absl::StatusOr<std::unique_ptr<Store>> OpenStore(const JobStoreOptions& options);

// "embedded at /var/lib/hookrelay" / "jetstream at nats://..., 3 replicas": for logs.
std::string DescribeJobStore(const JobStoreOptions& options);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_FACTORY_JOB_STORE_FACTORY_H_
