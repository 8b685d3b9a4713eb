// Random (version 4) UUIDs for generated messageIds.
#ifndef HOOKRELAY_COMMON_UUID_H_
#define HOOKRELAY_COMMON_UUID_H_

#include <string>

namespace hookrelay::common {

// Returns a lowercase RFC 4122 version 4 UUID, e.g. "1b4e28ba-2fa1-4d3b-a3f5-ef19a1a0c7e2".
// Thread-safe; each thread draws from its own generator seeded from the OS entropy source.
std::string NewUuidV4();

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_UUID_H_
