#include "deliverer/batcher.h"

#include <openssl/sha.h>

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace hookrelay::deliverer {

std::string BatchKey(const hookrelay::v1::Destination& d,
                     const hookrelay::v1::DeliveryOptions& o) {
  size_t h = absl::HashOf(d.shared_secret(), d.rotation().previous_secret(),
                          d.rotation().ends_at().seconds(), o.timeout_ms(), o.standard_webhooks(),
                          o.batch().max_events(), o.batch().max_bytes(), o.batch().max_wait_ms());
  for (const hookrelay::v1::WebhookUrl& u : d.urls()) {
    h = absl::HashOf(h, u.url());
    for (const hookrelay::v1::Header& header : u.headers()) {
      h = absl::HashOf(h, header.name(), header.value());
    }
  }
  return absl::StrCat(d.id(), "#", h);
}


std::string BatchIdempotencyKey(std::vector<std::string_view> message_ids) {
  // Sorted (a retry may lease the members in another order), length-prefixed (no two sets of
  // ids hash the same bytes).
  std::sort(message_ids.begin(), message_ids.end());
  std::string input;
  for (std::string_view id : message_ids) {
    absl::StrAppend(&input, id.size(), ":", common::ToAbsl(id));
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(input.data()), input.size(), digest);
  return absl::StrCat("batch_", absl::BytesToHexString(absl::string_view(
                                    reinterpret_cast<const char*>(digest), 16)));
}

std::string BatchBody(const std::vector<BatchItem>& items) {
  size_t bytes = 0;
  for (const BatchItem& item : items) bytes += item.body.size();
  std::string out;
  out.reserve(BatchBodySize(bytes, items.size()));
  out.append(R"({"batch":[)");
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.append(items[i].body);
  }
  out.append("]}");
  return out;
}

Batcher::Batcher(const common::Clock& clock, Send send)
    : clock_(clock), send_(std::move(send)), thread_([this] { Loop(); }) {}

Batcher::~Batcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void Batcher::Add(const std::string& key, const hookrelay::v1::BatchOptions& options,
                  BatchItem item, size_t expected) {
  const size_t max_events =
      expected > 0 ? std::min<size_t>(expected, options.max_events()) : options.max_events();
  const size_t max_bytes = options.max_bytes();
  std::vector<std::vector<BatchItem>> ready;
  {
    absl::MutexLock lock(&mu_);
    if (BatchBodySize(item.body.size(), 1) > max_bytes) {
      // Too large to share a request: alone, at once.
      ready.emplace_back().push_back(std::move(item));
    } else {
      Pending& p = pending_[key];
      if (!p.items.empty() &&
          BatchBodySize(p.bytes + item.body.size(), p.items.size() + 1) > max_bytes) {
        members_ -= static_cast<int64_t>(p.items.size());
        ready.push_back(std::move(p.items));
        p.items.clear();
        p.bytes = 0;
      }
      if (p.items.empty()) {
        p.due = clock_.Now() + absl::Milliseconds(options.max_wait_ms());
        if (p.due < loop_wakes_at_) ++generation_;
      }
      p.bytes += item.body.size();
      p.items.push_back(std::move(item));
      ++members_;
      if (p.items.size() >= max_events) {
        members_ -= static_cast<int64_t>(p.items.size());
        ready.push_back(std::move(p.items));
        pending_.erase(key);
      }
    }
  }
  for (std::vector<BatchItem>& batch : ready) send_(std::move(batch));
}

void Batcher::FlushAll() {
  std::vector<std::vector<BatchItem>> ready;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, p] : pending_) {
      if (!p.items.empty()) ready.push_back(std::move(p.items));
    }
    pending_.clear();
    members_ = 0;
  }
  for (std::vector<BatchItem>& batch : ready) send_(std::move(batch));
}

int64_t Batcher::pending() const {
  absl::MutexLock lock(&mu_);
  return members_;
}

void Batcher::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& [key, p] : pending_) next = std::min(next, p.due);
    const uint64_t seen = generation_;
    auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || generation_ != seen;
    };
    loop_wakes_at_ = next;
    const bool woken = clock_.AwaitWithDeadline(mu_, absl::Condition(&changed), next);
    // Not waiting (below, or sending): every new batch is seen when the loop looks again.
    loop_wakes_at_ = absl::InfinitePast();
    if (woken) continue;
    // Due batches go, without the lock (sending may take a connection slot's wait).
    const absl::Time now = clock_.Now();
    std::vector<std::vector<BatchItem>> ready;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.due <= now) {
        members_ -= static_cast<int64_t>(it->second.items.size());
        ready.push_back(std::move(it->second.items));
        pending_.erase(it++);
      } else {
        ++it;
      }
    }
    mu_.Unlock();
    for (std::vector<BatchItem>& batch : ready) send_(std::move(batch));
    mu_.Lock();
  }
}

}  // namespace hookrelay::deliverer
