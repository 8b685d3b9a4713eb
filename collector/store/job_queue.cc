#include "collector/store/job_queue.h"

namespace hookrelay::collector {

void RecordAttempt(const hookrelay::v1::Attempt& attempt, int64_t now_ms,
                   hookrelay::v1::Job& job) {
  if (attempt.urls_size() == 0 && attempt.at_unix_ms() == 0) {
    // A deferral (an empty Attempt): no request was sent, so neither the attempt count nor the
    // retry window moves.
    job.set_deferrals(job.deferrals() + 1);
    return;
  }
  job.set_attempts(job.attempts() + 1);
  if (job.first_attempt_unix_ms() == 0) {
    job.set_first_attempt_unix_ms(attempt.at_unix_ms() != 0 ? attempt.at_unix_ms() : now_ms);
  }
  *job.add_history() = attempt;
  if (job.history_size() > kMaxJobHistory) {
    job.mutable_history()->DeleteSubrange(0, job.history_size() - kMaxJobHistory);
  }
}

}  // namespace hookrelay::collector
