// NATS NKeys (Ed25519 keys in NATS's text form: a prefix letter, base32 without padding, a
// CRC-16 at the end): what --nats_nkey_seed_file needs (the public key of a user seed, which
// the client sends beside the signed nonce), and what tests need to mint keys and sign JWTs.
// Thread-safe: no state. Errors never contain a seed.
#ifndef HOOKRELAY_COLLECTOR_STORE_JETSTREAM_NKEY_H_
#define HOOKRELAY_COLLECTOR_STORE_JETSTREAM_NKEY_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace hookrelay::collector {

// The kinds of key, by the letter their public key starts with.
enum class NKeyType : char {
  kOperator = 'O',
  kAccount = 'A',
  kUser = 'U',
  kServer = 'N',
};

struct NKeyPair {
  NKeyType type = NKeyType::kUser;
  std::string seed;        // "S" + type letter + ... : the secret
  std::string public_key;  // type letter + ...
};

// Decodes a seed ("SU...", "SA...", "SO..."): INVALID_ARGUMENT when it is not one (bad
// characters, checksum, prefix, length).
absl::StatusOr<NKeyPair> NKeyFromSeed(std::string_view seed);

// A fresh key pair of `type` from the system's random source.
absl::StatusOr<NKeyPair> NewNKey(NKeyType type);

// The Ed25519 signature of `data` by the seed's key (64 raw bytes).
absl::StatusOr<std::string> NKeySign(std::string_view seed, std::string_view data);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_JETSTREAM_NKEY_H_
