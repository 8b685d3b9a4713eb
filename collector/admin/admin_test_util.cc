#include "collector/admin/admin_test_util.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "collector/store/store.h"
#include "common/status_macros.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {

absl::StatusOr<std::unique_ptr<AdminTestServer>> AdminTestServer::Start(std::string admin_token) {
  auto server = std::unique_ptr<AdminTestServer>(new AdminTestServer());
  const char* tmp = getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                     "/admin_test_XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", strerror(errno)));
  }
  server->dir_ = pattern;

  RocksDbJobStore::Options options;
  options.path = server->dir_;
  options.clock = &server->clock_;
  ASSIGN_OR_RETURN(server->store_, RocksDbJobStore::Open(options));
  server->auth_ = std::make_unique<AdminAuth>(std::move(admin_token));
  // The configuration managed at run time, starting empty (no --config file).
  AudienceSyncer::Options audience_options;
  audience_options.clock = &server->clock_;
  server->audiences_ = std::make_unique<AudienceSyncer>(audience_options, *server->store_);
  AdminTestServer* s = server.get();
  server->config_ = std::make_unique<ConfigManager>(
      *server->store_, "", [s](const std::shared_ptr<const ConfigManager::Snapshot>& snapshot) {
        s->audiences_->SetConfig(std::make_shared<const hookrelay::v1::Config>(snapshot->merged));
      });
  RETURN_IF_ERROR(server->config_->Start());
  server->core_ = std::make_unique<AdminCore>(*server->store_, server->config_.get(),
                                              server->clock_);
  server->core_->SetAudienceSyncer(server->audiences_.get());
  server->service_ = std::make_unique<AdminService>(*server->core_, *server->auth_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ <= 0) {
    return absl::InternalError("the admin gRPC server did not start");
  }
  AdminHttpServer::Options http_options;
  http_options.address = "127.0.0.1:0";
  server->http_ = std::make_unique<AdminHttpServer>(http_options, *server->core_, *server->auth_);
  RETURN_IF_ERROR(server->http_->Start());
  return server;
}

AdminTestServer::~AdminTestServer() {
  if (http_ != nullptr) http_->Shutdown();
  http_.reset();
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
  service_.reset();
  core_.reset();
  config_.reset();
  audiences_.reset();
  auth_.reset();
  store_.reset();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string AdminTestServer::http_url() const {
  return absl::StrCat("http://127.0.0.1:", http_->port());
}

void AdminTestServer::SetServing(const std::string& service, bool serving) {
  server_->GetHealthCheckService()->SetServingStatus(service, serving);
}

std::string AdminTestServer::DeadReason(const std::string& destination) {
  return absl::StrCat("HTTP 410 from https://hooks.example.com/", destination);
}

absl::StatusOr<std::vector<uint64_t>> AdminTestServer::MakeDeadLetters(
    const std::vector<std::string>& destinations, absl::Duration step) {
  std::vector<uint64_t> ids;
  for (const std::string& destination : destinations) {
    const std::string message_id = absl::StrCat("msg-", next_message_++);
    hookrelay::v1::Job job;
    job.set_source_id("web");
    job.set_destination_id(destination);
    job.set_type(hookrelay::v1::TRACK);
    job.set_message_id(message_id);
    job.set_user_id("u1");
    job.set_event_json(absl::StrCat(R"({"type":"track","event":"Order Completed","messageId":")",
                                    message_id, R"("})"));
    job.set_received_at_unix_ms(absl::ToUnixMillis(clock_.Now()));
    AppendItem item;
    item.dedup_key = DedupKey("web", message_id);
    item.jobs.push_back(std::move(job));
    std::vector<AppendItem> items;
    items.push_back(std::move(item));

    absl::Notification appended;
    absl::Status append_status;
    store_->Append(std::move(items), [&](absl::StatusOr<AppendResult> r) {
      append_status = r.status();
      appended.Notify();
    });
    appended.WaitForNotification();
    RETURN_IF_ERROR(append_status);

    ASSIGN_OR_RETURN(std::vector<LeasedJob> leased, store_->Lease(2));
    if (leased.size() != 1 || leased[0].job.message_id() != message_id) {
      return absl::FailedPreconditionError(
          absl::StrCat("expected to lease only ", message_id, ", leased ", leased.size(), " jobs"));
    }
    hookrelay::v1::Attempt attempt;
    attempt.set_at_unix_ms(absl::ToUnixMillis(clock_.Now()));
    hookrelay::v1::UrlAttempt* url = attempt.add_urls();
    // Credentials in the URL, as some receivers want them: every reader must redact them.
    url->set_url(absl::StrCat("https://svc:pw@hooks.example.com/", destination, "?token=t0ps3cret"));
    url->set_status(410);
    RETURN_IF_ERROR(
        store_->Bury(leased[0].job.id(), leased[0].lease, DeadReason(destination), attempt));
    ids.push_back(leased[0].job.id());
    clock_.Advance(step);
  }
  return ids;
}

std::string AdminTestServer::address() const { return absl::StrCat("127.0.0.1:", port_); }

std::unique_ptr<hookrelay::v1::Admin::Stub> AdminTestServer::NewStub() const {
  return hookrelay::v1::Admin::NewStub(
      grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
}

}  // namespace hookrelay::collector
