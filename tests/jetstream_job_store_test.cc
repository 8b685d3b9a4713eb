// The JetStream engine's job flow on a real 3-node cluster: appends
// complete on replicated publish acks and are de-duplicated by Nats-Msg-Id; jobs are leased
// through their destinations' consumers (and the dispatch consumer of the layout before), completed, retried through message schedules (not before their
// time, with the attempt recorded) and dead-lettered; a node lost during appends loses nothing
// acknowledged.
#include "collector/store/jetstream/jetstream_job_store.h"
#include "collector/store/jetstream/jetstream_health.h"
#include "collector/store/jetstream/jetstream_layout.h"

#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "tests/nats_cluster.h"

namespace hookrelay::collector {
namespace {

AppendItem Event(int n) {
  AppendItem item;
  item.dedup_key = DedupKey("web", absl::StrCat("m-", n));
  for (const char* destination : {"hook-a", "hook-b"}) {
    hookrelay::v1::Job job;
    job.set_source_id("web");
    job.set_destination_id(destination);
    job.set_type(hookrelay::v1::TRACK);
    job.set_message_id(absl::StrCat("m-", n));
    job.set_user_id("u1");
    job.set_event_json(absl::StrCat(R"({"type":"track","n":)", n, "}"));
    item.jobs.emplace_back(job);
  }
  return item;
}

absl::StatusOr<AppendResult> AppendAndWait(Store& store, std::vector<AppendItem> items) {
  absl::Notification done;
  absl::StatusOr<AppendResult> result;
  store.Append(std::move(items), [&](absl::StatusOr<AppendResult> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotificationWithTimeout(absl::Seconds(30));
  return result;
}

// The value of the unlabelled counter or gauge `name`, or -1.
double Metric(prometheus::Registry& registry, const std::string& name) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name || family.metric.empty()) continue;
    return family.type == prometheus::MetricType::Counter ? family.metric[0].counter.value
                                                          : family.metric[0].gauge.value;
  }
  return -1;
}

// Whether the ready count reaches `n` within a few seconds (the consumer's counts follow the
// stream's acks by a moment).
bool ReadyReaches(Store& store, int64_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (store.Counts().ready != n) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

// Leases until `n` jobs came or `wait` passed.
std::vector<LeasedJob> LeaseN(Store& store, size_t n, absl::Duration wait) {
  std::vector<LeasedJob> out;
  const absl::Time deadline = absl::Now() + wait;
  while (out.size() < n && absl::Now() < deadline) {
    absl::StatusOr<std::vector<LeasedJob>> got = store.Lease(n - out.size());
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) break;
    if (got->empty()) absl::SleepFor(absl::Milliseconds(2));  // Lease never waits.
    for (LeasedJob& j : *got) out.push_back(std::move(j));
  }
  return out;
}

TEST(JetStreamJobStoreTest, JobFlowOnAThreeNodeCluster) {
  absl::StatusOr<std::unique_ptr<test::NatsCluster>> cluster = test::NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JetStreamJobStore::Options options;
  options.urls = (*cluster)->urls();
  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> opened = JetStreamJobStore::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  JetStreamJobStore& store = **opened;
  EXPECT_TRUE(store.WriteHealth().ok());

  std::vector<AppendItem> items;
  for (int i = 0; i < 50; ++i) items.push_back(Event(i));
  absl::StatusOr<AppendResult> appended = AppendAndWait(store, items);
  ASSERT_TRUE(appended.ok()) << appended.status();
  EXPECT_EQ(appended->stored, std::vector<bool>(50, true));
  // The same events again (a client retry): acknowledged as duplicates, stored once.
  appended = AppendAndWait(store, items);
  ASSERT_TRUE(appended.ok()) << appended.status();
  EXPECT_EQ(appended->stored, std::vector<bool>(50, false));

  // A follower lost while appending: every acknowledged job is there.
  ASSERT_TRUE((*cluster)->Kill(2).ok());
  std::vector<AppendItem> more;
  for (int i = 50; i < 60; ++i) more.push_back(Event(i));
  appended = AppendAndWait(store, more);
  ASSERT_TRUE(appended.ok()) << appended.status();
  ASSERT_TRUE((*cluster)->Restart(2).ok());

  std::vector<LeasedJob> leased = LeaseN(store, 120, absl::Seconds(20));
  ASSERT_EQ(leased.size(), 120u);
  absl::flat_hash_set<uint64_t> ids;
  for (const LeasedJob& j : leased) ids.insert(j.job.id());
  EXPECT_EQ(ids.size(), 120u);
  EXPECT_TRUE(LeaseN(store, 1, absl::Milliseconds(300)).empty());

  // A stale lease is refused.
  EXPECT_EQ(store.Complete(leased[0].job.id(), leased[0].lease + 1000).code(),
            absl::StatusCode::kFailedPrecondition);

  // 80 delivered, 20 retried in 2 s, 20 dead.
  hookrelay::v1::Attempt attempt;
  attempt.set_at_unix_ms(absl::ToUnixMillis(absl::Now()));
  attempt.add_urls()->set_status(503);
  const absl::Time not_before = absl::Now() + absl::Seconds(2);
  for (size_t i = 0; i < leased.size(); ++i) {
    const LeasedJob& j = leased[i];
    absl::Status st;
    if (i < 80) {
      st = store.Complete(j.job.id(), j.lease);
    } else if (i < 100) {
      st = store.Retry(j.job.id(), j.lease, not_before, attempt);
    } else {
      st = store.Bury(j.job.id(), j.lease, "HTTP 400", attempt);
    }
    ASSERT_TRUE(st.ok()) << i << ": " << st;
  }
  EXPECT_EQ(store.Complete(leased[0].job.id(), leased[0].lease).code(),
            absl::StatusCode::kNotFound);  // Settled already.
  // Retry and Bury complete asynchronously (their publish acks settle the leases).
  {
    const absl::Time settled = absl::Now() + absl::Seconds(10);
    while (store.Counts().dead != 20 && absl::Now() < settled) {
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  EXPECT_EQ(store.Counts().dead, 20);

  // Not before their time; then all 20, with the attempt recorded.
  std::vector<LeasedJob> retried;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (retried.size() < 20 && absl::Now() < deadline) {
    for (LeasedJob& j : LeaseN(store, 20 - retried.size(), absl::Milliseconds(200))) {
      EXPECT_GE(absl::Now(), not_before - absl::Milliseconds(50)) << "a retry came early";
      retried.push_back(std::move(j));
    }
  }
  ASSERT_EQ(retried.size(), 20u);
  for (const LeasedJob& j : retried) {
    EXPECT_EQ(j.job.attempts(), 1);
    ASSERT_EQ(j.job.history_size(), 1);
    EXPECT_EQ(j.job.history(0).urls(0).status(), 503);
    EXPECT_TRUE(store.Complete(j.job.id(), j.lease).ok());
  }
  EXPECT_TRUE(LeaseN(store, 1, absl::Milliseconds(300)).empty());
  EXPECT_EQ(store.Counts().ready, 0);

  // The configuration managed at run time is the cluster's: another collector reads it.
  EXPECT_FALSE(store.LoadConfig().value_or(std::optional<std::string>("x")).has_value());
  ASSERT_TRUE(store.SaveConfig(std::string("v1\0bytes", 8)).ok());
  ASSERT_TRUE(store.SaveConfig("v2").ok());
  {
    absl::StatusOr<std::unique_ptr<JetStreamJobStore>> other = JetStreamJobStore::Open(options);
    ASSERT_TRUE(other.ok()) << other.status();
    absl::StatusOr<std::optional<std::string>> loaded = (*other)->LoadConfig();
    ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status();
    EXPECT_EQ(**loaded, "v2");
  }

  // The per-user index is kept from AppendItem::user_id/source_id, which these events leave
  // empty (tests/jetstream_user_data_test covers it).
  absl::StatusOr<std::vector<std::string>> seen = store.SourcesSeen("u1");
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_TRUE(seen->empty());
}

// Acks of delivered jobs go out in bursts (at once when 256 wait, else within 20 ms). Acks still
// waiting when the store closes are sent before its connection closes: with a lease of two
// seconds, nothing completed comes back to another collector, and the stream ends empty.
TEST(JetStreamJobStoreTest, AcksStillWaitingWhenTheStoreClosesAreSent) {
  absl::StatusOr<std::unique_ptr<test::NatsCluster>> cluster = test::NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JetStreamJobStore::Options options;
  options.urls = (*cluster)->urls();
  options.layout.ack_wait = absl::Seconds(2);
  {
    absl::StatusOr<std::unique_ptr<JetStreamJobStore>> opened = JetStreamJobStore::Open(options);
    ASSERT_TRUE(opened.ok()) << opened.status();
    std::vector<AppendItem> items;
    for (int i = 0; i < 150; ++i) items.push_back(Event(i));  // 300 jobs: one full burst + 44.
    ASSERT_TRUE(AppendAndWait(**opened, items).ok());
    std::vector<LeasedJob> leased = LeaseN(**opened, 300, absl::Seconds(20));
    ASSERT_EQ(leased.size(), 300u);
    for (const LeasedJob& j : leased) ASSERT_TRUE((*opened)->Complete(j.job.id(), j.lease).ok());
  }  // Closed at once, with the last 44 acks waiting for their burst.

  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> other = JetStreamJobStore::Open(options);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(LeaseN(**other, 1, absl::Seconds(4)).empty()) << "a completed job came back";
  const JobCounts counts = (*other)->Counts();
  EXPECT_EQ(counts.ready, 0);
  EXPECT_EQ(counts.leased, 0);
  EXPECT_EQ(counts.scheduled, 0);
}

// A collector whose deliverers went away holds no jobs for long: what its fetcher brought ahead
// goes back to the consumer after a quarter of the ack wait even though no Lease asks, and
// another collector's deliverers get it well before the ack wait would have ended.
TEST(JetStreamJobStoreTest, JobsFetchedAheadGoBackWhenNoLeaseAsks) {
  absl::StatusOr<std::unique_ptr<test::NatsCluster>> cluster = test::NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JetStreamJobStore::Options options;
  options.urls = (*cluster)->urls();
  options.layout.ack_wait = absl::Seconds(12);  // Stale after 3 s.
  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> first = JetStreamJobStore::Open(options);
  ASSERT_TRUE(first.ok()) << first.status();
  std::vector<AppendItem> items;
  for (int i = 0; i < 10; ++i) items.push_back(Event(i));  // 20 jobs.
  ASSERT_TRUE(AppendAndWait(**first, items).ok());
  // One Lease: the fetcher brings every job; one is leased, the rest wait at this collector.
  ASSERT_EQ(LeaseN(**first, 1, absl::Seconds(10)).size(), 1u);
  const absl::Time fetched = absl::Now();
  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> second = JetStreamJobStore::Open(options);
  ASSERT_TRUE(second.ok()) << second.status();
  std::vector<LeasedJob> moved = LeaseN(**second, 19, absl::Seconds(8));
  EXPECT_EQ(moved.size(), 19u) << "jobs fetched ahead stayed with a collector that no Lease asks";
  EXPECT_LT(absl::Now() - fetched, options.layout.ack_wait)
      << "they came back only when their ack wait ended";
}

// An upgrade from the layout before per-destination consumers: the shared dispatch consumer on
// hr.jobs.ready.> is narrowed to that layout's subjects at start, the jobs stored in it are
// still handed out (nothing acknowledged is lost), and new jobs go to their destinations'
// consumers.
TEST(JetStreamJobStoreTest, JobsOfTheLayoutBeforeStillGoOut) {
  absl::StatusOr<std::unique_ptr<test::NatsCluster>> cluster = test::NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  natsConnection* nc = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&nc, (*cluster)->urls().c_str()), NATS_OK);
  JetStreamLayout layout;
  auto api = [&](const std::string& subject, const std::string& body) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    for (;;) {  // Retried while the cluster elects its leaders.
      absl::StatusOr<JetStreamApiReply> reply = JetStreamApi(nc, subject, body, absl::Seconds(5));
      if ((reply.ok() && reply->error_code == 0) || absl::Now() > deadline) return reply;
      absl::SleepFor(absl::Milliseconds(300));
    }
  };
  // The layout before: the stream, and the dispatch consumer on every ready subject.
  absl::StatusOr<JetStreamApiReply> made =
      api("$JS.API.STREAM.CREATE.HR_JOBS", internal::JobsStreamConfig(layout));
  ASSERT_TRUE(made.ok() && made->error_code == 0) << (made.ok() ? made->error : made.status().ToString());
  made = api("$JS.API.CONSUMER.CREATE.HR_JOBS.dispatch",
             R"({"stream_name":"HR_JOBS","config":{"durable_name":"dispatch",)"
             R"("filter_subject":"hr.jobs.ready.>","ack_policy":"explicit",)"
             R"("ack_wait":90000000000,"max_deliver":-1,"max_ack_pending":100000}})");
  ASSERT_TRUE(made.ok() && made->error_code == 0) << (made.ok() ? made->error : made.status().ToString());
  // A job stored in it: hr.jobs.ready.<S>.<U>, no destination token.
  hookrelay::v1::Job old_job;
  old_job.set_source_id("web");
  old_job.set_destination_id("hook-a");
  old_job.set_type(hookrelay::v1::TRACK);
  old_job.set_message_id("m-before");
  old_job.set_user_id("u1");
  old_job.set_event_json("{}");
  const std::string body = old_job.SerializeAsString();
  natsMsg* ack = nullptr;
  ASSERT_EQ(natsConnection_Request(&ack, nc,
                                   absl::StrCat("hr.jobs.ready.", JetStreamToken("web"), ".",
                                                JetStreamToken("u1"))
                                       .c_str(),
                                   body.data(), static_cast<int>(body.size()), 5000),
            NATS_OK);
  EXPECT_TRUE(absl::StrContains(std::string(natsMsg_GetData(ack), natsMsg_GetDataLength(ack)),
                                R"("seq":1)"));
  natsMsg_Destroy(ack);

