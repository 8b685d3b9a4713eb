#include "deliverer/sender_sizing.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace hookrelay::deliverer {
namespace {

absl::Status CheckRange(const char* flag, int32_t value, int32_t max) {
  if (value < 0 || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be between 0 (derived) and ", max, ", got ", value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Sizing> DeriveSizing(const SizingFlags& flags, unsigned hardware_threads) {
  if (absl::Status s = CheckRange("sender_threads", flags.sender_threads, kMaxSenderThreads);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckRange("max_host_connections", flags.max_host_connections, kMaxHostConnections);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange("credits", flags.credits, kMaxCredits); !s.ok()) return s;

  Sizing sizing;
  sizing.sender_threads =
      flags.sender_threads > 0
          ? flags.sender_threads
          : static_cast<int>(std::clamp<unsigned>(hardware_threads / 2, 1, kMaxSenderThreads));
  sizing.max_host_connections =
      flags.max_host_connections > 0 ? flags.max_host_connections : kDefaultConnectionsPerThread;
  if (flags.credits > 0) {
    sizing.credits = static_cast<uint32_t>(flags.credits);
  } else {
    const int64_t derived =
        int64_t{8} * sizing.sender_threads * int64_t{sizing.max_host_connections};
    sizing.credits = static_cast<uint32_t>(std::min<int64_t>(derived, kMaxCredits));
  }
  return sizing;
}

}  // namespace hookrelay::deliverer
