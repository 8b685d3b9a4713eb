// The JetStream engine's configuration: the KV bucket hr_config (key "config"), loaded, saved by
// compare-and-set and watched for saves made through other collectors.
#include "collector/store/jetstream/jetstream_job_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/nats_request.h"
#include "common/log.h"

namespace hookrelay::collector {
absl::StatusOr<std::optional<std::string>> JetStreamJobStore::LoadConfig() {
  kvEntry* entry = nullptr;
  const natsStatus s = RetryPassing([&] { return kvStore_Get(&entry, config_kv_, kConfigKey); });
  if (s == NATS_NOT_FOUND) return std::optional<std::string>();
  if (s != NATS_OK) return NatsError("reading the stored configuration", s);
  std::string value(static_cast<const char*>(kvEntry_Value(entry)),
                    static_cast<size_t>(kvEntry_ValueLen(entry)));
  {
    absl::MutexLock lock(&mu_);
    config_revision_ = std::max(config_revision_, kvEntry_Revision(entry));
  }
  kvEntry_Destroy(entry);
  return std::optional<std::string>(std::move(value));
}

absl::Status JetStreamJobStore::SaveConfig(std::string_view bytes) {
  uint64_t last = 0;
  {
    absl::MutexLock lock(&mu_);
    last = config_revision_;
  }
  // Compare-and-set on the revision this collector knows: a save made through another
  // collector meanwhile is never overwritten unseen.
  uint64_t revision = 0;
  const natsStatus s = RetryPassing([&] {
    return last == 0 ? kvStore_Create(&revision, config_kv_, kConfigKey, bytes.data(),
                                      static_cast<int>(bytes.size()))
                     : kvStore_Update(&revision, config_kv_, kConfigKey, bytes.data(),
                                      static_cast<int>(bytes.size()), last);
  });
  if (s == NATS_OK) {
    absl::MutexLock lock(&mu_);
    config_revision_ = std::max(config_revision_, revision);
    return absl::OkStatus();
  }
  // Refused: someone else's save (wrong last revision), or ours landed and only its answer was
  // lost. The read may come from a replica a little behind, so any refusal that is not ours
  // counts as a conflict: the caller reads the configuration again and re-applies its change.
  const std::string error = nats_GetLastError(nullptr) != nullptr ? nats_GetLastError(nullptr) : "";
  if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_CONNECTION_CLOSED) {
    return NatsError("writing the configuration", s);
  }
  kvEntry* entry = nullptr;
  if (RetryPassing([&] { return kvStore_Get(&entry, config_kv_, kConfigKey); }) == NATS_OK) {
    const bool ours = static_cast<size_t>(kvEntry_ValueLen(entry)) == bytes.size() &&
                      std::string_view(static_cast<const char*>(kvEntry_Value(entry)),
                                       bytes.size()) == bytes;
    const uint64_t now_revision = kvEntry_Revision(entry);
    kvEntry_Destroy(entry);
    if (ours) {
      absl::MutexLock lock(&mu_);
      config_revision_ = std::max(config_revision_, now_revision);
      return absl::OkStatus();
    }
  }
  return absl::AbortedError(absl::StrCat(
      "the configuration was changed through another collector meanwhile (", error, ")"));
}

void JetStreamJobStore::WatchConfig(ConfigChanged changed) {
  const bool start = changed != nullptr;
  {
    absl::MutexLock lock(&callback_mu_);  // Waits for a call in progress.
    config_changed_ = std::move(changed);
  }
  if (!start || config_watcher_ != nullptr) return;
  kvWatchOptions watch_options;
  kvWatchOptions_Init(&watch_options);
  watch_options.IncludeHistory = false;
  const natsStatus s = RetryPassing(
      [&] { return kvStore_Watch(&config_watcher_, config_kv_, kConfigKey, &watch_options); });
  if (s != NATS_OK) {
    config_watcher_ = nullptr;
    common::LogError("cannot watch the configuration bucket: changes made through other "
                     "collectors apply here only after a restart",
                     {{"bucket", kConfigBucket}, {"error", natsStatus_GetText(s)}});
    return;
  }
  watcher_ = std::thread([this] { WatchLoop(config_watcher_); });
}

void JetStreamJobStore::WatchLoop(kvWatcher* watcher) {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    kvEntry* entry = nullptr;
    const natsStatus s = kvWatcher_Next(&entry, watcher, 500);
    if (s == NATS_TIMEOUT) continue;
    if (s != NATS_OK) {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      absl::SleepFor(absl::Milliseconds(200));
      continue;
    }
    if (entry == nullptr) continue;  // The end of the initial values.
    if (kvEntry_Operation(entry) == kvOp_Put) {
      const uint64_t revision = kvEntry_Revision(entry);
      bool newer = false;
      {
        absl::MutexLock lock(&mu_);
        newer = revision > config_revision_;
      }
      if (newer) {
        std::string value(static_cast<const char*>(kvEntry_Value(entry)),
                          static_cast<size_t>(kvEntry_ValueLen(entry)));
        bool adopted = false;
        {
          absl::MutexLock lock(&callback_mu_);
          if (config_changed_ != nullptr) adopted = config_changed_(std::move(value));
        }
        // Only a configuration the collector holds may be the base of its next save: bumped
        // after the callback, so a save racing it is refused (ABORTED) and re-applied.
        if (adopted) {
          absl::MutexLock lock(&mu_);
          config_revision_ = std::max(config_revision_, revision);
        }
      }
    }
    kvEntry_Destroy(entry);
  }
}

}  // namespace hookrelay::collector
