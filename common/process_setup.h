// Process-wide settings a long-running hookrelay server applies at start (collector, deliverer).
// Tests do not call this: they keep the library defaults.
#ifndef HOOKRELAY_COMMON_PROCESS_SETUP_H_
#define HOOKRELAY_COMMON_PROCESS_SETUP_H_

namespace hookrelay::common {

// Turns off Abseil's lock-order (deadlock) detection for absl::Mutex. Debian builds its Abseil
// without NDEBUG, so the detection is on in the shared library: every Mutex::Lock looks the mutex
// up in one process-wide graph behind a global spin lock and records it in a per-thread list
// (58 ns per uncontended lock and unlock against 23 ns without, measured on the benchmark VM, plus
// the spin lock shared by every thread). The unit tests keep it on, where lock-order inversions
// are caught.
void DisableMutexDeadlockDetection();

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_PROCESS_SETUP_H_
