#include "deliverer/signer.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace hookrelay::deliverer {
namespace {

constexpr std::string_view kWhsecPrefix = "whsec_";

// HMAC of `message` into `md` (EVP_MAX_MD_SIZE bytes); returns the digest length.
unsigned int Hmac(const EVP_MD* md_type, std::string_view key, std::string_view message,
                  unsigned char* md) {
  // Some OpenSSL releases refuse a null key pointer even with length 0, and an empty
  // string_view may carry one. Keys are config strings, far below INT_MAX.
  static const unsigned char kEmpty = 0;
  const void* key_data = key.empty() ? static_cast<const void*>(&kEmpty) : key.data();
  if (key.size() > static_cast<size_t>(INT_MAX)) {
    std::fprintf(stderr, "hookrelay signer: HMAC key of %zu bytes is too long\n", key.size());
    std::abort();
  }
  unsigned int md_len = 0;
  if (HMAC(md_type, key_data, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), md,
           &md_len) == nullptr) {
    std::fprintf(stderr, "hookrelay signer: OpenSSL HMAC failed\n");
    std::abort();
  }
  return md_len;
}

}  // namespace

std::string XSignature(std::string_view secret, std::string_view body) {
  unsigned char md[EVP_MAX_MD_SIZE];
  const unsigned int len = Hmac(EVP_sha1(), secret, body, md);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(2 * len, '\0');
  for (unsigned int i = 0; i < len; ++i) {
    hex[2 * i] = kHex[md[i] >> 4];
    hex[2 * i + 1] = kHex[md[i] & 0xF];
  }
  return hex;
}

std::string StandardWebhookKey(std::string_view secret) {
  if (secret.substr(0, kWhsecPrefix.size()) == kWhsecPrefix) {
    std::string key;
    if (absl::Base64Unescape(common::ToAbsl(secret.substr(kWhsecPrefix.size())), &key) &&
        !key.empty()) {
      return key;
    }
  }
  return std::string(secret);
}

StandardWebhookHeaderValues StandardWebhookHeaders(std::string_view secret,
                                                   std::string_view msg_id,
                                                   int64_t unix_seconds, std::string_view body) {
  StandardWebhookHeaderValues out;
  out.id = std::string(msg_id);
  out.timestamp = absl::StrCat(unix_seconds);
  std::string signed_content;
  signed_content.reserve(msg_id.size() + out.timestamp.size() + body.size() + 2);
  signed_content.append(msg_id).append(".").append(out.timestamp).append(".").append(body);
  unsigned char md[EVP_MAX_MD_SIZE];
  const unsigned int len = Hmac(EVP_sha256(), StandardWebhookKey(secret), signed_content, md);
  out.signature = absl::StrCat(
      "v1,", absl::Base64Escape(absl::string_view(reinterpret_cast<const char*>(md), len)));
  return out;
}

}  // namespace hookrelay::deliverer
