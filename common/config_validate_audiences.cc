// Validation of a config's audiences (SPEC §6), and the names and windows audience rules use.
#include "common/config_validate.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "common/config_errors.h"
#include "common/redact.h"
#include "common/status_macros.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::common {
namespace {

using ::hookrelay::v1::Config;
using ::hookrelay::v1::Source;

using internal::ErrorList;
using internal::IdProblem;
using internal::Index;
using internal::Quote;

constexpr const char* kTraitOps[] = {"eq", "neq", "gt", "gte", "lt", "lte", "exists", "contains"};

bool IsNumericOp(absl::string_view op) {
  return op == "gt" || op == "gte" || op == "lt" || op == "lte";
}

void ValidateCondition(const hookrelay::v1::AudienceCondition& c, const std::string& path,
                       ErrorList& errors) {
  const bool is_trait = !c.trait().empty() || !c.op().empty() || c.has_value();
  const bool is_event = !c.event().empty() || c.has_count_gte() || c.has_count_lte() ||
                        !c.within().empty();
  if (is_trait == is_event) {
    errors.Add(absl::StrCat(path, ": give either a trait condition (trait, op, value) or an event "
                                  "condition (event, count_gte/count_lte, within)"));
    return;
  }
  if (is_trait) {
    if (c.trait().empty()) {
      errors.Add(absl::StrCat(path, ".trait: missing"));
    } else if (c.trait().size() > kMaxTraitNameLength) {
      errors.Add(absl::StrCat(path, ".trait: ", c.trait().size(), " characters, at most ",
                              kMaxTraitNameLength));
    }
    const bool known = std::find(std::begin(kTraitOps), std::end(kTraitOps), c.op()) !=
                       std::end(kTraitOps);
    if (!known) {
      errors.Add(absl::StrCat(path, ".op: ",
                              c.op().empty() ? "missing" : absl::StrCat(Quote(c.op()), " is not"),
                              " one of eq, neq, gt, gte, lt, lte, exists, contains"));
      return;
    }
    const auto kind = c.value().kind_case();
    if (c.op() == "exists") {
      if (c.has_value()) errors.Add(absl::StrCat(path, ".value: not used with op exists"));
    } else if (!c.has_value() || kind == google::protobuf::Value::KIND_NOT_SET ||
               kind == google::protobuf::Value::kNullValue) {
      errors.Add(absl::StrCat(path, ".value: missing for op ", c.op()));
    } else if (IsNumericOp(c.op()) && kind != google::protobuf::Value::kNumberValue) {
      errors.Add(absl::StrCat(path, ".value: op ", c.op(), " compares numbers, give a number"));
    } else if (c.op() == "contains" && kind != google::protobuf::Value::kStringValue) {
      errors.Add(absl::StrCat(path, ".value: op contains looks for a string, give a string"));
    } else if (kind == google::protobuf::Value::kStructValue ||
               kind == google::protobuf::Value::kListValue) {
      errors.Add(absl::StrCat(path, ".value: a string, number or boolean"));
    } else if (kind == google::protobuf::Value::kStringValue &&
               c.value().string_value().size() > kMaxTraitValueLength) {
      errors.Add(absl::StrCat(path, ".value: ", c.value().string_value().size(),
                              " characters, at most ", kMaxTraitValueLength));
    }
    return;
  }
  if (c.event().empty()) {
    errors.Add(absl::StrCat(path, ".event: missing"));
  } else if (c.event().size() > kMaxTraitNameLength) {
    errors.Add(absl::StrCat(path, ".event: ", c.event().size(), " characters, at most ",
                            kMaxTraitNameLength));
  }
  if (!c.has_count_gte() && !c.has_count_lte()) {
    errors.Add(absl::StrCat(path, ": an event condition needs count_gte and/or count_lte"));
  } else if (c.has_count_gte() && c.has_count_lte() && c.count_gte() > c.count_lte()) {
    errors.Add(absl::StrCat(path, ".count_lte: ", c.count_lte(), " is below count_gte ",
                            c.count_gte(), " (nobody could match)"));
  }
  if (c.within().empty()) {
    errors.Add(absl::StrCat(path, ".within: missing, a window such as 15m, 1h or 30d"));
  } else if (absl::StatusOr<absl::Duration> w = ParseAudienceWindow(c.within()); !w.ok()) {
    errors.Add(absl::StrCat(path, ".within: ", Quote(c.within()), " ", w.status().message()));
  }
}

}  // namespace

