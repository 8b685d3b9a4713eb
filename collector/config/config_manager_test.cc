#include "collector/config/config_manager.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collector/api/admin_errors.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Config;

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                      ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-", name);
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

hookrelay::v1::Source Source(const std::string& id, const std::string& key) {
  hookrelay::v1::Source s;
  s.set_id(id);
  s.set_name(id);
  s.set_kind(hookrelay::v1::WEB);
  s.add_write_keys(key);
  return s;
}

class ConfigManagerTest : public ::testing::Test {
 protected:
  void Open() {
    RocksDbJobStore::Options options;
    options.path = TempPath("store");
    options.clock = &clock_;
    auto store = RocksDbJobStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  std::unique_ptr<ConfigManager> Manager(const std::string& file) {
    return std::make_unique<ConfigManager>(
        *store_, file, [this](const std::shared_ptr<const ConfigManager::Snapshot>& s) {
          published_.push_back(s);
        });
  }

  common::ManualClock clock_;
  std::unique_ptr<RocksDbJobStore> store_;
  std::vector<std::shared_ptr<const ConfigManager::Snapshot>> published_;
};

TEST_F(ConfigManagerTest, ChangesAreStoredAndPublished) {
  Open();
  auto manager = Manager("");
  ASSERT_TRUE(manager->Start().ok());
  ASSERT_EQ(published_.size(), 1u);
  EXPECT_EQ(published_.back()->merged.sources_size(), 0);

  auto r = manager->Apply({"t", "source.create", "source a", {}},
                          {ConfigManager::Focus::Kind::kSource, "a"}, [](Config& api) {
                            *api.add_sources() = Source("a", "wk_a");
                            return absl::OkStatus();
                          });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->version, 1u);
  ASSERT_EQ(published_.size(), 2u);
  EXPECT_EQ(published_.back()->merged.sources(0).id(), "a");

  // A restart finds it.
  manager.reset();
  store_.reset();
  Open();
  manager = Manager("");
  ASSERT_TRUE(manager->Start().ok());
  EXPECT_EQ(manager->Get()->version, 1u);
  ASSERT_NE(manager->Get()->FindSource("a"), nullptr);
  EXPECT_EQ(manager->Get()->SourceManagedBy("a"), "api");
}

// A change that breaks a rule is refused with the violation relative to the object, in JSON
// names; nothing is stored or published.
TEST_F(ConfigManagerTest, InvalidChangeIsRefusedWhole) {
  Open();
  auto manager = Manager("");
  ASSERT_TRUE(manager->Start().ok());
  ASSERT_TRUE(manager
                  ->Apply({"t", "x", "y", {}}, {ConfigManager::Focus::Kind::kSource, "a"},
                          [](Config& api) {
                            *api.add_sources() = Source("a", "wk_a");
                            return absl::OkStatus();
                          })
                  .ok());
  const size_t published = published_.size();
  auto r = manager->Apply({"t", "x", "y", {}}, {ConfigManager::Focus::Kind::kSource, "b"},
                          [](Config& api) {
                            *api.add_sources() = Source("b", "wk_a");  // a duplicate key
                            return absl::OkStatus();
                          });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<FieldViolation> v = Violations(r.status());
  ASSERT_EQ(v.size(), 1u) << r.status();
  EXPECT_EQ(v[0].field, "writeKeys[0]");
  EXPECT_NE(v[0].description.find("duplicate write key"), std::string::npos);
  EXPECT_EQ(published_.size(), published);
  EXPECT_EQ(manager->Get()->merged.sources_size(), 1);
  EXPECT_EQ(manager->Get()->version, 1u);
}