  JetStreamJobStore::Options options;
  options.urls = (*cluster)->urls();
  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> opened = JetStreamJobStore::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  absl::StatusOr<JetStreamApiReply> info = api("$JS.API.CONSUMER.INFO.HR_JOBS.dispatch", "");
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(absl::StrContains(info->body, R"("filter_subject":"hr.jobs.ready.*.*")"))
      << info->body;
  ASSERT_TRUE(AppendAndWait(**opened, {Event(1)}).ok());
  std::vector<LeasedJob> leased = LeaseN(**opened, 3, absl::Seconds(20));
  std::vector<std::string> got;
  for (const LeasedJob& j : leased) {
    got.push_back(absl::StrCat(j.job.message_id(), "@", j.job.destination_id()));
    EXPECT_TRUE((*opened)->Complete(j.job.id(), j.lease).ok());
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"m-1@hook-a", "m-1@hook-b", "m-before@hook-a"}));
  // The new jobs went through their destinations' consumers.
  for (const char* destination : {"hook-a", "hook-b"}) {
    info = api(absl::StrCat("$JS.API.CONSUMER.INFO.HR_JOBS.", DestinationConsumerName(destination)),
               "");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->error_code, 0) << destination << ": " << info->error;
    EXPECT_TRUE(absl::StrContains(info->body, R"("delivered":{"consumer_seq":1,)")) << info->body;
  }
  EXPECT_TRUE(ReadyReaches(**opened, 0));
  opened->reset();
  natsConnection_Destroy(nc);
}

