// What one engine provides (--store; collector/store/factory): the job queue, the user data and
// the configuration storage, split by what each is for. Each caller takes only the part it uses:
// the dispatcher and the ingest path a JobQueue, the audience syncer a UserDataStore, the
// ConfigManager a ConfigStore; the admin core and the server the whole Store.
//
//   job_queue.h     jobs: append, lease, settle, dead letters, counts, write health
//   user_data.h     the per-user index, deletions, profiles, audience memberships
//   config_store.h  the run-time configuration and its watch
//
// Engines: RocksDbJobStore (collector/store/rocksdb, embedded, one collector) and
// JetStreamJobStore (collector/store/jetstream, a NATS JetStream cluster shared by collectors).
// tests/store_conformance_test.cc and tests/audience_syncer_test.cc hold both to these contracts.
//
// Rules for callers, on every engine:
// - An Append callback runs on a store thread: it must not block, and must not call ListDead,
//   Replay, ApplyDeletion, CommitAudienceSync or SaveConfig (they wait for store threads).
// - The ready callback (JobQueue::SetReadyCallback) and the config watch (ConfigStore::WatchConfig)
//   run on store threads too, under the same rule.
// - Syncs of one audience must not overlap (UserDataStore::BeginAudienceSync).
#ifndef HOOKRELAY_COLLECTOR_STORE_STORE_H_
#define HOOKRELAY_COLLECTOR_STORE_STORE_H_

#include "collector/store/config_store.h"
#include "collector/store/job_queue.h"
#include "collector/store/user_data.h"

namespace hookrelay::collector {

class Store : public JobQueue, public UserDataStore, public ConfigStore {
 public:
  ~Store() override = default;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_STORE_H_
