// Request signatures (SPEC §5.2): the seed's X-Signature and, per destination, Standard Webhooks.
//
// Both are computed over the exact body bytes sent. Uses only the one-shot OpenSSL `HMAC()` API
// that BoringSSL shares. All functions are pure, thread-safe and never throw; they crash with a
// message only if the crypto library itself fails (a broken invariant, not bad input).
#ifndef HOOKRELAY_DELIVERER_SIGNER_H_
#define HOOKRELAY_DELIVERER_SIGNER_H_

#include <cstdint>
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

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_SIGNER_H_
