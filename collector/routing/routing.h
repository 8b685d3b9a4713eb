// An immutable, indexed view of the configuration for the ingest path: write key → source, and
// source → its enabled webhook destinations with their compiled filters. A new Routing is built
// on every (re)load and swapped in whole, so a request sees one consistent configuration; filters
// are compiled here, once per configuration, never per event.
#ifndef HOOKRELAY_COLLECTOR_ROUTING_ROUTING_H_
#define HOOKRELAY_COLLECTOR_ROUTING_ROUTING_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "collector/audiences/audience_eval.h"
#include "collector/routing/destination_filter.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::collector {

struct SourceRoute {
  const hookrelay::v1::Source* source = nullptr;
  // Enabled destinations attached to this source, in config order.
  std::vector<const hookrelay::v1::Destination*> destinations;
  // Parallel to `destinations`: the destination's filter, nullptr when it lets every event
  // through.
  std::vector<const CompiledFilter*> filters;
  // Whether any of `filters` is set (the ingest path skips filtering otherwise).
  bool filtered = false;
  // `filters` evaluated together (set when `filtered`): one verdict per destination.
  std::shared_ptr<const FilterSet> filter_set;
};

class Routing {
 public:
  // `config` must already be valid (common::ValidateConfig).
  explicit Routing(hookrelay::v1::Config config);

  Routing(const Routing&) = delete;
  Routing& operator=(const Routing&) = delete;

  // nullptr when no source has this write key.
  const SourceRoute* FindByWriteKey(std::string_view write_key) const;
  // nullptr when unknown.
  const hookrelay::v1::Destination* FindDestination(std::string_view id) const;
  // The destination's compiled filter; nullptr when unknown or when it has none.
  const CompiledFilter* FindFilter(std::string_view id) const;
  const hookrelay::v1::Config& config() const { return config_; }
  // What ingest records in profiles for the configured audiences.
  const AudienceInputs& audience_inputs() const { return audience_inputs_; }

 private:
  const hookrelay::v1::Config config_;
  absl::flat_hash_map<std::string, SourceRoute> by_write_key_;
  absl::flat_hash_map<std::string, const hookrelay::v1::Destination*> destinations_;
  // The filters' condition paths, numbered across destinations (see FilterInput).
  FilterPathTable filter_paths_;
  absl::flat_hash_map<std::string, std::unique_ptr<const CompiledFilter>> filters_;
  const AudienceInputs audience_inputs_;
};

// Holds the current Routing. Thread-safe; readers keep the snapshot they got alive.
class RoutingHolder {
 public:
  explicit RoutingHolder(std::shared_ptr<const Routing> initial) : current_(std::move(initial)) {}

  std::shared_ptr<const Routing> Get() const {
    absl::ReaderMutexLock lock(&mu_);
    return current_;
  }
  void Set(std::shared_ptr<const Routing> routing) {
    absl::MutexLock lock(&mu_);
    current_ = std::move(routing);
  }

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const Routing> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_ROUTING_ROUTING_H_