// De-duplication beyond the stream's duplicate window: the event's marker in HR_DEDUP refuses a
// copy sent later, within one Append as well; after the dedup window the marker is gone and the
// same (source, messageId) is a new event. Windows shortened to seconds here.
TEST(JetStreamJobStoreTest, DuplicatesRefusedAfterTheStreamWindowUntilTheDedupWindowEnds) {
  absl::StatusOr<std::unique_ptr<test::NatsCluster>> cluster = test::NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JetStreamJobStore::Options options;
  options.urls = (*cluster)->urls();
  options.layout.duplicate_window = absl::Seconds(1);
  options.layout.dedup_window = absl::Seconds(6);
  prometheus::Registry registry;
  options.registry = &registry;
  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> opened = JetStreamJobStore::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  JetStreamJobStore& store = **opened;

  std::vector<AppendItem> first;
  for (int i = 0; i < 300; ++i) first.push_back(Event(i));  // two lookup requests
  first.push_back(Event(7));  // the same event twice in one request: the second is refused
  absl::StatusOr<AppendResult> appended = AppendAndWait(store, first);
  ASSERT_TRUE(appended.ok()) << appended.status();
  std::vector<bool> want(301, true);
  want[300] = false;
  EXPECT_EQ(appended->stored, want);
  EXPECT_TRUE(ReadyReaches(store, 600)) << store.Counts().ready;

  absl::SleepFor(absl::Milliseconds(1500));  // The stream's duplicate window has passed.
  std::vector<AppendItem> again = {Event(3), Event(299), Event(1000)};
  appended = AppendAndWait(store, again);
  ASSERT_TRUE(appended.ok()) << appended.status();
  EXPECT_EQ(appended->stored, (std::vector<bool>{false, false, true}));
  EXPECT_TRUE(ReadyReaches(store, 602)) << store.Counts().ready;
  EXPECT_EQ(Metric(registry, "hookrelay_ingest_duplicates_total"), 3);
  EXPECT_EQ(Metric(registry, "hookrelay_store_writable"), 1);
  EXPECT_EQ(Metric(registry, "hookrelay_jetstream_dedup_lookup_failures_total"), 0);

  // Markers expire with the dedup window.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  bool accepted = false;
  while (!accepted && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(500));
    appended = AppendAndWait(store, {Event(3)});
    ASSERT_TRUE(appended.ok()) << appended.status();
    accepted = appended->stored[0];
  }
  EXPECT_TRUE(accepted) << "event 3 still refused after the dedup window";
}

