// Decentralised NATS authentication for tests (the JWTs `nsc` would make, without nsc): an
// operator, a system account, an account with JetStream and a user of it, as nats-server
// configuration (operator mode, memory resolver) plus the user's creds file; and a second user,
// of an account the operator never signed, whose creds the servers refuse. Keys are fresh NKeys
// (collector/store/jetstream/nkey.h), JWTs signed with them (ed25519-nkey). Test-only.
#ifndef HOOKRELAY_TESTS_NATS_JWT_H_
#define HOOKRELAY_TESTS_NATS_JWT_H_

#include <string>

#include "absl/status/statusor.h"

namespace hookrelay::test {

struct NatsJwtSetup {
  // operator, system_account, resolver: MEMORY, resolver_preload (NatsClusterOptions::auth_config).
  std::string server_config;
  // A creds file (user JWT + seed) of a user of the JetStream account.
  std::string creds;
  // The same for a user of an account no server trusts.
  std::string foreign_creds;
};

absl::StatusOr<NatsJwtSetup> MakeNatsJwtSetup();

}  // namespace hookrelay::test

#endif  // HOOKRELAY_TESTS_NATS_JWT_H_
