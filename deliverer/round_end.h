// Work a thread defers to the end of its current event-loop round. A sender worker runs the
// handlers that are ready in rounds (one that waited, then every other one ready) inside a
// RoundScope; what they defer with DeferToRoundEnd runs once the round's handlers are done. The
// deliverer uses it for job outcomes: those finished in one round go back to their collector in
// one gRPC write, not one write each.
#ifndef HOOKRELAY_DELIVERER_ROUND_END_H_
#define HOOKRELAY_DELIVERER_ROUND_END_H_

#include "absl/functional/any_invocable.h"

namespace hookrelay::deliverer {

// Marks this thread as running a round for its lifetime; on destruction runs what was deferred
// meanwhile (in order; work deferred by that work runs too). Not nested.
class RoundScope {
 public:
  RoundScope();
  ~RoundScope();
  RoundScope(const RoundScope&) = delete;
  RoundScope& operator=(const RoundScope&) = delete;
};

// True on a thread inside a RoundScope.
bool InRound();

// Runs `fn` at the end of this thread's round; at once outside one.
void DeferToRoundEnd(absl::AnyInvocable<void() &&> fn);

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_ROUND_END_H_
