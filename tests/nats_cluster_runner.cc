// Runs a loopback 3-node JetStream cluster (tests/nats_cluster.h) for scripted tests: prints
// `nats_url=<urls>` on one line once the cluster can place a replicated stream, then keeps it up
// until it gets SIGTERM or SIGINT, and stops every node (tests/setup_flow_test.sh).
#include <signal.h>

#include <cstdio>
#include <memory>

#include "tests/nats_cluster.h"

namespace {

volatile sig_atomic_t stop = 0;
void OnSignal(int) { stop = 1; }

}  // namespace

int main() {
  // Blocked until sigsuspend, so a signal between the check and the wait is not lost.
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  sigprocmask(SIG_BLOCK, &blocked, nullptr);
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  absl::StatusOr<std::unique_ptr<hookrelay::test::NatsCluster>> cluster =
      hookrelay::test::NatsCluster::Start(3);
  if (!cluster.ok()) {
    std::fprintf(stderr, "nats_cluster_runner: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  std::printf("nats_url=%s\n", (*cluster)->urls().c_str());
  std::fflush(stdout);
  sigset_t waiting;
  sigemptyset(&waiting);
  while (!stop) sigsuspend(&waiting);
  cluster->reset();
  return 0;
}