void internal::ValidateAudiences(const Config& config, ErrorList& errors) {
  absl::flat_hash_set<absl::string_view> source_ids;
  for (const Source& source : config.sources()) source_ids.insert(source.id());
  if (config.audiences_size() > kMaxAudiences) {
    errors.Add(absl::StrCat("audiences: ", config.audiences_size(), " entries, at most ",
                            kMaxAudiences, " allowed"));
  }
  absl::flat_hash_map<absl::string_view, int> ids;
  absl::flat_hash_map<std::string, int> traits;
  for (int i = 0; i < config.audiences_size(); ++i) {
    const hookrelay::v1::Audience& a = config.audiences(i);
    const std::string path = Index("audiences", i);
    if (std::string problem = IdProblem(a.id()); !problem.empty()) {
      errors.Add(absl::StrCat(path, ".id", problem));
    } else if (auto [it, inserted] = ids.emplace(a.id(), i); !inserted) {
      errors.Add(absl::StrCat(path, ".id: duplicate audience id ", Quote(a.id()),
                              " (also audiences[", it->second, "])"));
    }
    const std::string trait = AudienceTraitName(a.name());
    if (a.name().empty()) {
      errors.Add(absl::StrCat(path, ".name: missing"));
    } else if (a.name().size() > kMaxAudienceNameLength) {
      errors.Add(absl::StrCat(path, ".name: ", a.name().size(), " characters, at most ",
                              kMaxAudienceNameLength));
    } else if (trait.empty()) {
      errors.Add(absl::StrCat(path, ".name ", Quote(a.name()),
                              ": needs a letter or digit (the trait name is snake_case(name))"));
    } else if (auto [it, inserted] = traits.emplace(trait, i); !inserted) {
      errors.Add(absl::StrCat(path, ".name ", Quote(a.name()), ": same trait name \"", trait,
                              "\" as audiences[", it->second, "]"));
    }
    const std::string sources_path = absl::StrCat(path, ".sources");
    if (a.sources_size() == 0) {
      errors.Add(absl::StrCat(sources_path, ": no sources, at least 1 required"));
    }
    absl::flat_hash_set<absl::string_view> listed;
    for (const std::string& source : a.sources()) {
      if (!source_ids.contains(source)) {
        errors.Add(absl::StrCat(sources_path, ": unknown source ", Quote(source)));
      } else if (!listed.insert(source).second) {
        errors.Add(absl::StrCat(sources_path, ": source ", Quote(source), " listed twice"));
      }
    }
    const std::string rule_path = absl::StrCat(path, ".rule");
    if (a.rule().match() != "all" && a.rule().match() != "any") {
      errors.Add(absl::StrCat(
          rule_path, ".match: ",
          a.rule().match().empty()
              ? std::string("missing; give match \"all\" or \"any\" and a list of conditions")
              : absl::StrCat(Quote(a.rule().match()), " is not \"all\" or \"any\"")));
    }
    if (a.rule().conditions_size() == 0) {
      errors.Add(absl::StrCat(rule_path, ".conditions: no conditions, at least 1"));
    } else if (a.rule().conditions_size() > kMaxAudienceConditions) {
      errors.Add(absl::StrCat(rule_path, ".conditions: ", a.rule().conditions_size(),
                              " conditions, at most ", kMaxAudienceConditions));
    }
    for (int j = 0; j < a.rule().conditions_size(); ++j) {
      ValidateCondition(a.rule().conditions(j),
                        Index(absl::StrCat(rule_path, ".conditions"), j), errors);
    }
    if (a.sync_interval_seconds() != 0 &&
        (a.sync_interval_seconds() < kMinAudienceSyncSeconds ||
         a.sync_interval_seconds() > kMaxAudienceSyncSeconds)) {
      errors.Add(absl::StrCat(path, ".sync_interval: ", a.sync_interval_seconds(),
                              " s, allowed ", kMinAudienceSyncSeconds, " s to ",
                              kMaxAudienceSyncSeconds, " s"));
    }
  }
}

