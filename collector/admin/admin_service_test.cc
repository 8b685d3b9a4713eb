// hookrelay.v1.Admin over a real RocksDbJobStore and a real in-process gRPC server on
// 127.0.0.1:0: listing dead letters with pagination and filters, replaying them, argument
// checks, and the admin token.
#include "collector/admin/admin_service.h"

#include "collector/api/admin_auth.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/timestamp.pb.h"
#include "gtest/gtest.h"
#include "absl/synchronization/notification.h"
#include "common/time_format.h"
#include "collector/admin/admin_test_util.h"
#include "collector/store/store.h"
#include "hookrelay/v1/admin.grpc.pb.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {
namespace {

using ::hookrelay::v1::ListDeadLettersRequest;
using ::hookrelay::v1::ListDeadLettersResponse;
using ::hookrelay::v1::ReplayDeadLettersRequest;
using ::hookrelay::v1::ReplayDeadLettersResponse;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

constexpr auto kRpcTimeout = std::chrono::seconds(20);
constexpr char kToken[] = "adm_0123456789abcdef";

google::protobuf::Timestamp Ts(absl::Time t) {
  google::protobuf::Timestamp out;
  const int64_t nanos = absl::ToUnixNanos(t);
  out.set_seconds(nanos / 1000000000);
  out.set_nanos(static_cast<int32_t>(nanos % 1000000000));
  return out;
}

std::vector<uint64_t> Ids(const ListDeadLettersResponse& response) {
  std::vector<uint64_t> ids;
  for (const auto& job : response.jobs()) ids.push_back(job.id());
  return ids;
}

std::string Describe(const grpc::Status& status) {
  return absl::StrCat(status.error_code(), ": ", status.error_message());
}

class AdminServiceTest : public ::testing::Test {
 protected:
  // `token` is the server's admin token; calls send `client_token_` (none when empty).
  void StartServer(std::string token = "") {
    absl::StatusOr<std::unique_ptr<AdminTestServer>> server = AdminTestServer::Start(token);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = server_->NewStub();
  }

  std::vector<uint64_t> MakeDeadLetters(const std::vector<std::string>& destinations,
                                        absl::Duration step = absl::ZeroDuration()) {
    absl::StatusOr<std::vector<uint64_t>> ids = server_->MakeDeadLetters(destinations, step);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<uint64_t>{};
  }

  void Prepare(grpc::ClientContext& context, const std::string& authorization) {
    context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  }

  grpc::Status List(const ListDeadLettersRequest& request, ListDeadLettersResponse* response,
                    const std::string& authorization = "") {
    grpc::ClientContext context;
    Prepare(context, authorization);
    return stub_->ListDeadLetters(&context, request, response);
  }

  grpc::Status Replay(const ReplayDeadLettersRequest& request,
                      ReplayDeadLettersResponse* response, const std::string& authorization = "") {
    grpc::ClientContext context;
    Prepare(context, authorization);
    return stub_->ReplayDeadLetters(&context, request, response);
  }

  // Every dead letter's id (all pages).
  std::vector<uint64_t> ListAllIds(const std::string& authorization = "") {
    std::vector<uint64_t> ids;
    ListDeadLettersRequest request;
    request.set_page_size(1000);
    while (true) {
      ListDeadLettersResponse response;
      const grpc::Status status = List(request, &response, authorization);
      EXPECT_TRUE(status.ok()) << Describe(status);
      if (!status.ok()) return ids;
      for (uint64_t id : Ids(response)) ids.push_back(id);
      if (response.next_page_token().empty()) return ids;
      request.set_page_token(response.next_page_token());
    }
  }

  std::vector<uint64_t> LeaseAllIds() {
    absl::StatusOr<std::vector<LeasedJob>> leased = server_->store().Lease(1000);
    EXPECT_TRUE(leased.ok()) << leased.status();
    std::vector<uint64_t> ids;
    if (leased.ok()) {
      for (const LeasedJob& job : *leased) ids.push_back(job.job.id());
    }
    return ids;
  }

