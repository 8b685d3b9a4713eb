#include "deliverer/signer.h"

// HMAC_CTX is deprecated in OpenSSL 3 in favour of EVP_MAC, which BoringSSL lacks; the HMAC_CTX
// functions are what both libraries share, so OpenSSL's deprecation warnings are silenced here.
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
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

[[noreturn]] void CryptoFailure(const char* what) {
  std::fprintf(stderr, "hookrelay signer: OpenSSL %s failed\n", what);
  std::abort();
}

std::string LowerHex(const unsigned char* md, unsigned int len) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(2 * len, '\0');
  for (unsigned int i = 0; i < len; ++i) {
    hex[2 * i] = kHex[md[i] >> 4];
    hex[2 * i + 1] = kHex[md[i] & 0xF];
  }
  return hex;
}

std::string StandardWebhookSignature(const unsigned char* md, unsigned int len) {
  return absl::StrCat(
      "v1,", absl::Base64Escape(absl::string_view(reinterpret_cast<const char*>(md), len)));
}

}  // namespace

std::string XSignature(std::string_view secret, std::string_view body) {
  unsigned char md[EVP_MAX_MD_SIZE];
  const unsigned int len = Hmac(EVP_sha1(), secret, body, md);
  return LowerHex(md, len);
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
  out.signature = StandardWebhookSignature(md, len);
  return out;
}

// One HMAC_CTX per secret, initialised with its key once.
class Signer::KeyedContexts {
 public:
  using KeyFn = std::string (*)(std::string_view secret);

  // `key_of` maps a secret to the HMAC key (identity, or StandardWebhookKey).
  KeyedContexts(const EVP_MD* md, KeyFn key_of) : md_(md), key_of_(key_of) {}
  ~KeyedContexts() { Clear(); }

  // A context for `secret` ready for HMAC_Update: at the start of a new message.
  HMAC_CTX* Start(std::string_view secret) {
    auto it = by_secret_.find(common::ToAbsl(secret));
    if (it != by_secret_.end()) {
      // A null key keeps the key: the context restarts from the saved inner pad state.
      if (HMAC_Init_ex(it->second, nullptr, 0, nullptr, nullptr) != 1) CryptoFailure("HMAC_Init_ex");
      return it->second;
    }
    if (by_secret_.size() >= kMaxKeys) Clear();
    HMAC_CTX* ctx = HMAC_CTX_new();
    if (ctx == nullptr) CryptoFailure("HMAC_CTX_new");
    const std::string key = key_of_(secret);
    if (key.size() > static_cast<size_t>(INT_MAX)) {
      std::fprintf(stderr, "hookrelay signer: HMAC key of %zu bytes is too long\n", key.size());
      std::abort();
    }
    // As in Hmac(): never a null key pointer, even for an empty key.
    static const unsigned char kEmpty = 0;
    const void* key_data = key.empty() ? static_cast<const void*>(&kEmpty) : key.data();
    if (HMAC_Init_ex(ctx, key_data, static_cast<int>(key.size()), md_, nullptr) != 1) {
      CryptoFailure("HMAC_Init_ex");
    }
    by_secret_.emplace(std::string(secret), ctx);
    return ctx;
  }

 private:
  void Clear() {
    for (auto& [secret, ctx] : by_secret_) HMAC_CTX_free(ctx);
    by_secret_.clear();
  }

  const EVP_MD* const md_;
  const KeyFn key_of_;
  absl::flat_hash_map<std::string, HMAC_CTX*> by_secret_;
};

namespace {

void Update(HMAC_CTX* ctx, std::string_view data) {
  if (HMAC_Update(ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1) {
    CryptoFailure("HMAC_Update");
  }
}

unsigned int Final(HMAC_CTX* ctx, unsigned char* md) {
  unsigned int len = 0;
  if (HMAC_Final(ctx, md, &len) != 1) CryptoFailure("HMAC_Final");
  return len;
}

std::string Identity(std::string_view secret) { return std::string(secret); }

}  // namespace

Signer::Signer()
    : sha1_(std::make_unique<KeyedContexts>(EVP_sha1(), &Identity)),
      sha256_(std::make_unique<KeyedContexts>(EVP_sha256(), &StandardWebhookKey)) {}

Signer::~Signer() = default;

std::string Signer::XSignature(std::string_view secret, std::string_view body) {
  HMAC_CTX* ctx = sha1_->Start(secret);
  Update(ctx, body);
  unsigned char md[EVP_MAX_MD_SIZE];
  const unsigned int len = Final(ctx, md);
  return LowerHex(md, len);
}

StandardWebhookHeaderValues Signer::StandardWebhookHeaders(std::string_view secret,
                                                           std::string_view msg_id,
                                                           int64_t unix_seconds,
                                                           std::string_view body) {
  StandardWebhookHeaderValues out;
  out.id = std::string(msg_id);
  out.timestamp = absl::StrCat(unix_seconds);
  HMAC_CTX* ctx = sha256_->Start(secret);
  // The signed content is msg_id "." timestamp "." body, fed in pieces rather than copied.
  Update(ctx, msg_id);
  Update(ctx, ".");
  Update(ctx, out.timestamp);
  Update(ctx, ".");
  Update(ctx, body);
  unsigned char md[EVP_MAX_MD_SIZE];
  const unsigned int len = Final(ctx, md);
  out.signature = StandardWebhookSignature(md, len);
  return out;
}

}  // namespace hookrelay::deliverer
