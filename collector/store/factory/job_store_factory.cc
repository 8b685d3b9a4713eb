#include "collector/store/factory/job_store_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "collector/store/jetstream/jetstream_job_store.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"

namespace hookrelay::collector {

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const JobStoreOptions& options) {
  if (options.engine == "embedded") {
    if (options.data_dir.empty()) return absl::InvalidArgumentError("--data_dir is empty");
    RocksDbJobStore::Options o;
    o.path = options.data_dir;
    o.clock = options.clock;
    o.dedup_window = options.dedup_window;
    o.registry = options.registry;
    o.on_write_health = options.on_write_health;
    o.lease_duration = options.lease_duration;
    o.commit_linger = options.commit_linger;
    absl::StatusOr<std::unique_ptr<RocksDbJobStore>> store = RocksDbJobStore::Open(std::move(o));
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(*std::move(store));
  }
  if (options.engine == "jetstream") {
    if (options.nats_url.empty()) {
      return absl::InvalidArgumentError("--store=jetstream needs --nats_url (nats://host:port,...)");
    }
    JetStreamJobStore::Options o;
    o.urls = options.nats_url;
    o.connect = options.nats_connect;
    o.layout.replicas = options.nats_replicas;
    o.layout.dedup_replicas = options.nats_dedup_replicas;
    o.layout.deletion_resume_after = options.nats_deletion_resume_after;
    o.layout.ack_wait = options.lease_duration;
    o.clock = options.clock;
    o.layout.dedup_window = options.dedup_window;
    o.on_write_health = options.on_write_health;
    o.on_gave_up = options.on_gave_up;
    o.registry = options.registry;
    o.max_schedule_delay = options.max_schedule_delay;
    absl::StatusOr<std::unique_ptr<JetStreamJobStore>> store = JetStreamJobStore::Open(std::move(o));
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(*std::move(store));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--store=", options.engine, ": use embedded or jetstream"));
}

std::string DescribeJobStore(const JobStoreOptions& options) {
  if (options.engine == "jetstream") {
    return absl::StrCat("jetstream at ", RedactNatsUrls(options.nats_url), ", ",
                        options.nats_replicas, options.nats_replicas == 1 ? " replica" : " replicas",
                        ", ", DescribeNatsConnect(options.nats_connect));
  }
  return absl::StrCat(options.engine, " at ", options.data_dir);
}

}  // namespace hookrelay::collector
