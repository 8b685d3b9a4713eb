// Shared by the YAML mapping (config.cc) and the validation (config_validate.cc): the list of
// "path: problem" messages that becomes one InvalidArgument, and how user strings are shown.
// Internal to common/.
#ifndef HOOKRELAY_COMMON_CONFIG_ERRORS_H_
#define HOOKRELAY_COMMON_CONFIG_ERRORS_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace hookrelay::v1 {
class Config;
}  // namespace hookrelay::v1

namespace hookrelay::common::internal {

// A config with hundreds of mistakes is better answered with the first hundred.
constexpr size_t kMaxReportedErrors = 100;
constexpr size_t kMaxDisplayLength = 100;

// Collects "path: problem" messages; the whole list becomes one InvalidArgument.
class ErrorList {
 public:
  void Add(std::string message) { errors_.push_back(std::move(message)); }
  bool empty() const { return errors_.empty(); }

  absl::Status ToStatus(absl::string_view prefix = "") const {
    if (errors_.empty()) return absl::OkStatus();
    std::string text(prefix);
    if (errors_.size() <= kMaxReportedErrors) {
      absl::StrAppend(&text, absl::StrJoin(errors_, "; "));
    } else {
      absl::StrAppend(&text,
                      absl::StrJoin(errors_.begin(), errors_.begin() + kMaxReportedErrors, "; "),
                      "; ... and ", errors_.size() - kMaxReportedErrors, " more errors");
    }
    return absl::InvalidArgumentError(text);
  }

 private:
  std::vector<std::string> errors_;
};

// A user-supplied, non-secret string (id, key, type) for a message: quoted, escaped, shortened.
inline std::string Quote(absl::string_view s) {
  if (s.size() > kMaxDisplayLength) {
    return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMaxDisplayLength)), "...\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

inline std::string Index(absl::string_view path, int i) { return absl::StrCat(path, "[", i, "]"); }


// Empty when `id` is acceptable: 1..kMaxIdLength of [A-Za-z0-9._-] (ids end up in metric
// labels, log fields and store keys). Otherwise the rest of a message that follows "path.id".
std::string IdProblem(absl::string_view id);

// The `audiences` of a config (config_validate_audiences.cc).
void ValidateAudiences(const hookrelay::v1::Config& config, ErrorList& errors);

}  // namespace hookrelay::common::internal

#endif  // HOOKRELAY_COMMON_CONFIG_ERRORS_H_
