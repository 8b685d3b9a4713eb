#include "common/worker_pool.h"

namespace hookrelay::common {

WorkerPool::WorkerPool(size_t helpers) {
  threads_.reserve(helpers);
  for (size_t i = 0; i < helpers; ++i) threads_.emplace_back([this] { Work(); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::ForEach(size_t n, absl::FunctionRef<void(size_t)> fn) {
  if (n == 0) return;
  absl::MutexLock loop(&loop_mu_);
  {
    absl::MutexLock lock(&mu_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
  }
  while (RunOne()) {
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &WorkerPool::Idle));
  fn_ = nullptr;
}

bool WorkerPool::RunOne() {
  const absl::FunctionRef<void(size_t)>* fn = nullptr;
  size_t i = 0;
  {
    absl::MutexLock lock(&mu_);
    if (fn_ == nullptr || next_ >= n_) return false;
    fn = fn_;
    i = next_++;
    ++running_;
  }
  (*fn)(i);
  absl::MutexLock lock(&mu_);
  --running_;
  return true;
}

bool WorkerPool::Idle() const { return running_ == 0; }

bool WorkerPool::WorkOrStop() const { return stop_ || (fn_ != nullptr && next_ < n_); }

void WorkerPool::Work() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WorkerPool::WorkOrStop));
      if (stop_) return;
    }
    while (RunOne()) {
    }
  }
}

}  // namespace hookrelay::common