namespace {

// Unicode punctuation, symbols, spaces and emoji: separators in a trait name like ASCII ones.
bool IsUnicodeSeparator(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0xBF) || cp == 0xD7 || cp == 0xF7 ||
         (cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
         (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF0F) ||
         (cp >= 0xFF1A && cp <= 0xFF20) || (cp >= 0xFF3B && cp <= 0xFF40) ||
         (cp >= 0xFF5B && cp <= 0xFF65) || (cp >= 0x1F000 && cp <= 0x1FAFF);
}

// Lower case for the capital letters of Latin-1, Greek and Cyrillic (all two-byte UTF-8).
uint32_t LowerCodePoint(uint32_t cp) {
  if ((cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) || (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) ||
      (cp >= 0x410 && cp <= 0x42F)) {
    return cp + 0x20;
  }
  if (cp >= 0x400 && cp <= 0x40F) return cp + 0x50;
  return cp;
}

}  // namespace

std::string AudienceTraitName(absl::string_view name) {
  std::string out;
  bool pending_sep = false;
  size_t i = 0;
  while (i < name.size()) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    // One character: an ASCII byte or a UTF-8 sequence. Letters and digits of any script are
    // kept (capitals of ASCII, Latin-1, Greek and Cyrillic lower-cased); punctuation, symbols
    // and spaces of any script separate words.
    size_t len = 1;
    uint32_t cp = c;
    if (c >= 0xF0 && i + 3 < name.size()) {
      len = 4;
      cp = ((c & 0x07u) << 18) | ((name[i + 1] & 0x3Fu) << 12) | ((name[i + 2] & 0x3Fu) << 6) |
           (name[i + 3] & 0x3Fu);
    } else if (c >= 0xE0 && i + 2 < name.size()) {
      len = 3;
      cp = ((c & 0x0Fu) << 12) | ((name[i + 1] & 0x3Fu) << 6) | (name[i + 2] & 0x3Fu);
    } else if (c >= 0xC0 && i + 1 < name.size()) {
      len = 2;
      cp = ((c & 0x1Fu) << 6) | (name[i + 1] & 0x3Fu);
    }
    const bool keep = cp < 0x80 ? absl::ascii_isalnum(c) : !IsUnicodeSeparator(cp);
    if (!keep) {
      pending_sep = !out.empty();
      i += len;
      continue;
    }
    if (pending_sep) out.push_back('_');
    pending_sep = false;
    if (len == 1) {
      out.push_back(static_cast<char>(absl::ascii_tolower(c)));
    } else if (len == 2) {
      const uint32_t lower = LowerCodePoint(cp);
      out.push_back(static_cast<char>(0xC0 | (lower >> 6)));
      out.push_back(static_cast<char>(0x80 | (lower & 0x3F)));
    } else {
      out.append(name.data() + i, len);
    }
    i += len;
  }
  return out;
}

absl::StatusOr<absl::Duration> ParseAudienceWindow(absl::string_view text) {
  if (text.size() < 2) return absl::InvalidArgumentError("expected a number and m, h or d");
  const char unit = text.back();
  uint32_t n = 0;
  if (!absl::SimpleAtoi(text.substr(0, text.size() - 1), &n) || n == 0) {
    return absl::InvalidArgumentError("expected a positive number and m, h or d (15m, 1h, 30d)");
  }
  absl::Duration d;
  switch (unit) {
    case 'm':
      d = absl::Minutes(n);
      break;
    case 'h':
      d = absl::Hours(n);
      break;
    case 'd':
      d = absl::Hours(24) * n;
      break;
    default:
      return absl::InvalidArgumentError("expected a unit m (minutes), h (hours) or d (days)");
  }
  if (d > kMaxAudienceWindow) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", absl::ToInt64Hours(kMaxAudienceWindow) / 24, "d"));
  }
  return d;
}

}  // namespace hookrelay::common