  std::unique_ptr<AdminTestServer> server_;
  std::unique_ptr<hookrelay::v1::Admin::Stub> stub_;
};

// Pages of page_size follow each other through next_page_token, which is empty after the last.
TEST_F(AdminServiceTest, ListPaginatesAcrossPages) {
  StartServer();
  const absl::Time t0 = server_->clock().Now();
  const std::vector<uint64_t> ids =
      MakeDeadLetters({"d1", "d2", "d1", "d2", "d1"}, absl::Minutes(1));
  ASSERT_THAT(ids, SizeIs(5));

  ListDeadLettersRequest request;
  request.set_page_size(2);
  ListDeadLettersResponse page1;
  grpc::Status status = List(request, &page1);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(Ids(page1), (std::vector<uint64_t>{ids[0], ids[1]}));
  ASSERT_THAT(page1.next_page_token(), Not(IsEmpty()));
  // The jobs come whole: event, reason, death time, attempts and per-URL history.
  const hookrelay::v1::Job& first = page1.jobs(0);
  EXPECT_EQ(first.destination_id(), "d1");
  EXPECT_EQ(first.type(), hookrelay::v1::TRACK);
  EXPECT_EQ(first.message_id(), "msg-0");
  EXPECT_THAT(first.event_json(), HasSubstr(R"("event":"Order Completed")"));
  EXPECT_EQ(first.dead_reason(), AdminTestServer::DeadReason("d1"));
  EXPECT_EQ(first.dead_at_unix_ms(), absl::ToUnixMillis(t0));
  EXPECT_EQ(first.attempts(), 1);
  ASSERT_THAT(first.history(), SizeIs(1));
  ASSERT_THAT(first.history(0).urls(), SizeIs(1));
  EXPECT_EQ(first.history(0).urls(0).status(), 410);
  EXPECT_EQ(page1.jobs(1).dead_at_unix_ms(), absl::ToUnixMillis(t0 + absl::Minutes(1)));

  request.set_page_token(page1.next_page_token());
  ListDeadLettersResponse page2;
  status = List(request, &page2);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(Ids(page2), (std::vector<uint64_t>{ids[2], ids[3]}));
  ASSERT_THAT(page2.next_page_token(), Not(IsEmpty()));

  request.set_page_token(page2.next_page_token());
  ListDeadLettersResponse page3;
  status = List(request, &page3);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(Ids(page3), (std::vector<uint64_t>{ids[4]}));
  EXPECT_EQ(page3.next_page_token(), "");

  // A page that ends exactly at the last job has no token either (no trailing empty page).
  request.clear_page_token();
  request.set_page_size(5);
  ListDeadLettersResponse exact;
  status = List(request, &exact);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(Ids(exact), ids);
  EXPECT_EQ(exact.next_page_token(), "");
}

// page_size 0 means 100.
TEST_F(AdminServiceTest, DefaultPageSizeIs100) {
  StartServer();
  const std::vector<uint64_t> ids = MakeDeadLetters(std::vector<std::string>(101, "d1"));
  ASSERT_THAT(ids, SizeIs(101));
  ListDeadLettersResponse response;
  const grpc::Status status = List(ListDeadLettersRequest(), &response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_THAT(response.jobs(), SizeIs(100));
  EXPECT_EQ(response.jobs(99).id(), ids[99]);
  EXPECT_THAT(response.next_page_token(), Not(IsEmpty()));
}

// The filter selects by destination and by death time in [from, to), also across pages.
TEST_F(AdminServiceTest, ListFiltersByDestinationAndTimeRange) {
  StartServer();
  const absl::Time t0 = server_->clock().Now();
  const std::vector<uint64_t> ids =
      MakeDeadLetters({"d1", "d2", "d1", "d2", "d1"}, absl::Minutes(1));
  ASSERT_THAT(ids, SizeIs(5));

  ListDeadLettersRequest by_destination;
  by_destination.mutable_filter()->set_destination_id("d1");
  ListDeadLettersResponse response;
  grpc::Status status = List(by_destination, &response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(Ids(response), (std::vector<uint64_t>{ids[0], ids[2], ids[4]}));
  EXPECT_EQ(response.next_page_token(), "");

  // Half-open: the job that died exactly at `to` (ids[3]) is excluded, the one at `from` included.
  ListDeadLettersRequest by_time;
  *by_time.mutable_filter()->mutable_from() = Ts(t0 + absl::Minutes(1));
  *by_time.mutable_filter()->mutable_to() = Ts(t0 + absl::Minutes(3));
  response.Clear();
  status = List(by_time, &response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(Ids(response), (std::vector<uint64_t>{ids[1], ids[2]}));

  // Only a lower bound, combined with a destination.
  ListDeadLettersRequest both;
  both.mutable_filter()->set_destination_id("d1");
  *both.mutable_filter()->mutable_from() = Ts(t0 + absl::Seconds(30));
  response.Clear();
  status = List(both, &response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(Ids(response), (std::vector<uint64_t>{ids[2], ids[4]}));

  // Pagination within a filter.
  by_destination.set_page_size(1);
  std::vector<uint64_t> paged;
  for (int pages = 0; pages < 10; ++pages) {
    response.Clear();
    status = List(by_destination, &response);
    ASSERT_TRUE(status.ok()) << Describe(status);
    ASSERT_THAT(response.jobs(), SizeIs(1));
    paged.push_back(response.jobs(0).id());
    if (response.next_page_token().empty()) break;
    by_destination.set_page_token(response.next_page_token());
  }
  EXPECT_EQ(paged, (std::vector<uint64_t>{ids[0], ids[2], ids[4]}));

  ListDeadLettersRequest none;
  none.mutable_filter()->set_destination_id("nope");
  response.Clear();
  status = List(none, &response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_THAT(response.jobs(), IsEmpty());
  EXPECT_EQ(response.next_page_token(), "");
}

// page_size over 1,000 or negative, a foreign page token and a bad time range are
// INVALID_ARGUMENT naming the field; 1,000 itself is fine.
TEST_F(AdminServiceTest, InvalidListArguments) {
  StartServer();
  ASSERT_THAT(MakeDeadLetters({"d1"}), SizeIs(1));
  ListDeadLettersResponse response;

  ListDeadLettersRequest too_big;
  too_big.set_page_size(1001);
  grpc::Status status = List(too_big, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(status);
  EXPECT_THAT(status.error_message(), AllOf(HasSubstr("pageSize"), HasSubstr("1000")));

  ListDeadLettersRequest negative;
  negative.set_page_size(-1);
  status = List(negative, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(status);
  EXPECT_THAT(status.error_message(), HasSubstr("pageSize"));

  ListDeadLettersRequest max;
  max.set_page_size(1000);
  status = List(max, &response);
  EXPECT_TRUE(status.ok()) << Describe(status);
  EXPECT_THAT(response.jobs(), SizeIs(1));

  for (const std::string& token :
       std::vector<std::string>{"garbage!", "MTIz", internal::EncodePageToken(1) + "x"}) {
    ListDeadLettersRequest bad_token;
    bad_token.set_page_token(token);
    status = List(bad_token, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << token;
    EXPECT_THAT(status.error_message(), HasSubstr("pageToken")) << token;
  }

  const absl::Time t = server_->clock().Now();
  ListDeadLettersRequest reversed;
  *reversed.mutable_filter()->mutable_from() = Ts(t);
  *reversed.mutable_filter()->mutable_to() = Ts(t);
  status = List(reversed, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(status);
  EXPECT_THAT(status.error_message(), HasSubstr("filter.to"));

  ListDeadLettersRequest bad_time;
  bad_time.mutable_filter()->mutable_from()->set_nanos(-1);
  status = List(bad_time, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(status);
  EXPECT_THAT(status.error_message(), HasSubstr("filter.from"));
}

// Replaying one destination makes exactly its dead letters leasable again and unlisted.
TEST_F(AdminServiceTest, ReplayByDestination) {
  StartServer();
  const std::vector<uint64_t> ids =
      MakeDeadLetters({"d1", "d2", "d1", "d2", "d1"}, absl::Minutes(1));
  ASSERT_THAT(ids, SizeIs(5));
  EXPECT_THAT(LeaseAllIds(), IsEmpty());

  ReplayDeadLettersRequest request;
  request.mutable_filter()->set_destination_id("d2");
  ReplayDeadLettersResponse response;
  const grpc::Status status = Replay(request, &response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(response.replayed(), 2u);

  EXPECT_EQ(ListAllIds(), (std::vector<uint64_t>{ids[0], ids[2], ids[4]}));
  EXPECT_EQ(LeaseAllIds(), (std::vector<uint64_t>{ids[1], ids[3]}));
  EXPECT_EQ(server_->store().Counts().dead, 3);
}

// A time range alone is a filter: it replays only the jobs that died in [from, to).
TEST_F(AdminServiceTest, ReplayByTimeRange) {
  StartServer();
  const absl::Time t0 = server_->clock().Now();
  const std::vector<uint64_t> ids = MakeDeadLetters({"d1", "d2", "d1", "d2"}, absl::Minutes(1));
  ASSERT_THAT(ids, SizeIs(4));

  ReplayDeadLettersRequest request;
  *request.mutable_filter()->mutable_from() = Ts(t0 + absl::Minutes(1));
  *request.mutable_filter()->mutable_to() = Ts(t0 + absl::Minutes(3));
  ReplayDeadLettersResponse response;
  const grpc::Status status = Replay(request, &response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(response.replayed(), 2u);
  EXPECT_EQ(ListAllIds(), (std::vector<uint64_t>{ids[0], ids[3]}));
  EXPECT_EQ(LeaseAllIds(), (std::vector<uint64_t>{ids[1], ids[2]}));
}

// An empty filter replays nothing unless all=true; all=true next to a filter is refused too;
// all=true alone replays every dead letter.
TEST_F(AdminServiceTest, ReplayEverythingNeedsAll) {
  StartServer();
  const std::vector<uint64_t> ids = MakeDeadLetters({"d1", "d2", "d3"});
  ASSERT_THAT(ids, SizeIs(3));

  ReplayDeadLettersResponse response;
  grpc::Status status = Replay(ReplayDeadLettersRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(status);
  EXPECT_EQ(status.error_message(), "all: replaying every dead letter needs all=true");

  ReplayDeadLettersRequest all_and_filter;
  all_and_filter.set_all(true);
  all_and_filter.mutable_filter()->set_destination_id("d1");
  status = Replay(all_and_filter, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(status);
  EXPECT_THAT(status.error_message(), HasSubstr("all"));

  EXPECT_EQ(ListAllIds(), ids);  // Nothing was replayed by the refused calls.
  EXPECT_THAT(LeaseAllIds(), IsEmpty());

  ReplayDeadLettersRequest all;
  all.set_all(true);
  status = Replay(all, &response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(response.replayed(), 3u);
  EXPECT_THAT(ListAllIds(), IsEmpty());
  EXPECT_EQ(LeaseAllIds(), ids);
}

// With an admin token, calls without it or with another one are UNAUTHENTICATED (and do
// nothing); "Bearer <token>" in any case of the scheme is accepted.
TEST_F(AdminServiceTest, AdminTokenIsRequiredWhenConfigured) {
  StartServer(kToken);
  const std::vector<uint64_t> ids = MakeDeadLetters({"d1", "d2"});
  ASSERT_THAT(ids, SizeIs(2));

  const std::vector<std::string> refused = {
      "",  // no metadata at all
      "Bearer adm_0123456789abcdeX",
      "Bearer adm_0123456789abcde",
      "Bearer adm_0123456789abcdef0",
      "Bearer ",
      absl::StrCat("Basic ", kToken),
      kToken,
  };
  ReplayDeadLettersRequest replay_all;
  replay_all.set_all(true);
  for (const std::string& authorization : refused) {
    ListDeadLettersResponse list_response;
    grpc::Status status = List(ListDeadLettersRequest(), &list_response, authorization);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << "[" << authorization << "] " << Describe(status);
    EXPECT_THAT(list_response.jobs(), IsEmpty());
    EXPECT_THAT(status.error_message(), Not(HasSubstr(kToken)));

    ReplayDeadLettersResponse replay_response;
    status = Replay(replay_all, &replay_response, authorization);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << "[" << authorization << "] " << Describe(status);
  }
  EXPECT_EQ(server_->store().Counts().dead, 2);

  EXPECT_EQ(ListAllIds(absl::StrCat("Bearer ", kToken)), ids);
  EXPECT_EQ(ListAllIds(absl::StrCat("bearer ", kToken)), ids);

  ReplayDeadLettersRequest replay_d1;
  replay_d1.mutable_filter()->set_destination_id("d1");
  ReplayDeadLettersResponse response;
  const grpc::Status status = Replay(replay_d1, &response, absl::StrCat("Bearer ", kToken));
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(response.replayed(), 1u);
}

// Without a token every call is accepted, whatever authorization it carries.
TEST_F(AdminServiceTest, NoTokenMeansNoAuthentication) {
  StartServer("");
  const std::vector<uint64_t> ids = MakeDeadLetters({"d1"});
  EXPECT_EQ(ListAllIds(), ids);
  EXPECT_EQ(ListAllIds("Bearer anything"), ids);
}

// Deletions over gRPC (SPEC §6.1): one delete job per (affected source, enabled destination), none
// for a disabled one, the body exactly type/userId/timestamp; the user's undelivered jobs and dead
// letters purged; sources from the index when none are given; idempotent by request id; errors
// naming the field.
TEST_F(AdminServiceTest, DeletionNotifiesAndPurges) {
  StartServer();
  auto call = [&](auto method, const auto& request, auto* response) {
    grpc::ClientContext context;
    Prepare(context, "");
    return ((*stub_).*method)(&context, request, response);
  };
  for (const char* id : {"web", "ios", "srv"}) {
    hookrelay::v1::CreateSourceRequest request;
    request.mutable_source()->set_id(id);
    request.mutable_source()->set_kind("web");
    hookrelay::v1::SourceResource created;
    const grpc::Status status = call(&hookrelay::v1::Admin::Stub::CreateSource, request, &created);
    ASSERT_TRUE(status.ok()) << Describe(status);
  }
  auto destination = [&](const char* id, std::vector<std::string> sources, bool enabled) {
    hookrelay::v1::CreateDestinationRequest request;
    hookrelay::v1::DestinationResource& d = *request.mutable_destination();
    d.set_id(id);
    d.set_type("webhooks");
    d.set_enabled(enabled);
    for (const std::string& s : sources) d.add_sources(s);
    d.add_urls()->set_url(absl::StrCat("https://hooks.example.com/", id));
    hookrelay::v1::DestinationResource created;
    const grpc::Status status =
        call(&hookrelay::v1::Admin::Stub::CreateDestination, request, &created);
    ASSERT_TRUE(status.ok()) << Describe(status);
  };
  destination("hook-a", {"web"}, true);
  destination("hook-b", {"web", "ios"}, true);
  destination("hook-off", {"web", "ios"}, false);

  // u1 seen in web (two jobs) and ios (one job, later a dead letter); u2 in web.
  auto event = [](int n, std::string user, std::string source, std::string destination) {
    AppendItem item;
    item.dedup_key = DedupKey(source, absl::StrCat("m", n));
    item.user_id = user;
    item.source_id = source;
    hookrelay::v1::Job job;
    job.set_source_id(source);
    job.set_destination_id(destination);
    job.set_user_id(user);
    job.set_type(hookrelay::v1::TRACK);
    job.set_event_json(R"({"type":"track"})");
    item.jobs.emplace_back(job);
    return item;
  };
  std::vector<AppendItem> items;
  items.push_back(event(1, "u1", "ios", "hook-b"));
  items.push_back(event(2, "u1", "web", "hook-a"));
  items.push_back(event(3, "u1", "web", "hook-b"));
  items.push_back(event(4, "u2", "web", "hook-a"));
  absl::Notification appended;
  server_->store().Append(std::move(items), [&](absl::StatusOr<AppendResult> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    appended.Notify();
  });
  appended.WaitForNotification();
  absl::StatusOr<std::vector<LeasedJob>> leased = server_->store().Lease(1);
  ASSERT_TRUE(leased.ok() && leased->size() == 1);
  ASSERT_EQ((*leased)[0].job.source_id(), "ios");
  ASSERT_TRUE(server_->store()
                  .Bury((*leased)[0].job.id(), (*leased)[0].lease, "400", hookrelay::v1::Attempt())
                  .ok());

  hookrelay::v1::CreateDeletionRequest request;
  request.set_user_id("u1");
  request.set_request_id("gdpr-0001");
  hookrelay::v1::Deletion deletion;
  grpc::Status status = call(&hookrelay::v1::Admin::Stub::CreateDeletion, request, &deletion);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_THAT(deletion.id(), ::testing::StartsWith("del_"));
  EXPECT_EQ(deletion.user_id(), "u1");
  EXPECT_THAT(deletion.source_ids(), ::testing::ElementsAre("ios", "web"));
  EXPECT_TRUE(deletion.sources_from_index());
  EXPECT_EQ(deletion.state(), hookrelay::v1::Deletion::COMPLETED);
  EXPECT_EQ(deletion.notifications(), 3u);  // ios×hook-b, web×hook-a, web×hook-b
  EXPECT_EQ(deletion.purged_jobs(), 2u);
  EXPECT_EQ(deletion.purged_dead_letters(), 1u);
  EXPECT_EQ(absl::FromUnixSeconds(deletion.create_time().seconds()),
            absl::FromUnixSeconds(absl::ToUnixSeconds(server_->clock().Now())));

  leased = server_->store().Lease(100);
  ASSERT_TRUE(leased.ok());
  std::vector<std::string> pairs;
  const std::string body = absl::StrCat(R"({"type":"delete","userId":"u1","timestamp":")",
                                        common::FormatIso8601Millis(server_->clock().Now()),
                                        R"("})");
  for (const LeasedJob& job : *leased) {
    if (job.job.type() != hookrelay::v1::DELETE) {
      EXPECT_EQ(job.job.user_id(), "u2");
      continue;
    }
    pairs.push_back(absl::StrCat(job.job.source_id(), "/", job.job.destination_id()));
    EXPECT_EQ(job.job.event_json(), body);
    EXPECT_EQ(job.job.user_id(), "u1");
  }
  EXPECT_THAT(pairs, ::testing::UnorderedElementsAre("ios/hook-b", "web/hook-a", "web/hook-b"));
  EXPECT_THAT(ListAllIds(), IsEmpty());

  // The same request id: the same record, nothing again.
  hookrelay::v1::Deletion again;
  status = call(&hookrelay::v1::Admin::Stub::CreateDeletion, request, &again);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(again.id(), deletion.id());
  EXPECT_EQ(server_->store().Counts().ready, 0);
  // ... for another user: refused.
  request.set_user_id("u2");
  status = call(&hookrelay::v1::Admin::Stub::CreateDeletion, request, &again);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS) << Describe(status);
  EXPECT_THAT(status.error_message(), HasSubstr("gdpr-0001"));

  // Explicit sources; a user never seen still gets the notifications of those sources.
  server_->clock().Advance(absl::Seconds(1));
  hookrelay::v1::CreateDeletionRequest explicit_request;
  explicit_request.set_user_id("never-seen");
  explicit_request.add_source_ids("ios");
  hookrelay::v1::Deletion second;
  status = call(&hookrelay::v1::Admin::Stub::CreateDeletion, explicit_request, &second);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_FALSE(second.sources_from_index());
  EXPECT_EQ(second.notifications(), 1u);
  EXPECT_EQ(second.purged_jobs(), 0u);

  hookrelay::v1::GetDeletionRequest get;
  get.set_id(deletion.id());
  hookrelay::v1::Deletion got;
  status = call(&hookrelay::v1::Admin::Stub::GetDeletion, get, &got);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(got.SerializeAsString(), deletion.SerializeAsString());
  get.set_id("del_nope");
  EXPECT_EQ(call(&hookrelay::v1::Admin::Stub::GetDeletion, get, &got).error_code(),
            grpc::StatusCode::NOT_FOUND);

  hookrelay::v1::ListDeletionsRequest list;
  list.set_page_size(1);
  hookrelay::v1::ListDeletionsResponse page;
  status = call(&hookrelay::v1::Admin::Stub::ListDeletions, list, &page);
  ASSERT_TRUE(status.ok()) << Describe(status);
  ASSERT_THAT(page.deletions(), SizeIs(1));
  EXPECT_EQ(page.deletions(0).user_id(), "never-seen");  // Newest first.
  list.set_page_token(page.next_page_token());
  hookrelay::v1::ListDeletionsResponse last;
  status = call(&hookrelay::v1::Admin::Stub::ListDeletions, list, &last);
  ASSERT_TRUE(status.ok()) << Describe(status);
  ASSERT_THAT(last.deletions(), SizeIs(1));
  EXPECT_EQ(last.deletions(0).id(), deletion.id());
  EXPECT_EQ(last.next_page_token(), "");

  // Errors name the field.
  struct Bad {
    std::string user;
    std::vector<std::string> sources;
    std::string request_id;
    grpc::StatusCode code;
    std::string says;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"", {}, "", grpc::StatusCode::INVALID_ARGUMENT, "userId"},
           {std::string(257, 'u'), {}, "", grpc::StatusCode::INVALID_ARGUMENT, "at most 256"},
           {"u1", {"nope"}, "", grpc::StatusCode::NOT_FOUND, "sourceIds[0]"},
           {"u1", {"web", "web"}, "", grpc::StatusCode::INVALID_ARGUMENT, "sourceIds[1]"},
           {"u1", {}, "bad id!", grpc::StatusCode::INVALID_ARGUMENT, "requestId"},
       }) {
    hookrelay::v1::CreateDeletionRequest r;
    r.set_user_id(bad.user);
    for (const std::string& s : bad.sources) r.add_source_ids(s);
    r.set_request_id(bad.request_id);
    hookrelay::v1::Deletion ignored;
    status = call(&hookrelay::v1::Admin::Stub::CreateDeletion, r, &ignored);
    EXPECT_EQ(status.error_code(), bad.code) << Describe(status);
    EXPECT_THAT(status.error_message(), HasSubstr(bad.says));
  }
}

// Page tokens round-trip and are opaque (not the bare id).
TEST(AdminServiceInternalTest, PageTokenRoundTrip) {
  for (uint64_t id : {uint64_t{1}, uint64_t{42}, UINT64_MAX}) {
    const std::string token = internal::EncodePageToken(id);
    EXPECT_NE(token, absl::StrCat(id));
    absl::StatusOr<uint64_t> decoded = internal::DecodePageToken(token);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, id);
  }
  EXPECT_FALSE(internal::DecodePageToken("").ok());
  EXPECT_FALSE(internal::DecodePageToken("42").ok());
}

// Equal strings compare equal; any difference, including length, does not.
TEST(AdminServiceInternalTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secre", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret0", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", ""));
}

}  // namespace
}  // namespace hookrelay::collector
