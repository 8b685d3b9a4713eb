#include "collector/store/jetstream/nkey.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstdint>
#include <memory>


namespace hookrelay::collector {
namespace {

constexpr uint8_t kSeedPrefix = 18 << 3;  // 'S' once base32-encoded.
constexpr char kBase32[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
constexpr size_t kKeyBytes = 32;

// The prefix byte of each public key type ('O' = 14 << 3, ...): the letter's base32 value << 3.
uint8_t PrefixByte(NKeyType type) {
  switch (type) {
    case NKeyType::kOperator: return 14 << 3;
    case NKeyType::kAccount: return 0;
    case NKeyType::kUser: return 20 << 3;
    case NKeyType::kServer: return 13 << 3;
  }
  return 0;
}

// CRC-16/XMODEM (polynomial 0x1021, initial 0), as NATS appends it (little-endian).
uint16_t Crc16(std::string_view data) {
  uint16_t crc = 0;
  for (const char c : data) {
    crc ^= static_cast<uint16_t>(static_cast<uint8_t>(c)) << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

std::string Base32Encode(std::string_view data) {
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (const char c : data) {
    buffer = (buffer << 8) | static_cast<uint8_t>(c);
    bits += 8;
    while (bits >= 5) {
      out.push_back(kBase32[(buffer >> (bits - 5)) & 31]);
      bits -= 5;
    }
  }
  if (bits > 0) out.push_back(kBase32[(buffer << (5 - bits)) & 31]);
  return out;
}

bool Base32Decode(std::string_view text, std::string& out) {
  uint32_t buffer = 0;
  int bits = 0;
  for (const char c : text) {
    int value;
    if (c >= 'A' && c <= 'Z') {
      value = c - 'A';
    } else if (c >= '2' && c <= '7') {
      value = c - '2' + 26;
    } else {
      return false;
    }
    buffer = (buffer << 5) | static_cast<uint32_t>(value);
    bits += 5;
    if (bits >= 8) {
      out.push_back(static_cast<char>((buffer >> (bits - 8)) & 0xff));
      bits -= 8;
    }
  }
  return true;
}

std::string WithCrc(std::string raw) {
  const uint16_t crc = Crc16(raw);
  raw.push_back(static_cast<char>(crc & 0xff));
  raw.push_back(static_cast<char>(crc >> 8));
  return raw;
}

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

absl::StatusOr<Pkey> PrivateKey(std::string_view raw_seed) {
  Pkey key(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr,
                                        reinterpret_cast<const uint8_t*>(raw_seed.data()),
                                        raw_seed.size()));
  if (key == nullptr) return absl::InternalError("NKey: cannot load an Ed25519 key");
  return key;
}

absl::StatusOr<NKeyPair> PairFromRaw(NKeyType type, std::string_view raw_seed) {
  absl::StatusOr<Pkey> key = PrivateKey(raw_seed);
  if (!key.ok()) return key.status();
  std::string public_raw(kKeyBytes, '\0');
  size_t length = public_raw.size();
  if (EVP_PKEY_get_raw_public_key(key->get(), reinterpret_cast<uint8_t*>(public_raw.data()),
                                  &length) != 1 ||
      length != kKeyBytes) {
    return absl::InternalError("NKey: cannot derive the public key");
  }
  const uint8_t prefix = PrefixByte(type);
  std::string seed_raw;
  seed_raw.push_back(static_cast<char>(kSeedPrefix | (prefix >> 5)));
  seed_raw.push_back(static_cast<char>((prefix & 31) << 3));
  seed_raw.append(raw_seed);
  NKeyPair pair;
  pair.type = type;
  std::string seed_with_crc = WithCrc(seed_raw);
  pair.seed = Base32Encode(seed_with_crc);
  OPENSSL_cleanse(seed_raw.data(), seed_raw.size());
  OPENSSL_cleanse(seed_with_crc.data(), seed_with_crc.size());
  pair.public_key = Base32Encode(WithCrc(std::string(1, static_cast<char>(prefix)) + public_raw));
  return pair;
}

// The 32 raw bytes of a seed, and its type.
absl::Status DecodeSeed(std::string_view seed, NKeyType& type, std::string& raw) {
  const absl::Status invalid = absl::InvalidArgumentError(
      "not an NKey seed (expected one line of base32 starting with S, e.g. SU... for a user)");
  std::string decoded;
  if (!Base32Decode(seed, decoded) || decoded.size() != 2 + kKeyBytes + 2) {
    OPENSSL_cleanse(decoded.data(), decoded.size());
    return invalid;
  }
  const std::string_view body(decoded.data(), decoded.size() - 2);
  const uint16_t crc = static_cast<uint16_t>(static_cast<uint8_t>(decoded[decoded.size() - 2]) |
                                             (static_cast<uint8_t>(decoded.back()) << 8));
  const uint8_t b1 = static_cast<uint8_t>(decoded[0]);
  const uint8_t b2 = static_cast<uint8_t>(decoded[1]);
  const uint8_t prefix = static_cast<uint8_t>(((b1 & 7) << 5) | ((b2 & 248) >> 3));
  bool known = false;
  for (const NKeyType t :
       {NKeyType::kOperator, NKeyType::kAccount, NKeyType::kUser, NKeyType::kServer}) {
    if (PrefixByte(t) == prefix) {
      type = t;
      known = true;
    }
  }
  if (Crc16(body) != crc || (b1 & 248) != kSeedPrefix || !known) {
    OPENSSL_cleanse(decoded.data(), decoded.size());
    return invalid;
  }
  raw.assign(decoded.data() + 2, kKeyBytes);
  OPENSSL_cleanse(decoded.data(), decoded.size());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NKeyPair> NKeyFromSeed(std::string_view seed) {
  NKeyType type;
  std::string raw;
  if (absl::Status s = DecodeSeed(seed, type, raw); !s.ok()) return s;
  absl::StatusOr<NKeyPair> pair = PairFromRaw(type, raw);
  OPENSSL_cleanse(raw.data(), raw.size());
  return pair;
}

absl::StatusOr<NKeyPair> NewNKey(NKeyType type) {
  std::string raw(kKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<uint8_t*>(raw.data()), static_cast<int>(raw.size())) != 1) {
    return absl::InternalError("NKey: no random bytes");
  }
  absl::StatusOr<NKeyPair> pair = PairFromRaw(type, raw);
  OPENSSL_cleanse(raw.data(), raw.size());
  return pair;
}

absl::StatusOr<std::string> NKeySign(std::string_view seed, std::string_view data) {
  NKeyType type;
  std::string raw;
  if (absl::Status s = DecodeSeed(seed, type, raw); !s.ok()) return s;
  absl::StatusOr<Pkey> key = PrivateKey(raw);
  OPENSSL_cleanse(raw.data(), raw.size());
  if (!key.ok()) return key.status();
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  std::string signature(64, '\0');
  size_t length = signature.size();
  if (ctx == nullptr ||
      EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key->get()) != 1 ||
      EVP_DigestSign(ctx.get(), reinterpret_cast<uint8_t*>(signature.data()), &length,
                     reinterpret_cast<const uint8_t*>(data.data()), data.size()) != 1) {
    return absl::InternalError("NKey: signing failed");
  }
  signature.resize(length);
  return signature;
}

}  // namespace hookrelay::collector