// --nats_dedup_replicas=1 (the default): the markers live on one server. While it is down,
// appends go on without the 24 h check (counted), failing fast (no responders) rather than
// waiting out the request timeout, and a collector can start; when it is back, its markers are
// checked again.
TEST(JetStreamJobStoreTest, DedupMarkersOnOneReplicaSurviveTheirServerBeingDown) {
  absl::StatusOr<std::unique_ptr<test::NatsCluster>> cluster = test::NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JetStreamJobStore::Options options;
  options.urls = (*cluster)->urls();
  options.layout.dedup_replicas = 1;
  options.layout.duplicate_window = absl::Seconds(1);
  options.layout.request_timeout = absl::Seconds(5);
  prometheus::Registry registry;
  options.registry = &registry;
  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> opened = JetStreamJobStore::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  JetStreamJobStore& store = **opened;

  std::vector<AppendItem> first;
  for (int i = 0; i < 20; ++i) first.push_back(Event(i));
  absl::StatusOr<AppendResult> appended = AppendAndWait(store, first);
  ASSERT_TRUE(appended.ok()) << appended.status();
  EXPECT_EQ(appended->stored, std::vector<bool>(20, true));
  absl::SleepFor(absl::Milliseconds(1500));  // Past the stream's own duplicate window.

  // Which server holds HR_DEDUP. The streams an append writes to are led elsewhere (their
  // leaders step down until they are), so the append's time below is the lookup's alone.
  natsConnection* nc = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&nc, options.urls.c_str()), NATS_OK);
  auto leader_of = [&](const std::string& stream) -> std::string {
    absl::StatusOr<JetStreamApiReply> info =
        JetStreamApi(nc, absl::StrCat("$JS.API.STREAM.INFO.", stream), "", absl::Seconds(5));
    if (!info.ok()) return "";
    for (int n = 0; n < (*cluster)->size(); ++n) {
      const std::string quoted = absl::StrCat("\"", (*cluster)->name(n), "\"");
      if (absl::StrContains(info->body, absl::StrCat(R"("leader":)", quoted))) {
        return (*cluster)->name(n);
      }
    }
    return "";
  };
  const std::string dedup_leader = leader_of("HR_DEDUP");
  int holder = -1;
  for (int n = 0; n < (*cluster)->size(); ++n) {
    if ((*cluster)->name(n) == dedup_leader) holder = n;
  }
  ASSERT_GE(holder, 0) << "HR_DEDUP has no leader";
  bool apart = false;
  const absl::Time apart_deadline = absl::Now() + absl::Seconds(30);
  while (!apart && absl::Now() < apart_deadline) {
    apart = true;
    for (const char* stream : {"HR_JOBS", "HR_USERS", "HR_PROFILES"}) {
      const std::string leader = leader_of(stream);
      if (leader.empty() || leader == dedup_leader) {
        apart = false;
        if (!leader.empty()) {
          (void)JetStreamApi(nc, absl::StrCat("$JS.API.STREAM.LEADER.STEPDOWN.", stream), "",
                             absl::Seconds(5));
        }
      }
    }
    if (!apart) absl::SleepFor(absl::Milliseconds(500));
  }
  natsConnection_Destroy(nc);
  ASSERT_TRUE(apart) << "the job and user streams stayed on HR_DEDUP's server";
  // The timed append goes through a store connected to the two other servers only: a store
  // connected to the killed one first reconnects, and its requests wait meanwhile — a
  // different delay from the one this test is about (seen in CI: 5.2 s).
  JetStreamJobStore::Options others = options;
  std::vector<std::string> other_urls;
  for (int n = 0; n < (*cluster)->size(); ++n) {
    if (n != holder) other_urls.push_back((*cluster)->url(n));
  }
  others.urls = absl::StrJoin(other_urls, ",");
  prometheus::Registry others_registry;
  others.registry = &others_registry;
  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> opened_others = JetStreamJobStore::Open(others);
  ASSERT_TRUE(opened_others.ok()) << opened_others.status();
  ASSERT_TRUE((*cluster)->Kill(holder).ok());

  // Old and new events: all stored (the check is skipped, not waited for), the failure counted.
  // The first append after the kill may still meet a cluster that has not noticed the server is
  // gone (a request routed to it waits for its timeout; seen in CI under load: 5.2 s); once the
  // cluster knows, a lookup is refused at once: the second append is the timed one.
  appended = AppendAndWait(**opened_others, {Event(3)});
  ASSERT_TRUE(appended.ok()) << appended.status();
  EXPECT_EQ(appended->stored, (std::vector<bool>{true}));
  const absl::Time start = absl::Now();
  appended = AppendAndWait(**opened_others, {Event(100)});
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(appended.ok()) << appended.status();
  EXPECT_EQ(appended->stored, (std::vector<bool>{true}));
  // Not the 5 s request timeout: the lookup is refused at once (no responders).
  std::cout << "append while the markers' server was down: " << absl::FormatDuration(took)
            << std::endl;
  EXPECT_LT(took, absl::Seconds(2)) << "the lookup waited for its timeout";
  EXPECT_GE(Metric(others_registry, "hookrelay_jetstream_dedup_lookup_failures_total"), 1);

  // A collector starting while that server is down (a NATS pod restarting) starts once its
  // connect timeout is spent (the other streams' leaders re-elected meanwhile), and takes events.
  JetStreamJobStore::Options late = others;
  late.connect_timeout = absl::Seconds(15);
  prometheus::Registry late_registry;
  late.registry = &late_registry;
  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> opened_late = JetStreamJobStore::Open(late);
  ASSERT_TRUE(opened_late.ok()) << opened_late.status();
  appended = AppendAndWait(**opened_late, {Event(101)});
  ASSERT_TRUE(appended.ok()) << appended.status();
  EXPECT_EQ(appended->stored, (std::vector<bool>{true}));
  EXPECT_GE(Metric(late_registry, "hookrelay_jetstream_dedup_lookup_failures_total"), 1);

  // The server back: its markers (on disk) refuse the old events again. Each attempt sends an
  // event of the first batch not sent since (one whose lookup failed while the server was
  // still rejoining was stored again, and would be refused by its new marker).
  ASSERT_TRUE((*cluster)->Restart(holder).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  bool refused = false;
  for (int i = 4; i < 20 && !refused && absl::Now() < deadline; ++i) {
    if (i != 4) absl::SleepFor(absl::Milliseconds(500));
    appended = AppendAndWait(store, {Event(i)});
    ASSERT_TRUE(appended.ok()) << appended.status();
    refused = !appended->stored[0];
  }
  EXPECT_TRUE(refused) << "no marker of the first batch was found after its server came back";
}