// A destination's timeout must fit inside the job lease with a quarter of it to spare: through
// the API the change is refused on timeoutMs naming both values; a file that does not fit stops
// the start.
TEST_F(ConfigManagerTest, TimeoutMustFitInsideTheLease) {
  Open();
  auto manager = std::make_unique<ConfigManager>(
      *store_, "", [](const std::shared_ptr<const ConfigManager::Snapshot>&) {},
      absl::Seconds(8));
  ASSERT_TRUE(manager->Start().ok());
  auto add = [&](uint32_t timeout_ms, uint32_t batch_wait_ms = 0) {
    return manager->Apply({"t", "x", "y", {}}, {ConfigManager::Focus::Kind::kDestination, "d"},
                          [&](Config& api) {
                            api.clear_sources();
                            api.clear_destinations();
                            *api.add_sources() = Source("a", "wk_a");
                            hookrelay::v1::Destination* d = api.add_destinations();
                            d->set_id("d");
                            d->set_type("webhooks");
                            d->add_sources("a");
                            d->add_urls()->set_url("https://example.com/hook");
                            if (timeout_ms > 0) d->mutable_options()->set_timeout_ms(timeout_ms);
                            if (batch_wait_ms > 0) {
                              d->mutable_options()->mutable_batch()->set_max_wait_ms(batch_wait_ms);
                            }
                            return absl::OkStatus();
                          });
  };
  // 8 s lease: 2 s to spare, so at most 6000 ms; the default 5000 fits.
  EXPECT_TRUE(add(0).ok());
  EXPECT_TRUE(add(6000).ok());
  auto refused = add(6001);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<FieldViolation> v = Violations(refused.status());
  ASSERT_EQ(v.size(), 1u) << refused.status();
  EXPECT_EQ(v[0].field, "options.timeoutMs");
  for (const char* part : {"6001 ms", "8s", "--lease_duration", "at most 6000 ms"}) {
    EXPECT_NE(v[0].description.find(part), std::string::npos) << v[0].description;
  }
  EXPECT_EQ(LeaseMargin(absl::Seconds(2)), absl::Seconds(1));
  // A batched job also waits for its batch under the same lease: wait + timeout must fit.
  EXPECT_TRUE(add(5000, 1000).ok());
  refused = add(5000, 1001);
  ASSERT_FALSE(refused.ok());
  v = Violations(refused.status());
  ASSERT_EQ(v.size(), 1u) << refused.status();
  EXPECT_EQ(v[0].field, "options.batch.maxWaitMs");
  for (const char* part : {"1001 ms plus the timeout of 5000 ms", "8s", "at most 1000 ms"}) {
    EXPECT_NE(v[0].description.find(part), std::string::npos) << v[0].description;
  }

  const std::string file = TempPath("config.yaml");
  Write(file, R"(sources:
  - {id: f, name: F, kind: web, write_keys: [wk_f]}
destinations:
  - {id: g, type: webhooks, sources: [f], enabled: true, urls: [{url: "https://example.com/g"}]}
)");
  auto short_lease = std::make_unique<ConfigManager>(
      *store_, file, [](const std::shared_ptr<const ConfigManager::Snapshot>&) {},
      absl::Seconds(4));
  absl::Status start = short_lease->Start();
  EXPECT_EQ(start.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(start.message().find("timeout_ms: 5000 ms does not fit inside the job lease of 4s"),
            std::string::npos)
      << start;
}

// Per-user order on an engine without it (both engines keep it; the check stays for any
// other): refused through the API on the field, and
// a file asking for it stops the start; a wrong value is the validator's error on both engines.
TEST_F(ConfigManagerTest, OrderingIsRefusedWhereTheEngineCannotKeepIt) {
  Open();
  auto manager = std::make_unique<ConfigManager>(
      *store_, "", [](const std::shared_ptr<const ConfigManager::Snapshot>&) {},
      absl::InfiniteDuration(), /*per_key_order=*/false);
  ASSERT_TRUE(manager->Start().ok());
  auto add = [&](const std::string& ordering) {
    return manager->Apply({"t", "x", "y", {}}, {ConfigManager::Focus::Kind::kDestination, "d"},
                          [&](Config& api) {
                            api.clear_sources();
                            api.clear_destinations();
                            *api.add_sources() = Source("a", "wk_a");
                            hookrelay::v1::Destination* d = api.add_destinations();
                            d->set_id("d");
                            d->set_type("webhooks");
                            d->add_sources("a");
                            d->add_urls()->set_url("https://example.com/hook");
                            d->mutable_options()->set_ordering(ordering);
                            return absl::OkStatus();
                          });
  };
  EXPECT_TRUE(add("").ok());
  auto refused = add("per_user");
  ASSERT_FALSE(refused.ok());
  std::vector<FieldViolation> v = Violations(refused.status());
  ASSERT_EQ(v.size(), 1u) << refused.status();
  EXPECT_EQ(v[0].field, "options.ordering");
  EXPECT_NE(v[0].description.find("not available with this collector's job store"),
            std::string::npos)
      << v[0].description;
  refused = add("per_tenant");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                R"(options.ordering: "per_tenant", must be "per_user" (omit it for no order))"),
            std::string::npos)
      << refused.status();

  const std::string file = TempPath("ordered.yaml");
  Write(file, R"(sources:
  - {id: f, name: F, kind: web, write_keys: [wk_f]}
destinations:
  - id: g
    type: webhooks
    sources: [f]
    enabled: true
    urls: [{url: "https://example.com/g"}]
    options: {ordering: per_user}
)");
  auto unordered_engine = std::make_unique<ConfigManager>(
      *store_, file, [](const std::shared_ptr<const ConfigManager::Snapshot>&) {},
      absl::InfiniteDuration(), /*per_key_order=*/false);
  EXPECT_NE(unordered_engine->Start().message().find("destinations[0].options.ordering"),
            std::string::npos);
  auto ordered_engine = std::make_unique<ConfigManager>(
      *store_, file, [](const std::shared_ptr<const ConfigManager::Snapshot>&) {});
  ASSERT_TRUE(ordered_engine->Start().ok());
  EXPECT_EQ(ordered_engine->Get()->merged.destinations(0).options().ordering(), "per_user");
}

