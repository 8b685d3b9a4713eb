// Request signatures (SPEC §5.2): the seed's X-Signature and, per destination, Standard Webhooks.
//
// Both are computed over the exact body bytes sent. Uses only what OpenSSL and BoringSSL share: the
// free functions the one-shot `HMAC()`, `Signer` the block hash functions (`SHA1_*`, `SHA256_*`)
// under its own HMAC. The free functions are pure and thread-safe; `Signer` is their fast form
// for one thread's hot path, with byte-identical output. Nothing throws; a failure of the crypto
// library itself (a broken invariant, not bad input) crashes with a message.
#ifndef HOOKRELAY_DELIVERER_SIGNER_H_
#define HOOKRELAY_DELIVERER_SIGNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace hookrelay::deliverer {

inline constexpr char kSignatureHeader[] = "X-Signature";
inline constexpr char kWebhookIdHeader[] = "webhook-id";
inline constexpr char kWebhookTimestampHeader[] = "webhook-timestamp";
inline constexpr char kWebhookSignatureHeader[] = "webhook-signature";

// Lowercase hex of HMAC-SHA1(key = `secret`, message = `body`): the X-Signature header value.
// The caller sends the header only when the destination has a shared secret.
std::string XSignature(std::string_view secret, std::string_view body);

// The HMAC-SHA256 key Standard Webhooks signing uses for `secret`:
//  - `whsec_<base64>` (the Standard Webhooks convention, what its libraries generate and verify
//    with): the base64-decoded remainder;
//  - anything else, or a `whsec_` secret whose remainder is empty or not valid base64: the
//    secret's raw bytes, as for X-Signature. (Config validation may refuse such secrets; signing
//    never fails.)
std::string StandardWebhookKey(std::string_view secret);

// The three Standard Webhooks header values.
struct StandardWebhookHeaderValues {
  std::string id;         // webhook-id: `msg_id` as given (stable across retries)
  std::string timestamp;  // webhook-timestamp: decimal Unix seconds
  std::string signature;  // webhook-signature: "v1," + base64(HMAC-SHA256(key, id.ts.body))
};

// Signs `body` for Standard Webhooks: HMAC-SHA256 keyed by StandardWebhookKey(secret) over
// `msg_id + "." + unix_seconds + "." + body`, standard base64 with padding.
StandardWebhookHeaderValues StandardWebhookHeaders(std::string_view secret,
                                                   std::string_view msg_id,
                                                   int64_t unix_seconds, std::string_view body);

// XSignature and StandardWebhookHeaders with the HMAC state kept per key: a key's inner and outer
// pads are hashed once, and every later message under that key starts from copies of those two
// hash states (on the stack: no allocation per message) and, for Standard Webhooks, with no copy
// of the body into the signed content. Up to kMaxKeys secrets
// are remembered per algorithm (beyond that the cache starts over). Holds the secrets it has seen
// in memory. Not thread-safe: one per thread (the deliverer keeps one thread_local).
class Signer {
 public:
  static constexpr size_t kMaxKeys = 64;

  Signer();
  ~Signer();
  Signer(const Signer&) = delete;
  Signer& operator=(const Signer&) = delete;

  // Same value as the free XSignature().
  std::string XSignature(std::string_view secret, std::string_view body);
  // Same values as the free StandardWebhookHeaders().
  StandardWebhookHeaderValues StandardWebhookHeaders(std::string_view secret,
                                                     std::string_view msg_id,
                                                     int64_t unix_seconds, std::string_view body);

 private:
  class Sha1Keys;
  class Sha256Keys;
  std::unique_ptr<Sha1Keys> sha1_;      // keyed by the secret
  std::unique_ptr<Sha256Keys> sha256_;  // keyed by the secret, holding StandardWebhookKey's key
};

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_SIGNER_H_
