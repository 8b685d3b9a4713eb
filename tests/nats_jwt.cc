#include "tests/nats_jwt.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/nkey.h"

namespace hookrelay::test {
namespace {

using collector::NewNKey;
using collector::NKeyPair;
using collector::NKeySign;
using collector::NKeyType;

// Limits that mean "none" (-1) for an account.
constexpr char kAccountLimits[] =
    R"("limits":{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,"wildcards":true,)"
    R"("conn":-1,"leaf":-1)";
// JetStream on (storage -1 = unlimited); never on the system account.
constexpr char kJetStreamLimits[] =
    R"(,"mem_storage":-1,"disk_storage":-1,"streams":-1,"consumer":-1,"max_ack_pending":-1)";

// header.claims.signature, each base64url without padding; the claims' iss is the signer.
absl::StatusOr<std::string> Jwt(const NKeyPair& signer, const std::string& subject,
                                const std::string& name, const std::string& nats) {
  static int serial = 0;
  const std::string header = absl::WebSafeBase64Escape(R"({"typ":"JWT","alg":"ed25519-nkey"})");
  const std::string claims = absl::StrCat(
      R"({"jti":"HOOKRELAYTEST)", ++serial, R"(","iat":)", absl::ToUnixSeconds(absl::Now()),
      R"(,"iss":")", signer.public_key, R"(","name":")", name, R"(","sub":")", subject,
      R"(","nats":)", nats, "}");
  const std::string signed_part = absl::StrCat(header, ".", absl::WebSafeBase64Escape(claims));
  absl::StatusOr<std::string> signature = NKeySign(signer.seed, signed_part);
  if (!signature.ok()) return signature.status();
  return absl::StrCat(signed_part, ".", absl::WebSafeBase64Escape(*signature));
}

absl::StatusOr<std::string> Account(const NKeyPair& op, const NKeyPair& account,
                                    const std::string& name, bool jetstream) {
  return Jwt(op, account.public_key, name,
             absl::StrCat(R"({"type":"account","version":2,)", kAccountLimits,
                          jetstream ? kJetStreamLimits : "", "}}"));
}

// A user of `account` and its creds file.
absl::StatusOr<std::string> UserCreds(const NKeyPair& account, const std::string& name) {
  absl::StatusOr<NKeyPair> user = NewNKey(NKeyType::kUser);
  if (!user.ok()) return user.status();
  absl::StatusOr<std::string> jwt =
      Jwt(account, user->public_key, name,
          R"({"type":"user","version":2,"pub":{},"sub":{},"subs":-1,"data":-1,"payload":-1})");
  if (!jwt.ok()) return jwt.status();
  return absl::StrCat("-----BEGIN NATS USER JWT-----\n", *jwt,
                      "\n------END NATS USER JWT------\n\n"
                      "************************* IMPORTANT *************************\n"
                      "NKEY Seed printed below can be used to sign and prove identity.\n"
                      "NKEYs are sensitive and should be treated as secrets.\n\n"
                      "-----BEGIN USER NKEY SEED-----\n",
                      user->seed,
                      "\n------END USER NKEY SEED------\n\n"
                      "*************************************************************\n");
}

}  // namespace

absl::StatusOr<NatsJwtSetup> MakeNatsJwtSetup() {
  absl::StatusOr<NKeyPair> op = NewNKey(NKeyType::kOperator);
  absl::StatusOr<NKeyPair> sys = NewNKey(NKeyType::kAccount);
  absl::StatusOr<NKeyPair> account = NewNKey(NKeyType::kAccount);
  absl::StatusOr<NKeyPair> foreign = NewNKey(NKeyType::kAccount);
  for (const auto* k : {&op, &sys, &account, &foreign}) {
    if (!k->ok()) return k->status();
  }
  absl::StatusOr<std::string> op_jwt =
      Jwt(*op, op->public_key, "hookrelay-test",
          absl::StrCat(R"({"type":"operator","version":2,"system_account":")", sys->public_key,
                       R"("})"));
  absl::StatusOr<std::string> sys_jwt = Account(*op, *sys, "SYS", false);
  absl::StatusOr<std::string> account_jwt = Account(*op, *account, "HOOKRELAY", true);
  for (const auto* j : {&op_jwt, &sys_jwt, &account_jwt}) {
    if (!j->ok()) return j->status();
  }
  NatsJwtSetup setup;
  setup.server_config = absl::StrCat(
      "operator: ", *op_jwt, "\nsystem_account: ", sys->public_key, "\nresolver: MEMORY\n",
      "resolver_preload: {\n  ", sys->public_key, ": ", *sys_jwt, "\n  ", account->public_key,
      ": ", *account_jwt, "\n}\n");
  absl::StatusOr<std::string> creds = UserCreds(*account, "hookrelay");
  absl::StatusOr<std::string> foreign_creds = UserCreds(*foreign, "stranger");
  if (!creds.ok()) return creds.status();
  if (!foreign_creds.ok()) return foreign_creds.status();
  setup.creds = *std::move(creds);
  setup.foreign_creds = *std::move(foreign_creds);
  return setup;
}

}  // namespace hookrelay::test
