#include "common/secret_file.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

std::string Write(const std::string& name, const std::string& contents) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

// The trailing newline of a mounted secret is dropped; inner spaces are kept.
TEST(ReadSecretFileTest, TrimsTrailingWhitespace) {
  EXPECT_EQ(*ReadSecretFile(Write("a", "s3cr3t\n")), "s3cr3t");
  EXPECT_EQ(*ReadSecretFile(Write("b", "two words \r\n\n")), "two words");
}

// Missing, empty, oversized and multi-line files are refused naming the path, never the content.
TEST(ReadSecretFileTest, RefusesBadFilesWithoutShowingThem) {
  EXPECT_EQ(ReadSecretFile("/nonexistent/token").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadSecretFile(Write("empty", " \n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSecretFile(Write("big", std::string(kMaxSecretFileBytes + 1, 'x'))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ReadSecretFile(Write("max", std::string(kMaxSecretFileBytes, 'x'))).ok());
  const absl::Status s = ReadSecretFile(Write("lines", "line-one-secret\nline-two\n")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "/lines"));
  EXPECT_FALSE(absl::StrContains(s.message(), "line-one-secret"));
}

}  // namespace
}  // namespace hookrelay::common