// File objects win over API objects of the same id; a bad file on reload keeps the running one.
TEST_F(ConfigManagerTest, FileObjectsWinAndBadReloadsAreRefused) {
  Open();
  const std::string file = TempPath("config.yaml");
  Write(file, "sources:\n  - {id: a, name: File, kind: server, write_keys: [wk_file]}\n");
  {
    auto manager = Manager("");
    ASSERT_TRUE(manager->Start().ok());
    ASSERT_TRUE(manager
                    ->Apply({"t", "x", "y", {}}, {ConfigManager::Focus::Kind::kSource, "a"},
                            [](Config& api) {
                              *api.add_sources() = Source("a", "wk_api");
                              *api.add_sources() = Source("b", "wk_b");
                              return absl::OkStatus();
                            })
                    .ok());
  }
  auto manager = Manager(file);
  ASSERT_TRUE(manager->Start().ok());
  auto snapshot = manager->Get();
  ASSERT_EQ(snapshot->merged.sources_size(), 2);
  EXPECT_EQ(snapshot->FindSource("a")->write_keys(0), "wk_file");
  EXPECT_EQ(snapshot->SourceManagedBy("a"), absl::StrCat("file:", file));
  EXPECT_EQ(snapshot->SourceManagedBy("b"), "api");

  Write(file, "sources: [oops\n");
  EXPECT_FALSE(manager->ReloadFile().ok());
  EXPECT_EQ(manager->Get()->FindSource("a")->write_keys(0), "wk_file");
  Write(file, "sources:\n  - {id: a, name: File, kind: server, write_keys: [wk_file2]}\n");
  ASSERT_TRUE(manager->ReloadFile().ok());
  EXPECT_EQ(manager->Get()->FindSource("a")->write_keys(0), "wk_file2");
}

TEST(ValidationErrorsTest, PathsBecomeJsonFieldNames) {
  auto parsed = ParseValidationErrors(
      "destinations[2].urls: 6 entries, at most 5 allowed; "
      "destinations[2].urls[0].headers[\"Content-Type\"]: reserved header; "
      "destinations[2].type \"x\": unknown");
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0].first, "destinations[2].urls");
  EXPECT_EQ(parsed[0].second, "6 entries, at most 5 allowed");
  EXPECT_EQ(parsed[1].first, "destinations[2].urls[0].headers[\"Content-Type\"]");
  EXPECT_EQ(parsed[2].first, "destinations[2].type");
  EXPECT_EQ(parsed[2].second, "\"x\": unknown");
  EXPECT_EQ(JsonFieldPath("shared_secret"), "sharedSecret");
  EXPECT_EQ(JsonFieldPath("options.timeout_ms"), "options.timeoutMs");
  EXPECT_EQ(JsonFieldPath("urls[0].headers[\"X_Y\"]"), "urls[0].headers[\"X_Y\"]");
}

}  // namespace
}  // namespace hookrelay::collector
