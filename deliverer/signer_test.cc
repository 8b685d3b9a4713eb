#include "deliverer/signer.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace hookrelay::deliverer {
namespace {

// X-Signature is lowercase hex HMAC-SHA1: the widely published "quick brown fox" vector.
TEST(SignerTest, XSignatureQuickBrownFox) {
  EXPECT_EQ(XSignature("key", "The quick brown fox jumps over the lazy dog"),
            "de7c9b85b8b78aa6bc8a7a36f70a90701c9db4d9");
}

// RFC 2202 HMAC-SHA1 test cases 1, 2 and 6 (short binary key, short text key, key longer than
// the block size).
TEST(SignerTest, XSignatureRfc2202Vectors) {
  EXPECT_EQ(XSignature(std::string(20, '\x0b'), "Hi There"),
            "b617318655057264e28bc0b6fb378c8ef146be00");
  EXPECT_EQ(XSignature("Jefe", "what do ya want for nothing?"),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
  EXPECT_EQ(XSignature(std::string(80, '\xaa'),
                       "Test Using Larger Than Block-Size Key - Hash Key First"),
            "aa4ae5e15272d00e95705637ce8a3b55ed402112");
}

// Empty key and empty body still sign (HMAC-SHA1("", "")), 40 lowercase hex digits.
TEST(SignerTest, XSignatureEmptyInputs) {
  EXPECT_EQ(XSignature("", ""), "fbdb1d1b18aa6c08324b7d64b71fb76370690e1d");
}

// The signature covers the exact bytes: UTF-8 bodies and NUL bytes included, one byte changes it.
TEST(SignerTest, XSignatureCoversExactBytes) {
  const std::string body = "{\"event\":\"Caf\xC3\xA9\",\"n\":1}";
  EXPECT_NE(XSignature("s", body), XSignature("s", "{\"event\":\"Caf\xC3\xA9\",\"n\":2}"));
  EXPECT_NE(XSignature("s", std::string("a\0b", 3)), XSignature("s", "a"));
  EXPECT_EQ(XSignature("s", body), XSignature("s", body));
  EXPECT_EQ(XSignature("s", body).size(), 40u);
}

// The Standard Webhooks specification's own example.
TEST(SignerTest, StandardWebhooksSpecExample) {
  const StandardWebhookHeaderValues h =
      StandardWebhookHeaders("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                             "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, R"({"test": 2432232314})");
  EXPECT_EQ(h.id, "msg_p5jXN8AQM9LWM0D4loKWxJek");
  EXPECT_EQ(h.timestamp, "1614265330");
  EXPECT_EQ(h.signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

// A whsec_ secret is keyed by its base64-decoded remainder; anything else by its raw bytes.
TEST(SignerTest, StandardWebhookKeyHandling) {
  std::string decoded;
  ASSERT_TRUE(absl::Base64Unescape("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &decoded));
  EXPECT_EQ(StandardWebhookKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), decoded);
  EXPECT_EQ(StandardWebhookKey("plain secret"), "plain secret");
  EXPECT_EQ(StandardWebhookKey("whsec_not base64!"), "whsec_not base64!");
  EXPECT_EQ(StandardWebhookKey("whsec_"), "whsec_");
}

// A secret without the whsec_ prefix keys HMAC-SHA256 with its raw bytes. Expected value from
// an independent implementation: python3 -c 'import hmac,hashlib,base64;
//   print(base64.b64encode(hmac.new(b"Jefe", b"msg_1.7.{}", hashlib.sha256).digest()))'
TEST(SignerTest, StandardWebhooksRawSecret) {
  const StandardWebhookHeaderValues h = StandardWebhookHeaders("Jefe", "msg_1", 7, "{}");
  EXPECT_EQ(h.timestamp, "7");
  EXPECT_EQ(h.signature, "v1,2IbIfr/bPmIAgcVZr3l5zTrroHzHr01QH0Gjm74miuU=");
}

// Signer (contexts reused per key) gives exactly the one-shot HMAC's bytes, for many messages of
// every length around the hash block size, under keys that alternate between messages: empty,
// short, exactly the block size (64 bytes), one byte longer and longer still (hashed first),
// whsec_ and raw Standard Webhooks secrets.
TEST(SignerTest, ReusedContextsMatchOneShotHmac) {
  const std::vector<std::string> secrets = {
      "", "key", std::string(64, 'k'), std::string(65, 'k'), std::string(80, '\xaa'),
      "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
      "whsec_not base64!", std::string("nul\0inside", 10)};
  Signer signer;
  int checked = 0;
  for (int round = 0; round < 3; ++round) {  // later rounds hit the cached contexts
    for (size_t len = 0; len < 300; len += (len < 140 ? 1 : 37)) {
      std::string body;
      for (size_t i = 0; i < len; ++i) body.push_back(static_cast<char>('a' + (i * 7 + len) % 26));
      const std::string& secret = secrets[(len + round) % secrets.size()];
      ASSERT_EQ(signer.XSignature(secret, body), XSignature(secret, body))
          << "secret #" << (len + round) % secrets.size() << ", body of " << len << " bytes";
      const std::string msg_id = "msg_" + std::to_string(len);
      const StandardWebhookHeaderValues got =
          signer.StandardWebhookHeaders(secret, msg_id, 1700000000 + len, body);
      const StandardWebhookHeaderValues want =
          StandardWebhookHeaders(secret, msg_id, 1700000000 + len, body);
      ASSERT_EQ(got.id, want.id);
      ASSERT_EQ(got.timestamp, want.timestamp);
      ASSERT_EQ(got.signature, want.signature)
          << "secret #" << (len + round) % secrets.size() << ", body of " << len << " bytes";
      checked += 2;
    }
  }
  EXPECT_GT(checked, 500);
}

// The published vectors through Signer, twice each (the second from the reused context).
TEST(SignerTest, ReusedContextsKnownVectors) {
  Signer signer;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(signer.XSignature("key", "The quick brown fox jumps over the lazy dog"),
              "de7c9b85b8b78aa6bc8a7a36f70a90701c9db4d9");
    EXPECT_EQ(signer.XSignature(std::string(80, '\xaa'),
                                "Test Using Larger Than Block-Size Key - Hash Key First"),
              "aa4ae5e15272d00e95705637ce8a3b55ed402112");
    EXPECT_EQ(signer.XSignature("", ""), "fbdb1d1b18aa6c08324b7d64b71fb76370690e1d");
    EXPECT_EQ(signer
                  .StandardWebhookHeaders("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                          "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                                          R"({"test": 2432232314})")
                  .signature,
              "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    EXPECT_EQ(signer.StandardWebhookHeaders("Jefe", "msg_1", 7, "{}").signature,
              "v1,2IbIfr/bPmIAgcVZr3l5zTrroHzHr01QH0Gjm74miuU=");
  }
}

// More secrets than the cache keeps: it starts over and every signature stays correct, also for
// the secrets signed again after the reset.
TEST(SignerTest, MoreSecretsThanTheCacheKeeps) {
  Signer signer;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < Signer::kMaxKeys * 2 + 3; ++i) {
      const std::string secret = "secret-" + std::to_string(i);
      const std::string body = "{\"n\":" + std::to_string(i * 31 + round) + "}";
      ASSERT_EQ(signer.XSignature(secret, body), XSignature(secret, body)) << secret;
      ASSERT_EQ(signer.StandardWebhookHeaders(secret, "m", 1, body).signature,
                StandardWebhookHeaders(secret, "m", 1, body).signature)
          << secret;
    }
  }
}

}  // namespace
}  // namespace hookrelay::deliverer
