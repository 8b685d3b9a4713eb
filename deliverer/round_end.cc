#include "deliverer/round_end.h"

#include <utility>
#include <vector>

namespace hookrelay::deliverer {
namespace {

struct Round {
  bool active = false;
  std::vector<absl::AnyInvocable<void() &&>> deferred;
};

Round& ThisThread() {
  thread_local Round round;
  return round;
}

}  // namespace

RoundScope::RoundScope() { ThisThread().active = true; }

RoundScope::~RoundScope() {
  Round& round = ThisThread();
  // Work deferred by deferred work (still inside the round) runs in this loop as well.
  for (size_t i = 0; i < round.deferred.size(); ++i) {
    absl::AnyInvocable<void() &&> fn = std::move(round.deferred[i]);
    std::move(fn)();
  }
  round.deferred.clear();
  round.active = false;
}

bool InRound() { return ThisThread().active; }

void DeferToRoundEnd(absl::AnyInvocable<void() &&> fn) {
  Round& round = ThisThread();
  if (!round.active) {
    std::move(fn)();
    return;
  }
  round.deferred.push_back(std::move(fn));
}

}  // namespace hookrelay::deliverer
