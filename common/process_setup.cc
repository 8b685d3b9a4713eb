#include "common/process_setup.h"

#include "absl/synchronization/mutex.h"

namespace hookrelay::common {

void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace hookrelay::common
