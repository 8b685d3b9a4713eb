// How the JetStream engine authenticates to NATS and secures the connection (issue 24 §1): the
// one place that turns the collector's --nats_* credential and TLS flags into cnats options.
// Every secret comes from a file (a mounted Kubernetes Secret); no error message, log line or
// description produced here contains a secret, only flag names and file paths.
//
// Authentication, at most one of:
//   creds_file        --nats_creds_file: a NATS user JWT and its NKey seed (decentralised
//                     auth); re-read by the client at every (re)connect, so a rotated file is
//                     picked up at the next reconnect.
//   nkey_seed_file    --nats_nkey_seed_file: a user NKey seed (SU...); re-read at every connect.
//   user + password_file   --nats_user, --nats_password_file (read once, at start).
//   token_file        --nats_token_file (read once, at start).
// TLS (on as soon as one of these is set, or with tls:// URLs):
//   tls_ca_file       --nats_tls_ca_file: the CAs that sign the servers' certificates (else the
//                     system's trusted CAs). Server certificates are always verified, and must
//                     name the host of the URL the client connects to.
//   tls_cert_file + tls_key_file   --nats_tls_cert_file, --nats_tls_key_file: a client
//                     certificate (servers with `verify: true`, or `verify_and_map`).
#ifndef HOOKRELAY_COLLECTOR_STORE_JETSTREAM_NATS_CONNECT_H_
#define HOOKRELAY_COLLECTOR_STORE_JETSTREAM_NATS_CONNECT_H_

#include <nats/nats.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace hookrelay::collector {

struct NatsConnectOptions {
  std::string creds_file;
  std::string nkey_seed_file;
  std::string user;
  std::string password_file;
  std::string token_file;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;

  // No setting at all: no authentication, TLS only for tls:// URLs.
  bool empty() const;
  // Whether TLS is configured by these settings (a tls:// URL turns it on too).
  bool tls() const;
};

// Checks the combination (one authentication method, a password with its user and a user with
// its password, a client certificate with its key) and that every file named is readable and
// holds what it should (a creds file with a JWT and a seed, a user NKey seed, a PEM certificate
// and key, a non-empty password or token a NATS client can send). INVALID_ARGUMENT (or the file's
// NOT_FOUND / PERMISSION_DENIED) with a message naming the flag first, e.g.
// "--nats_password_file needs --nats_user".
absl::Status ValidateNatsConnectOptions(const NatsConnectOptions& options);

// Validates, then applies the settings to `opts` (created by the caller, which still owns it).
absl::Status ApplyNatsConnectOptions(const NatsConnectOptions& options, natsOptions* opts);

// "user hookrelay, TLS (CA /etc/nats-ca/ca.crt, client certificate)", "creds file /x", "none":
// for the start-up log line.
std::string DescribeNatsConnect(const NatsConnectOptions& options);

// The URLs with any user information (nats://user:password@host) replaced by "***@", for logs
// and errors.
std::string RedactNatsUrls(std::string_view urls);

// natsConnection_Connect, tried up to three times when the servers refuse a signed connect
// (--nats_creds_file, --nats_nkey_seed_file). Debian's client library (3.4; fixed in 3.10) drops
// a nonce signature whose first byte is 0 from CONNECT — its base64 encoder takes a leading 0
// byte for an empty input — so one such connect in 256 is refused with good credentials. Each
// attempt signs a new nonce, so a refusal that repeats is a real one. The library's reconnects
// retry on their own; two refusals in a row from one server (1 in 65,536) close the connection,
// and /healthz then asks for a restart.
natsStatus ConnectNats(natsConnection** nc, natsOptions* opts, const NatsConnectOptions& options);

// UNAVAILABLE for a failed natsConnection_Connect (call on the thread that made the call: it
// reads the client's thread-local error), saying why in the terms of the flags: refused
// credentials, a certificate that does not verify, a server asking for TLS or credentials the
// collector was not given. Never contains a secret.
absl::Status NatsConnectError(std::string_view urls, const NatsConnectOptions& options,
                              natsStatus s);

// The connection's last error as text ("" when none), for health reports while reconnecting.
std::string NatsLastError(natsConnection* nc);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_JETSTREAM_NATS_CONNECT_H_
