#include "deliverer/signer.h"

// HMAC() and the SHA1_* / SHA256_* block functions are deprecated in OpenSSL 3 in favour of
// EVP_MAC and EVP_Digest*, which BoringSSL lacks or shapes differently; these are what both
// libraries share, so OpenSSL's deprecation warnings are silenced here.
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

namespace {

// HMAC (RFC 2104) over one of the block hashes both libraries expose directly (SHA1_* and
// SHA256_*, 64-byte blocks), with the key's inner and outer pads hashed once per key: a message
// then costs a copy of two hash states on the stack, the message's blocks and two final blocks.
// HMAC_CTX did the same work but, in OpenSSL 3, allocated and freed a digest context twice per
// message (HMAC_Init_ex and HMAC_Final copy one) and went through the provider layer.
template <typename Ctx, int (*Init)(Ctx*), int (*Update)(Ctx*, const void*, size_t),
          int (*Final)(unsigned char*, Ctx*), size_t kDigestSize>
class PadState {
 public:
  static constexpr size_t kBlockSize = 64;
  static constexpr size_t kSize = kDigestSize;

  explicit PadState(std::string_view key) {
    unsigned char block[kBlockSize] = {};
    if (key.size() > kBlockSize) {
      // A key longer than a block is hashed first.
      Ctx c;
      Check(Init(&c), "hash init");
      Check(Update(&c, key.data(), key.size()), "hash update");
      Check(Final(block, &c), "hash final");
    } else if (!key.empty()) {
      std::memcpy(block, key.data(), key.size());
    }
    unsigned char pad[kBlockSize];
    for (size_t i = 0; i < kBlockSize; ++i) pad[i] = block[i] ^ 0x36;
    Check(Init(&inner_), "hash init");
    Check(Update(&inner_, pad, kBlockSize), "hash update");
    for (size_t i = 0; i < kBlockSize; ++i) pad[i] = block[i] ^ 0x5c;
    Check(Init(&outer_), "hash init");
    Check(Update(&outer_, pad, kBlockSize), "hash update");
    OPENSSL_cleanse(block, sizeof(block));
    OPENSSL_cleanse(pad, sizeof(pad));
  }
  ~PadState() {
    OPENSSL_cleanse(&inner_, sizeof(inner_));
    OPENSSL_cleanse(&outer_, sizeof(outer_));
  }
  PadState(const PadState&) = delete;
  PadState& operator=(const PadState&) = delete;

  // One message, fed in parts with Add, then Finish.
  class Message {
   public:
    explicit Message(const PadState& pads) : pads_(pads), ctx_(pads.inner_) {}
    void Add(std::string_view data) {
      Check(Update(&ctx_, data.data(), data.size()), "hash update");
    }
    // Writes kSize bytes to `md`.
    void Finish(unsigned char* md) {
      unsigned char inner[kDigestSize];
      Check(Final(inner, &ctx_), "hash final");
      Ctx outer = pads_.outer_;
      Check(Update(&outer, inner, kDigestSize), "hash update");
      Check(Final(md, &outer), "hash final");
    }

   private:
    const PadState& pads_;
    Ctx ctx_;
  };

 private:
  static void Check(int ok, const char* what) {
    if (ok != 1) CryptoFailure(what);
  }

  Ctx inner_;  // after the key's inner pad block
  Ctx outer_;  // after the key's outer pad block
};

using Sha1Pads = PadState<SHA_CTX, SHA1_Init, SHA1_Update, SHA1_Final, SHA_DIGEST_LENGTH>;
using Sha256Pads =
    PadState<SHA256_CTX, SHA256_Init, SHA256_Update, SHA256_Final, SHA256_DIGEST_LENGTH>;

std::string Identity(std::string_view secret) { return std::string(secret); }

// The pad states per secret, made with its key once.
template <typename Pads>
class KeyedPads {
 public:
  using KeyFn = std::string (*)(std::string_view secret);

  // `key_of` maps a secret to the HMAC key (identity, or StandardWebhookKey).
  explicit KeyedPads(KeyFn key_of) : key_of_(key_of) {}

  const Pads& For(std::string_view secret) {
    auto it = by_secret_.find(common::ToAbsl(secret));
    if (it != by_secret_.end()) return *it->second;
    if (by_secret_.size() >= Signer::kMaxKeys) by_secret_.clear();
    std::string key = key_of_(secret);
    auto pads = std::make_unique<const Pads>(key);
    OPENSSL_cleanse(key.data(), key.size());
    return *by_secret_.emplace(std::string(secret), std::move(pads)).first->second;
  }

 private:
  const KeyFn key_of_;
  absl::flat_hash_map<std::string, std::unique_ptr<const Pads>> by_secret_;
};

}  // namespace

class Signer::Sha1Keys : public KeyedPads<Sha1Pads> {
 public:
  Sha1Keys() : KeyedPads(&Identity) {}
};

class Signer::Sha256Keys : public KeyedPads<Sha256Pads> {
 public:
  Sha256Keys() : KeyedPads(&StandardWebhookKey) {}
};

Signer::Signer()
    : sha1_(std::make_unique<Sha1Keys>()), sha256_(std::make_unique<Sha256Keys>()) {}

Signer::~Signer() = default;

std::string Signer::XSignature(std::string_view secret, std::string_view body) {
  Sha1Pads::Message message(sha1_->For(secret));
  message.Add(body);
  unsigned char md[Sha1Pads::kSize];
  message.Finish(md);
  return LowerHex(md, Sha1Pads::kSize);
}

StandardWebhookHeaderValues Signer::StandardWebhookHeaders(std::string_view secret,
                                                           std::string_view msg_id,
                                                           int64_t unix_seconds,
                                                           std::string_view body) {
  StandardWebhookHeaderValues out;
  out.id = std::string(msg_id);
  out.timestamp = absl::StrCat(unix_seconds);
  Sha256Pads::Message message(sha256_->For(secret));
  // The signed content is msg_id "." timestamp "." body, fed in pieces rather than copied.
  message.Add(msg_id);
  message.Add(".");
  message.Add(out.timestamp);
  message.Add(".");
  message.Add(body);
  unsigned char md[Sha256Pads::kSize];
  message.Finish(md);
  out.signature = StandardWebhookSignature(md, Sha256Pads::kSize);
  return out;
}

}  // namespace hookrelay::deliverer
