#include "collector/store/jetstream/nats_connect.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "collector/store/jetstream/nkey.h"
#include "gtest/gtest.h"

namespace hookrelay::collector {
namespace {

std::string TempFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << contents;
  return path;
}

// A seed and the public key the NATS tools derive from it (nkeys' creds test vector, whose
// user JWT names that key as its subject).
TEST(NKeyTest, PublicKeyOfAKnownSeed) {
  absl::StatusOr<NKeyPair> pair =
      NKeyFromSeed("SUAOTBNEUHZDFJT3EUMELT7MQTP24JF3XVCXQNDSCU74G5IU6VAJBKH5LI");
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->type, NKeyType::kUser);
  EXPECT_EQ(pair->public_key, "UDE6WTGLTTPCRJRJCKBJRGVNZTLIVR7LEEELR4CYWWWBKJS7XYIKXDUU");
}

// New keys decode back to themselves, with their type letter; a changed character fails the
// checksum, and the error holds no part of the seed.
TEST(NKeyTest, NewKeysRoundTripAndCorruptionIsCaught) {
  for (NKeyType type : {NKeyType::kOperator, NKeyType::kAccount, NKeyType::kUser}) {
    absl::StatusOr<NKeyPair> pair = NewNKey(type);
    ASSERT_TRUE(pair.ok()) << pair.status();
    EXPECT_EQ(pair->seed[0], 'S');
    EXPECT_EQ(pair->seed[1], static_cast<char>(type));
    EXPECT_EQ(pair->public_key[0], static_cast<char>(type));
    absl::StatusOr<NKeyPair> again = NKeyFromSeed(pair->seed);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->public_key, pair->public_key);
    std::string bad = pair->seed;
    bad[10] = bad[10] == 'A' ? 'B' : 'A';
    absl::StatusOr<NKeyPair> corrupt = NKeyFromSeed(bad);
    EXPECT_FALSE(corrupt.ok());
    EXPECT_FALSE(absl::StrContains(corrupt.status().message(), bad.substr(2, 20)));
  }
}

// Each rule of the combination, with the flag named in the message.
TEST(NatsConnectOptionsTest, CombinationsAreChecked) {
  const std::string password = TempFile("password", "pw-123\n");
  const std::string seed = TempFile("seed", NewNKey(NKeyType::kUser)->seed + "\n");
  const std::string account_seed = TempFile("account-seed", NewNKey(NKeyType::kAccount)->seed);
  const std::string quoted = TempFile("quoted", "pa\"ss");
  const std::string pem = TempFile("ca.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");

  EXPECT_TRUE(ValidateNatsConnectOptions({}).ok());
  NatsConnectOptions ok;
  ok.user = "hookrelay";
  ok.password_file = password;
  ok.tls_ca_file = pem;
  EXPECT_TRUE(ValidateNatsConnectOptions(ok).ok());

  struct Case {
    NatsConnectOptions options;
    std::string message;
  };
  NatsConnectOptions o;
  std::vector<Case> cases;
  o = {}; o.password_file = password; cases.push_back({o, "--nats_password_file needs --nats_user"});
  o = {}; o.user = "u"; cases.push_back({o, "--nats_user needs --nats_password_file"});
  o = {}; o.user = "u"; o.password_file = password; o.token_file = password;
  cases.push_back({o, "--nats_user and --nats_token_file: give one way"});
  o = {}; o.creds_file = pem; o.nkey_seed_file = seed;
  cases.push_back({o, "--nats_creds_file and --nats_nkey_seed_file"});
  o = {}; o.tls_key_file = pem; cases.push_back({o, "--nats_tls_key_file needs --nats_tls_cert_file"});
  o = {}; o.nkey_seed_file = account_seed; cases.push_back({o, "not a user NKey seed"});
  o = {}; o.nkey_seed_file = password; cases.push_back({o, "--nats_nkey_seed_file: not an NKey seed"});
  o = {}; o.token_file = quoted; cases.push_back({o, "--nats_token_file: holds a quote"});
  o = {}; o.creds_file = pem; cases.push_back({o, "is not a NATS credentials file"});
  o = {}; o.tls_ca_file = password; cases.push_back({o, "--nats_tls_ca_file: " + password + " holds no PEM"});
  o = {}; o.tls_ca_file = "/nonexistent/ca.pem"; cases.push_back({o, "--nats_tls_ca_file: cannot read"});
  for (const Case& c : cases) {
    const absl::Status s = ValidateNatsConnectOptions(c.options);
    EXPECT_FALSE(s.ok()) << c.message;
    EXPECT_TRUE(absl::StrContains(s.message(), c.message)) << s.message();
    EXPECT_FALSE(absl::StrContains(s.message(), "pw-123")) << s.message();
  }
}

// Descriptions and URLs in logs carry no secret.
TEST(NatsConnectOptionsTest, NothingSecretInDescriptions) {
  NatsConnectOptions o;
  o.user = "hookrelay";
  o.password_file = "/etc/nats/password";
  o.tls_ca_file = "/etc/nats/ca.crt";
  EXPECT_EQ(DescribeNatsConnect(o), "user hookrelay, TLS (CA /etc/nats/ca.crt)");
  EXPECT_EQ(DescribeNatsConnect({}), "no credentials");
  EXPECT_EQ(RedactNatsUrls("nats://u:pw@a:4222,nats://b:4222,tls://tok@c:4222/x"),
            "nats://***@a:4222,nats://b:4222,tls://***@c:4222/x");
  EXPECT_EQ(RedactNatsUrls("nats://a:4222"), "nats://a:4222");
}

}  // namespace
}  // namespace hookrelay::collector
