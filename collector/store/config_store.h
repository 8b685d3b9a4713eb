// Configuration storage: the configuration managed at run time (admin API, SPEC §9) lives with
// the jobs, in the engine in use. One part of what an engine provides (collector/store/store.h);
// the ConfigManager uses it.
#ifndef HOOKRELAY_COLLECTOR_STORE_CONFIG_STORE_H_
#define HOOKRELAY_COLLECTOR_STORE_CONFIG_STORE_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hookrelay::collector {

// Thread-safe: every method may be called from any thread.
class ConfigStore {
 public:
  virtual ~ConfigStore() = default;

  // The bytes last saved, or nullopt before the first save. SaveConfig is durable
  // when it returns OK (fsync / replicated).
  // An engine shared by several collectors refuses a save with ABORTED when another collector
  // saved since this one last loaded or saw the configuration (the caller reads it again and
  // re-applies its change), so that no change made elsewhere is overwritten unseen.
  virtual absl::StatusOr<std::optional<std::string>> LoadConfig() = 0;
  virtual absl::Status SaveConfig(std::string_view bytes) = 0;
  // Calls `changed` with the stored bytes each time another process sharing the engine saves the
  // configuration (on a store thread; must not block long); it returns whether the caller now
  // holds that configuration (only then do later saves build on it). An engine that belongs to
  // one collector never calls it. Calling again replaces the callback; an empty one stops the
  // calls (it returns once no call is running).
  using ConfigChanged = absl::AnyInvocable<bool(std::string bytes)>;
  virtual void WatchConfig(ConfigChanged changed) { (void)changed; }
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_CONFIG_STORE_H_
