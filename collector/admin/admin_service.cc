#include "collector/admin/admin_service.h"

#include <string>

#include "collector/api/admin_errors.h"

namespace hookrelay::collector {

template <typename Request, typename Response>
grpc::ServerUnaryReactor* AdminService::Run(
    grpc::CallbackServerContext* context, const Request* request, Response* response,
    absl::Status (AdminCore::*method)(const std::string&, const Request&, Response*)) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const auto& metadata = context->client_metadata();
  const auto it = metadata.find("authorization");
  const absl::string_view authorization =
      it == metadata.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size());
  absl::StatusOr<std::string> who = auth_.Check(authorization, context->peer());
  if (!who.ok()) {
    reactor->Finish(ToGrpcWithDetails(who.status()));
    return reactor;
  }
  reactor->Finish(ToGrpcWithDetails((core_.*method)(*who, *request, response)));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetCatalog(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::GetCatalogRequest* request,
                                                 hookrelay::v1::Catalog* response) {
  return Run(context, request, response, &AdminCore::GetCatalog);
}

grpc::ServerUnaryReactor* AdminService::ListSources(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::ListSourcesRequest* request,
                                                 hookrelay::v1::ListSourcesResponse* response) {
  return Run(context, request, response, &AdminCore::ListSources);
}

grpc::ServerUnaryReactor* AdminService::GetSource(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::GetSourceRequest* request,
                                                 hookrelay::v1::SourceResource* response) {
  return Run(context, request, response, &AdminCore::GetSource);
}

grpc::ServerUnaryReactor* AdminService::CreateSource(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::CreateSourceRequest* request,
                                                 hookrelay::v1::SourceResource* response) {
  return Run(context, request, response, &AdminCore::CreateSource);
}

grpc::ServerUnaryReactor* AdminService::UpdateSource(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::UpdateSourceRequest* request,
                                                 hookrelay::v1::SourceResource* response) {
  return Run(context, request, response, &AdminCore::UpdateSource);
}

grpc::ServerUnaryReactor* AdminService::DeleteSource(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::DeleteSourceRequest* request,
                                                 hookrelay::v1::DeleteResponse* response) {
  return Run(context, request, response, &AdminCore::DeleteSource);
}

grpc::ServerUnaryReactor* AdminService::CreateWriteKey(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::CreateWriteKeyRequest* request,
                                                 hookrelay::v1::CreateWriteKeyResponse* response) {
  return Run(context, request, response, &AdminCore::CreateWriteKey);
}

grpc::ServerUnaryReactor* AdminService::RevokeWriteKey(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::RevokeWriteKeyRequest* request,
                                                 hookrelay::v1::SourceResource* response) {
  return Run(context, request, response, &AdminCore::RevokeWriteKey);
}

grpc::ServerUnaryReactor* AdminService::ListDestinations(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::ListDestinationsRequest* request,
                                                 hookrelay::v1::ListDestinationsResponse* response) {
  return Run(context, request, response, &AdminCore::ListDestinations);
}

grpc::ServerUnaryReactor* AdminService::GetDestination(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::GetDestinationRequest* request,
                                                 hookrelay::v1::DestinationResource* response) {
  return Run(context, request, response, &AdminCore::GetDestination);
}

grpc::ServerUnaryReactor* AdminService::CreateDestination(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::CreateDestinationRequest* request,
                                                 hookrelay::v1::DestinationResource* response) {
  return Run(context, request, response, &AdminCore::CreateDestination);
}

grpc::ServerUnaryReactor* AdminService::UpdateDestination(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::UpdateDestinationRequest* request,
                                                 hookrelay::v1::DestinationResource* response) {
  return Run(context, request, response, &AdminCore::UpdateDestination);
}

grpc::ServerUnaryReactor* AdminService::DeleteDestination(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::DeleteDestinationRequest* request,
                                                 hookrelay::v1::DeleteResponse* response) {
  return Run(context, request, response, &AdminCore::DeleteDestination);
}

grpc::ServerUnaryReactor* AdminService::TestDestination(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::TestDestinationRequest* request,
                                                 hookrelay::v1::TestDestinationResponse* response) {
  return Run(context, request, response, &AdminCore::TestDestination);
}

grpc::ServerUnaryReactor* AdminService::RotateSecret(grpc::CallbackServerContext* context,
                                                     const hookrelay::v1::RotateSecretRequest* request,
                                                     hookrelay::v1::DestinationResource* response) {
  return Run(context, request, response, &AdminCore::RotateSecret);
}

grpc::ServerUnaryReactor* AdminService::ListDeadLetters(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::ListDeadLettersRequest* request,
                                                 hookrelay::v1::ListDeadLettersResponse* response) {
  return Run(context, request, response, &AdminCore::ListDeadLetters);
}

grpc::ServerUnaryReactor* AdminService::ReplayDeadLetters(grpc::CallbackServerContext* context,
                                                 const hookrelay::v1::ReplayDeadLettersRequest* request,
                                                 hookrelay::v1::ReplayDeadLettersResponse* response) {
  return Run(context, request, response, &AdminCore::ReplayDeadLetters);
}

grpc::ServerUnaryReactor* AdminService::CreateDeletion(
    grpc::CallbackServerContext* context, const hookrelay::v1::CreateDeletionRequest* request,
    hookrelay::v1::Deletion* response) {
  return Run(context, request, response, &AdminCore::CreateDeletion);
}

grpc::ServerUnaryReactor* AdminService::GetDeletion(
    grpc::CallbackServerContext* context, const hookrelay::v1::GetDeletionRequest* request,
    hookrelay::v1::Deletion* response) {
  return Run(context, request, response, &AdminCore::GetDeletion);
}

grpc::ServerUnaryReactor* AdminService::ListDeletions(
    grpc::CallbackServerContext* context, const hookrelay::v1::ListDeletionsRequest* request,
    hookrelay::v1::ListDeletionsResponse* response) {
  return Run(context, request, response, &AdminCore::ListDeletions);
}

grpc::ServerUnaryReactor* AdminService::ListAudiences(grpc::CallbackServerContext* context,
                                             const hookrelay::v1::ListAudiencesRequest* request,
                                             hookrelay::v1::ListAudiencesResponse* response) {
  return Run(context, request, response, &AdminCore::ListAudiences);
}

grpc::ServerUnaryReactor* AdminService::GetAudience(grpc::CallbackServerContext* context,
                                             const hookrelay::v1::GetAudienceRequest* request,
                                             hookrelay::v1::AudienceResource* response) {
  return Run(context, request, response, &AdminCore::GetAudience);
}

grpc::ServerUnaryReactor* AdminService::CreateAudience(grpc::CallbackServerContext* context,
                                             const hookrelay::v1::CreateAudienceRequest* request,
                                             hookrelay::v1::AudienceResource* response) {
  return Run(context, request, response, &AdminCore::CreateAudience);
}

grpc::ServerUnaryReactor* AdminService::DeleteAudience(grpc::CallbackServerContext* context,
                                             const hookrelay::v1::DeleteAudienceRequest* request,
                                             hookrelay::v1::DeleteResponse* response) {
  return Run(context, request, response, &AdminCore::DeleteAudience);
}

grpc::ServerUnaryReactor* AdminService::SyncAudience(grpc::CallbackServerContext* context,
                                             const hookrelay::v1::SyncAudienceRequest* request,
                                             hookrelay::v1::AudienceResource* response) {
  return Run(context, request, response, &AdminCore::SyncAudience);
}

}  // namespace hookrelay::collector
