#include "collector/routing/routing.h"

#include <memory>
#include <utility>

#include "common/strings.h"

namespace hookrelay::collector {

Routing::Routing(hookrelay::v1::Config config)
    : config_(std::move(config)), audience_inputs_(config_) {
  absl::flat_hash_map<std::string, std::vector<const hookrelay::v1::Destination*>> by_source;
  for (const auto& dest : config_.destinations()) {
    destinations_[dest.id()] = &dest;
    if (dest.has_filter()) {
      auto filter = std::make_unique<const CompiledFilter>(dest.filter(), &filter_paths_);
      if (!filter->empty()) filters_[dest.id()] = std::move(filter);
    }
    if (!dest.enabled()) continue;  // a disabled destination gets nothing queued
    for (const auto& source_id : dest.sources()) by_source[source_id].push_back(&dest);
  }
  for (const auto& source : config_.sources()) {
    SourceRoute route;
    route.source = &source;
    if (auto it = by_source.find(source.id()); it != by_source.end()) route.destinations = it->second;
    for (const hookrelay::v1::Destination* dest : route.destinations) {
      route.filters.push_back(FindFilter(dest->id()));
      route.filtered = route.filtered || route.filters.back() != nullptr;
    }
    if (route.filtered) route.filter_set = std::make_shared<const FilterSet>(route.filters);
    for (const auto& key : source.write_keys()) by_write_key_[key] = route;
  }
}

const SourceRoute* Routing::FindByWriteKey(std::string_view write_key) const {
  auto it = by_write_key_.find(common::ToAbsl(write_key));
  return it == by_write_key_.end() ? nullptr : &it->second;
}

const hookrelay::v1::Destination* Routing::FindDestination(std::string_view id) const {
  auto it = destinations_.find(common::ToAbsl(id));
  return it == destinations_.end() ? nullptr : it->second;
}

const CompiledFilter* Routing::FindFilter(std::string_view id) const {
  auto it = filters_.find(common::ToAbsl(id));
  return it == filters_.end() ? nullptr : it->second.get();
}

}  // namespace hookrelay::collector
