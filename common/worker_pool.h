#ifndef HOOKRELAY_COMMON_WORKER_POOL_H_
#define HOOKRELAY_COMMON_WORKER_POOL_H_

#include <cstddef>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace hookrelay::common {

// Threads made once that run the iterations of one loop together with the calling thread, for
// blocking work such as request round trips made side by side. A thread made per call costs
// more than the round trip it waits on (its stack mapped, zeroed and unmapped each time).
class WorkerPool {
 public:
  // `helpers` threads besides the caller's (0: ForEach runs everything on the caller).
  explicit WorkerPool(size_t helpers);
  ~WorkerPool();  // Joins the threads.
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Calls fn(i) for each i in [0, n), on the helpers and on the calling thread, at most
  // helpers + 1 at once and in no set order; returns once every call has returned. One loop at
  // a time: a second caller waits for the first loop to end.
  void ForEach(size_t n, absl::FunctionRef<void(size_t)> fn);

  size_t helpers() const { return threads_.size(); }

 private:
  void Work();
  // Runs the loop's next iteration, if one is left: false when none is.
  bool RunOne();
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex loop_mu_;  // One ForEach at a time.
  absl::Mutex mu_;
  const absl::FunctionRef<void(size_t)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t n_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;  // iterations being run
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_WORKER_POOL_H_
