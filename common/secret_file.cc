#include "common/secret_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace hookrelay::common {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message = absl::StrCat("secret file ", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::FailedPreconditionError(message);
  }
  std::string contents;
  contents.resize(kMaxSecretFileBytes + 1);
  in.read(contents.data(), static_cast<std::streamsize>(contents.size()));
  contents.resize(static_cast<size_t>(in.gcount()));
  if (contents.size() > kMaxSecretFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("secret file ", path, ": over ", kMaxSecretFileBytes, " bytes"));
  }
  while (!contents.empty() && absl::ascii_isspace(static_cast<unsigned char>(contents.back()))) {
    contents.pop_back();
  }
  if (contents.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("secret file ", path, ": empty"));
  }
  for (const char c : contents) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("secret file ", path, ": holds control characters (a line break inside?)"));
    }
  }
  return contents;
}

}  // namespace hookrelay::common