// A labelled gauge or counter of `registry` (labels as name=value pairs, all of them), or -1.
double LabelledMetric(prometheus::Registry& registry, const std::string& name,
                      const std::vector<std::pair<std::string, std::string>>& labels) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      bool all = true;
      for (const auto& [k, v] : labels) {
        bool found = false;
        for (const prometheus::ClientMetric::Label& l : m.label) found |= l.name == k && l.value == v;
        all = all && found;
      }
      if (all) {
        return family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      }
    }
  }
  return -1;
}

// The NATS row's series (SPEC §11) follow the cluster: three current copies of the jobs stream
// and its consumer with a leader; the stream's leader killed: a new leader (one change counted),
// one copy not current; back: three current again.
TEST(JetStreamJobStoreTest, ClusterHealthFollowsALeaderKilledAndBack) {
  absl::StatusOr<std::unique_ptr<test::NatsCluster>> cluster = test::NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  JetStreamJobStore::Options options;
  options.urls = (*cluster)->urls();
  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> opened = JetStreamJobStore::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();  // The streams and the consumer exist.
  absl::StatusOr<natsConnection*> nc = (*cluster)->Connect();
  ASSERT_TRUE(nc.ok()) << nc.status();
  jsCtx* js = nullptr;
  ASSERT_EQ(natsConnection_JetStream(&js, *nc, nullptr), NATS_OK);
  prometheus::Registry registry;
  absl::StatusOr<std::unique_ptr<JetStreamClusterHealth>> health =
      JetStreamClusterHealth::Start(js, registry, absl::Milliseconds(100));
  ASSERT_TRUE(health.ok()) << health.status();
  auto value = [&](const std::string& name, const std::string& group, const char* state = nullptr) {
    std::vector<std::pair<std::string, std::string>> labels = {{"group", group}};
    if (state != nullptr) labels.emplace_back("state", state);
    return LabelledMetric(registry, name, labels);
  };
  auto eventually = [](const std::function<bool()>& pred) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!pred()) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(50));  // The watcher reads every 100 ms.
    }
    return true;
  };
  for (const char* group : {"HR_JOBS", "HR_JOBS/dispatch"}) {
    EXPECT_TRUE(eventually([&] {
      return value("hookrelay_jetstream_replicas", group, "current") == 3 &&
             value("hookrelay_jetstream_has_leader", group) == 1;
    })) << group;
    EXPECT_EQ(value("hookrelay_jetstream_leader_changes_total", group), 0) << group;
  }
  jsErrCode code = static_cast<jsErrCode>(0);
  jsStreamInfo* si = nullptr;
  ASSERT_EQ(js_GetStreamInfo(&si, js, "HR_JOBS", nullptr, &code), NATS_OK);
  const std::string leader = si->Cluster != nullptr && si->Cluster->Leader != nullptr
                                 ? si->Cluster->Leader : "";
  jsStreamInfo_Destroy(si);
  int killed = -1;
  for (int n = 0; n < (*cluster)->size(); ++n) {
    if ((*cluster)->name(n) == leader) killed = n;
  }
  ASSERT_GE(killed, 0) << "HR_JOBS has no leader";
  ASSERT_TRUE((*cluster)->Kill(killed).ok());
  EXPECT_TRUE(eventually([&] {
    return value("hookrelay_jetstream_leader_changes_total", "HR_JOBS") == 1 &&
           value("hookrelay_jetstream_has_leader", "HR_JOBS") == 1 &&
           value("hookrelay_jetstream_replicas", "HR_JOBS", "behind") +
                   value("hookrelay_jetstream_replicas", "HR_JOBS", "offline") ==
               1 &&
           value("hookrelay_jetstream_replicas", "HR_JOBS", "current") == 2;
  })) << "changes " << value("hookrelay_jetstream_leader_changes_total", "HR_JOBS")
      << ", offline " << value("hookrelay_jetstream_replicas", "HR_JOBS", "offline")
      << ", current " << value("hookrelay_jetstream_replicas", "HR_JOBS", "current")
      << ", behind " << value("hookrelay_jetstream_replicas", "HR_JOBS", "behind");
  ASSERT_TRUE((*cluster)->Restart(killed).ok());
  EXPECT_TRUE(eventually([&] {
    return value("hookrelay_jetstream_replicas", "HR_JOBS", "current") == 3 &&
           value("hookrelay_jetstream_replicas", "HR_JOBS", "behind") == 0 &&
           value("hookrelay_jetstream_replicas", "HR_JOBS", "offline") == 0;
  }));
  health->reset();
  jsCtx_Destroy(js);
  natsConnection_Destroy(*nc);
}

}  // namespace
}  // namespace hookrelay::collector
