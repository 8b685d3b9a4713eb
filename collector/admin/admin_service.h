// gRPC adapter for hookrelay.v1.Admin (proto/hookrelay/v1/admin.proto): authenticates the
// caller (AdminAuth) and runs the operation in AdminCore, which the JSON-over-HTTP adapter
// (admin_http.h) shares. No business logic here.
//
// Threading: the operations block gRPC's callback thread while they run (a synced store write
// per change, up to 10 s for TestDestination): acceptable for rare operator calls; nothing on the
// ingest or delivery path runs here. Thread-safe.
//
// Registration: AdminService admin(core, auth); builder.RegisterService(&admin); the core and the
// auth must outlive the service, and the service the grpc::Server.
#ifndef HOOKRELAY_COLLECTOR_ADMIN_ADMIN_SERVICE_H_
#define HOOKRELAY_COLLECTOR_ADMIN_ADMIN_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "collector/api/admin_auth.h"
#include "collector/admin/admin_core.h"
#include "hookrelay/v1/admin.grpc.pb.h"

namespace hookrelay::collector {

class AdminService final : public hookrelay::v1::Admin::CallbackService {
 public:
  AdminService(AdminCore& core, const AdminAuth& auth) : core_(core), auth_(auth) {}

  AdminService(const AdminService&) = delete;
  AdminService& operator=(const AdminService&) = delete;

  grpc::ServerUnaryReactor* GetCatalog(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::GetCatalogRequest* request,
                                      hookrelay::v1::Catalog* response) override;
  grpc::ServerUnaryReactor* ListSources(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::ListSourcesRequest* request,
                                      hookrelay::v1::ListSourcesResponse* response) override;
  grpc::ServerUnaryReactor* GetSource(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::GetSourceRequest* request,
                                      hookrelay::v1::SourceResource* response) override;
  grpc::ServerUnaryReactor* CreateSource(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::CreateSourceRequest* request,
                                      hookrelay::v1::SourceResource* response) override;
  grpc::ServerUnaryReactor* UpdateSource(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::UpdateSourceRequest* request,
                                      hookrelay::v1::SourceResource* response) override;
  grpc::ServerUnaryReactor* DeleteSource(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::DeleteSourceRequest* request,
                                      hookrelay::v1::DeleteResponse* response) override;
  grpc::ServerUnaryReactor* CreateWriteKey(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::CreateWriteKeyRequest* request,
                                      hookrelay::v1::CreateWriteKeyResponse* response) override;
  grpc::ServerUnaryReactor* RevokeWriteKey(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::RevokeWriteKeyRequest* request,
                                      hookrelay::v1::SourceResource* response) override;
  grpc::ServerUnaryReactor* ListDestinations(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::ListDestinationsRequest* request,
                                      hookrelay::v1::ListDestinationsResponse* response) override;
  grpc::ServerUnaryReactor* GetDestination(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::GetDestinationRequest* request,
                                      hookrelay::v1::DestinationResource* response) override;
  grpc::ServerUnaryReactor* CreateDestination(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::CreateDestinationRequest* request,
                                      hookrelay::v1::DestinationResource* response) override;
  grpc::ServerUnaryReactor* UpdateDestination(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::UpdateDestinationRequest* request,
                                      hookrelay::v1::DestinationResource* response) override;
  grpc::ServerUnaryReactor* DeleteDestination(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::DeleteDestinationRequest* request,
                                      hookrelay::v1::DeleteResponse* response) override;
  grpc::ServerUnaryReactor* TestDestination(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::TestDestinationRequest* request,
                                      hookrelay::v1::TestDestinationResponse* response) override;
  grpc::ServerUnaryReactor* RotateSecret(grpc::CallbackServerContext* context,
                                         const hookrelay::v1::RotateSecretRequest* request,
                                         hookrelay::v1::DestinationResource* response) override;
  grpc::ServerUnaryReactor* ListDeadLetters(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::ListDeadLettersRequest* request,
                                      hookrelay::v1::ListDeadLettersResponse* response) override;
  grpc::ServerUnaryReactor* ReplayDeadLetters(grpc::CallbackServerContext* context,
                                      const hookrelay::v1::ReplayDeadLettersRequest* request,
                                      hookrelay::v1::ReplayDeadLettersResponse* response) override;
  grpc::ServerUnaryReactor* CreateDeletion(grpc::CallbackServerContext* context,
                                           const hookrelay::v1::CreateDeletionRequest* request,
                                           hookrelay::v1::Deletion* response) override;
  grpc::ServerUnaryReactor* GetDeletion(grpc::CallbackServerContext* context,
                                        const hookrelay::v1::GetDeletionRequest* request,
                                        hookrelay::v1::Deletion* response) override;
  grpc::ServerUnaryReactor* ListDeletions(grpc::CallbackServerContext* context,
                                          const hookrelay::v1::ListDeletionsRequest* request,
                                          hookrelay::v1::ListDeletionsResponse* response) override;
  grpc::ServerUnaryReactor* ListAudiences(grpc::CallbackServerContext* context,
                                const hookrelay::v1::ListAudiencesRequest* request,
                                hookrelay::v1::ListAudiencesResponse* response) override;
  grpc::ServerUnaryReactor* GetAudience(grpc::CallbackServerContext* context,
                                const hookrelay::v1::GetAudienceRequest* request,
                                hookrelay::v1::AudienceResource* response) override;
  grpc::ServerUnaryReactor* CreateAudience(grpc::CallbackServerContext* context,
                                const hookrelay::v1::CreateAudienceRequest* request,
                                hookrelay::v1::AudienceResource* response) override;
  grpc::ServerUnaryReactor* DeleteAudience(grpc::CallbackServerContext* context,
                                const hookrelay::v1::DeleteAudienceRequest* request,
                                hookrelay::v1::DeleteResponse* response) override;
  grpc::ServerUnaryReactor* SyncAudience(grpc::CallbackServerContext* context,
                                const hookrelay::v1::SyncAudienceRequest* request,
                                hookrelay::v1::AudienceResource* response) override;

 private:
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context, const Request* request,
                                Response* response,
                                absl::Status (AdminCore::*method)(const std::string&,
                                                                  const Request&, Response*));

  AdminCore& core_;
  const AdminAuth& auth_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_ADMIN_ADMIN_SERVICE_H_
