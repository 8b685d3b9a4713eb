// NATS requests and their errors, for every part of the JetStream engine (the job queue,
// collector/store/jetstream/jetstream_job_store.h, and the user data,
// collector/store/jetstream/jetstream_user_data.h): the one error for a failed NATS call, the one
// reader of publish acks answered to a plain request, the retry of calls that fail in passing,
// message headers, and the options of an asynchronous publish.
#ifndef HOOKRELAY_COLLECTOR_STORE_JETSTREAM_NATS_REQUEST_H_
#define HOOKRELAY_COLLECTOR_STORE_JETSTREAM_NATS_REQUEST_H_

#include <nats/nats.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace hookrelay::collector {

// UNAVAILABLE "JetStream: <what>: <the status's text>".
absl::Status NatsError(std::string_view what, natsStatus s);

// A publish ack: {"stream":..,"seq":N} or {"error":{..}}.
struct PubAck {
  uint64_t seq = 0;
  int64_t error_code = 0;
  std::string error;
};
// error_code -1 when the body is not a publish ack.
PubAck ParsePubAck(const std::string& body);

// The value of header `key` of `msg`, "" when it has none.
std::string NatsHeader(natsMsg* msg, const char* key);

// Runs `call` again while it fails in a way that passes within seconds (a node rejoining, a leader
// election: no responders, a timeout), for up to 10 s. The 10 s and the pauses are real time: they
// wait for the cluster, whatever the store's clock says.
template <typename Call>
natsStatus RetryPassing(Call call) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  natsStatus s = call();
  while ((s == NATS_NO_RESPONDERS || s == NATS_TIMEOUT) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    s = call();
  }
  return s;
}

// Options for an asynchronous publish: its ack is awaited for at most `wait`. Without a MaxWait
// cnats waits for ever, and an ack that never comes (the node the connection was on died with the
// publish in flight; the connection moves to another node, the ack does not follow) would hold
// its Append — the HTTP request, and the collector's drain — for ever. A timeout reaches
// OnPublishAck as NATS_TIMEOUT: sent again (same Nats-Msg-Id: stored once) within kRepublishFor.
jsPubOptions AsyncPublishOptions(absl::Duration wait);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_JETSTREAM_NATS_REQUEST_H_
