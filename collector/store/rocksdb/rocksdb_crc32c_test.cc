#include "collector/store/rocksdb/rocksdb_crc32c.h"

#include <dlfcn.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace rocksdb::crc32c {
uint32_t Extend(uint32_t init_crc, const char* data, size_t n);
}  // namespace rocksdb::crc32c

namespace hookrelay::collector {
namespace {

constexpr char kExtendSymbol[] = "_ZN7rocksdb6crc32c6ExtendEjPKcm";

uint32_t Value(const std::string& s) { return Crc32cExtend(0, s.data(), s.size()); }

// RFC 3720 (iSCSI) appendix B.4 and the usual check value.
TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Value("123456789"), 0xE3069283u);
  EXPECT_EQ(Value(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Value(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Value(ascending), 0x46DD794Eu);
  EXPECT_EQ(Value(""), 0u);
  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
}

// Every length, alignment and split point: the fast path equals the table loop, and extending
// in two steps equals one step.
TEST(Crc32cTest, MatchesTheTableLoopAtEveryAlignment) {
  std::mt19937 rng(42);
  std::string buffer(1100, '\0');
  for (char& c : buffer) c = static_cast<char>(rng());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t size = 0; size <= 1000; size += (size < 64 ? 1 : 37)) {
      const char* p = buffer.data() + offset;
      const uint32_t whole = Crc32cExtend(0, p, size);
      ASSERT_EQ(whole, Crc32cExtendPortable(0, p, size)) << offset << " " << size;
      const size_t split = size / 3;
      ASSERT_EQ(Crc32cExtend(Crc32cExtend(0, p, split), p + split, size - split), whole)
          << offset << " " << size;
    }
  }
}

// librocksdb's own Extend (looked up in the library itself) and ours agree, so WAL files written
// by either are read by the other; and the process-wide lookup, which is how librocksdb's calls
// are bound, finds ours.
TEST(Crc32cTest, TakesTheLibrarysPlaceAndAgreesWithIt) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "nothing is interposed on this architecture";
#endif
  void* combine = dlsym(RTLD_DEFAULT, "_ZN7rocksdb6crc32c13Crc32cCombineEjjm");
  ASSERT_NE(combine, nullptr) << "librocksdb not loaded";
  Dl_info info{};
  ASSERT_NE(dladdr(combine, &info), 0);
  void* library = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr) << info.dli_fname;
  using ExtendFn = uint32_t (*)(uint32_t, const char*, size_t);
  auto theirs = reinterpret_cast<ExtendFn>(dlsym(library, kExtendSymbol));
  ASSERT_NE(theirs, nullptr);
  auto bound = reinterpret_cast<ExtendFn>(dlsym(RTLD_DEFAULT, kExtendSymbol));
  EXPECT_EQ(bound, &rocksdb::crc32c::Extend) << "the override is not exported";
  EXPECT_NE(bound, theirs);

  std::mt19937 rng(7);
  for (size_t size : {0, 1, 7, 8, 9, 63, 64, 65, 4095, 4096, 70000}) {
    std::string data(size, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    const uint32_t seed = static_cast<uint32_t>(rng());
    EXPECT_EQ(rocksdb::crc32c::Extend(seed, data.data(), data.size()),
              theirs(seed, data.data(), data.size()))
        << size;
  }
  dlclose(library);
}

// A database written through the override and reopened: every record of the WAL passes its
// checksum (a mismatch would end the replay early and lose the keys after it).
TEST(Crc32cTest, WalReplaysAfterReopen) {
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) / absl::StrCat("crc32c_wal_", getpid());
  std::filesystem::remove_all(dir);
  rocksdb::Options options;
  options.create_if_missing = true;
  options.avoid_flush_during_shutdown = true;  // the records stay in the WAL only
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kAbsoluteConsistency;
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir.string(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    for (int i = 0; i < 2000; ++i) {
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), absl::StrCat("key", i),
                          std::string(static_cast<size_t>(i % 700), static_cast<char>('a' + i % 26)))
                      .ok());
    }
  }
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, dir.string(), &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  for (int i = 0; i < 2000; ++i) {
    std::string value;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), absl::StrCat("key", i), &value).ok()) << i;
    EXPECT_EQ(value.size(), static_cast<size_t>(i % 700));
  }
  db.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hookrelay::collector
