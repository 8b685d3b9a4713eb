#include "collector/admin/admin_http.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "collector/api/admin_errors.h"
#include "common/audience_rule_json.h"
#include "common/http_listener.h"
#include "common/json_writer.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/strings.h"

namespace hookrelay::collector {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr size_t kMaxBody = 1 << 20;
constexpr char kJson[] = "application/json";
constexpr char kConsoleCsp[] =
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

struct Reply {
  int status = 200;
  std::string content_type = kJson;
  std::string body;
  std::string allow;  // for 405
  bool console = false;
};

std::string CodeName(absl::StatusCode code) {
  return absl::StatusCodeToString(code);
}

Reply ErrorReply(const absl::Status& status) {
  Reply r;
  r.status = HttpStatusFor(status.code());
  std::string list = "[";
  for (const FieldViolation& v : Violations(status)) {
    if (list.size() > 1) list.push_back(',');
    common::JsonObjectWriter item(&list);
    item.String("field", v.field);
    item.String("description", v.description);
    item.Close();
  }
  list.push_back(']');
  std::string error;
  common::JsonObjectWriter e(&error);
  e.String("code", CodeName(status.code()));
  e.String("message", std::string(status.message()));
  e.Raw("fieldViolations", list);
  e.Close();
  common::JsonObjectWriter w(&r.body);
  w.Raw("error", error);
  w.Close();
  return r;
}


template <typename Message>
absl::Status ParseBody(const std::string& body, Message* message) {
  if (absl::StripAsciiWhitespace(body).empty()) return absl::OkStatus();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto st = google::protobuf::util::JsonStringToMessage(body, message, options);
  if (!st.ok()) return InvalidField("body", absl::StrCat("not a valid request: ", std::string(st.message())));
  return absl::OkStatus();
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

// "sharedSecret" → "shared_secret".
std::string SnakeCase(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (absl::ascii_isupper(static_cast<unsigned char>(c))) {
      out.push_back('_');
      out.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// The top-level keys of a JSON object body, as proto field names: a PATCH's update mask.
absl::StatusOr<std::vector<std::string>> TopLevelFields(const std::string& body) {
  google::protobuf::Struct object;
  google::protobuf::util::JsonParseOptions options;
  const auto st = google::protobuf::util::JsonStringToMessage(
      absl::StripAsciiWhitespace(body).empty() ? "{}" : body, &object, options);
  if (!st.ok()) {
    return InvalidField("body", absl::StrCat("not a JSON object: ", std::string(st.message())));
  }
  std::vector<std::string> fields;
  for (const auto& [key, value] : object.fields()) fields.push_back(SnakeCase(key));
  std::sort(fields.begin(), fields.end());
  return fields;
}

// %XX decoding; `plus_is_space` for query strings (form encoding).
std::string PercentDecode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    int v = 0;
    if (in[i] == '%' && i + 2 < in.size() &&
        absl::SimpleHexAtoi(absl::string_view(in.data() + i + 1, 2), &v)) {
      out.push_back(static_cast<char>(v));
      i += 2;
    } else if (plus_is_space && in[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

using Query = std::map<std::string, std::string>;

Query ParseQuery(std::string_view query) {
  Query out;
  for (absl::string_view pair : absl::StrSplit(common::ToAbsl(query), '&', absl::SkipEmpty())) {
    const size_t eq = pair.find('=');
    std::string key = PercentDecode(common::ToStd(pair.substr(0, eq)), true);
    std::string value =
        eq == absl::string_view::npos ? "" : PercentDecode(common::ToStd(pair.substr(eq + 1)), true);
    // page_size and pageSize alike.
    out[SnakeCase(key)] = std::move(value);
  }
  return out;
}

absl::Status QueryInt(const Query& q, const std::string& name, int32_t* out) {
  auto it = q.find(name);
  if (it == q.end() || it->second.empty()) return absl::OkStatus();
  if (!absl::SimpleAtoi(it->second, out)) {
    return InvalidField(name == "page_size" ? "pageSize" : name, "not an integer");
  }
  return absl::OkStatus();
}

// `name=true` / `name=false` (also 1 / 0); absent or empty leaves *out as it is.
absl::Status QueryBool(const Query& q, const std::string& name, const std::string& field,
                       bool* out) {
  auto it = q.find(name);
  if (it == q.end() || it->second.empty()) return absl::OkStatus();
  if (it->second == "true" || it->second == "1") {
    *out = true;
  } else if (it->second == "false" || it->second == "0") {
    *out = false;
  } else {
    return InvalidField(field, "must be true or false");
  }
  return absl::OkStatus();
}

absl::Status QueryTime(const Query& q, const std::string& name,
                       google::protobuf::Timestamp* out, bool* set) {
  auto it = q.find(name);
  *set = false;
  if (it == q.end() || it->second.empty()) return absl::OkStatus();
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, it->second, &t, &error)) {
    return InvalidField(name, absl::StrCat("\"", it->second,
                                      "\" is not an RFC 3339 time such as 2026-05-01T12:00:00Z"));
  }
  common::ToProtoTime(t, out);
  *set = true;
  return absl::OkStatus();
}

std::string PeerString(const tcp::endpoint& endpoint) {
  const net::ip::address a = endpoint.address();
  if (a.is_v6()) return absl::StrCat("ipv6:[", a.to_string(), "]:", endpoint.port());
  return absl::StrCat("ipv4:", a.to_string(), ":", endpoint.port());
}

struct State {
  AdminHttpServer::Options options;
  AdminCore* core;
  const AdminAuth* auth;
};

template <typename Request, typename Response>
Reply Call(AdminCore& core, const std::string& who, const Request& request,
           absl::Status (AdminCore::*method)(const std::string&, const Request&, Response*)) {
  Response response;
  absl::Status st = (core.*method)(who, request, &response);
  if (!st.ok()) return ErrorReply(st);
  Reply r;
  r.body = ToJson(response);
  return r;
}

Reply MethodNotAllowed(std::string allow) {
  Reply r = ErrorReply(absl::Status(absl::StatusCode::kUnimplemented,
                                    absl::StrCat("method not allowed here; use ", allow)));
  r.status = 405;
  r.allow = std::move(allow);
  return r;
}

// Routes /admin/v1/... to the core. `segments` follow "admin", "v1".
Reply Route(State& state, http::verb method, const std::vector<std::string>& segments,
            const Query& query, const std::string& body, const std::string& who) {
  AdminCore& core = *state.core;
  const size_t n = segments.size();
  auto is = [&](size_t i, std::string_view s) { return i < n && segments[i] == s; };
  absl::Status st;

  if (n == 1 && is(0, "catalog")) {
    if (method != http::verb::get) return MethodNotAllowed("GET");
    return Call(core, who, hookrelay::v1::GetCatalogRequest(), &AdminCore::GetCatalog);
  }
  if (is(0, "sources")) {
    if (n == 1) {
      if (method == http::verb::get) {
        hookrelay::v1::ListSourcesRequest req;
        int32_t size = 0;
        if (!(st = QueryInt(query, "page_size", &size)).ok()) return ErrorReply(st);
        req.set_page_size(size);
        if (auto it = query.find("page_token"); it != query.end()) req.set_page_token(it->second);
        return Call(core, who, req, &AdminCore::ListSources);
      }
      if (method == http::verb::post) {
        hookrelay::v1::CreateSourceRequest req;
        if (!(st = ParseBody(body, req.mutable_source())).ok()) return ErrorReply(st);
        return Call(core, who, req, &AdminCore::CreateSource);
      }
      return MethodNotAllowed("GET, POST");
    }
    const std::string& id = segments[1];
    if (n == 2) {
      if (method == http::verb::get) {
        hookrelay::v1::GetSourceRequest req;
        req.set_id(id);
        return Call(core, who, req, &AdminCore::GetSource);
      }
      if (method == http::verb::patch) {
        hookrelay::v1::UpdateSourceRequest req;
        if (!(st = ParseBody(body, req.mutable_source())).ok()) return ErrorReply(st);
        absl::StatusOr<std::vector<std::string>> fields = TopLevelFields(body);
        if (!fields.ok()) return ErrorReply(fields.status());
        if (!req.source().id().empty() && req.source().id() != id) {
          return ErrorReply(InvalidField("id", "differs from the id in the path; ids cannot change"));
        }
        req.mutable_source()->set_id(id);
        for (const std::string& f : *fields) req.mutable_update_mask()->add_paths(f);
        return Call(core, who, req, &AdminCore::UpdateSource);
      }
      if (method == http::verb::delete_) {
        hookrelay::v1::DeleteSourceRequest req;
        req.set_id(id);
        return Call(core, who, req, &AdminCore::DeleteSource);
      }
      return MethodNotAllowed("GET, PATCH, DELETE");
    }
    if (is(2, "write-keys") && n == 3) {
      if (method != http::verb::post) return MethodNotAllowed("POST");
      hookrelay::v1::CreateWriteKeyRequest req;
      req.set_source_id(id);
      return Call(core, who, req, &AdminCore::CreateWriteKey);
    }
    if (is(2, "write-keys") && n == 4) {
      if (method != http::verb::delete_) return MethodNotAllowed("DELETE");
      hookrelay::v1::RevokeWriteKeyRequest req;
      req.set_source_id(id);
      req.set_write_key(segments[3]);
      return Call(core, who, req, &AdminCore::RevokeWriteKey);
    }
  }
  if (is(0, "destinations")) {
    if (n == 1) {
      if (method == http::verb::get) {
        hookrelay::v1::ListDestinationsRequest req;
        int32_t size = 0;
        if (!(st = QueryInt(query, "page_size", &size)).ok()) return ErrorReply(st);
        req.set_page_size(size);
        if (auto it = query.find("page_token"); it != query.end()) req.set_page_token(it->second);
        return Call(core, who, req, &AdminCore::ListDestinations);
      }
      if (method == http::verb::post) {
        hookrelay::v1::CreateDestinationRequest req;
        if (!(st = ParseBody(body, req.mutable_destination())).ok()) return ErrorReply(st);
        return Call(core, who, req, &AdminCore::CreateDestination);
      }
      return MethodNotAllowed("GET, POST");
    }
    std::string id = segments[1];
    if (n == 2 && absl::EndsWith(id, ":rotateSecret")) {
      if (method != http::verb::post) return MethodNotAllowed("POST");
      hookrelay::v1::RotateSecretRequest req;
      if (!(st = ParseBody(body, &req)).ok()) return ErrorReply(st);
      const std::string path_id = id.substr(0, id.size() - std::string_view(":rotateSecret").size());
      if (!req.id().empty() && req.id() != path_id) {
        return ErrorReply(InvalidField("id", "differs from the id in the path"));
      }
      req.set_id(path_id);
      return Call(core, who, req, &AdminCore::RotateSecret);
    }
    if (n == 2 && absl::EndsWith(id, ":test")) {
      if (method != http::verb::post) return MethodNotAllowed("POST");
      hookrelay::v1::TestDestinationRequest req;
      req.set_id(id.substr(0, id.size() - 5));
      return Call(core, who, req, &AdminCore::TestDestination);
    }
    if (n == 2) {
      if (method == http::verb::get) {
        hookrelay::v1::GetDestinationRequest req;
        req.set_id(id);
        return Call(core, who, req, &AdminCore::GetDestination);
      }
      if (method == http::verb::patch) {
        hookrelay::v1::UpdateDestinationRequest req;
        if (!(st = ParseBody(body, req.mutable_destination())).ok()) return ErrorReply(st);
        absl::StatusOr<std::vector<std::string>> fields = TopLevelFields(body);
        if (!fields.ok()) return ErrorReply(fields.status());
        if (!req.destination().id().empty() && req.destination().id() != id) {
          return ErrorReply(InvalidField("id", "differs from the id in the path; ids cannot change"));
        }
        req.mutable_destination()->set_id(id);
        for (const std::string& f : *fields) req.mutable_update_mask()->add_paths(f);
        return Call(core, who, req, &AdminCore::UpdateDestination);
      }
      if (method == http::verb::delete_) {
        hookrelay::v1::DeleteDestinationRequest req;
        req.set_id(id);
        return Call(core, who, req, &AdminCore::DeleteDestination);
      }
      return MethodNotAllowed("GET, PATCH, DELETE");
    }
  }
  if (n == 1 && is(0, "dead-letters")) {
    if (method != http::verb::get) return MethodNotAllowed("GET");
    hookrelay::v1::ListDeadLettersRequest req;
    int32_t size = 0;
    if (!(st = QueryInt(query, "page_size", &size)).ok()) return ErrorReply(st);
    req.set_page_size(size);
    if (auto it = query.find("page_token"); it != query.end()) req.set_page_token(it->second);
    if (auto it = query.find("destination_id"); it != query.end()) {
      req.mutable_filter()->set_destination_id(it->second);
    }
    bool set = false;
    google::protobuf::Timestamp from, to;
    if (!(st = QueryTime(query, "from", &from, &set)).ok()) return ErrorReply(st);
    if (set) *req.mutable_filter()->mutable_from() = from;
    if (!(st = QueryTime(query, "to", &to, &set)).ok()) return ErrorReply(st);
    if (set) *req.mutable_filter()->mutable_to() = to;
    return Call(core, who, req, &AdminCore::ListDeadLetters);
  }
  if (n == 1 && is(0, "dead-letters:replay")) {
    if (method != http::verb::post) return MethodNotAllowed("POST");
    hookrelay::v1::ReplayDeadLettersRequest req;
    if (!(st = ParseBody(body, &req)).ok()) return ErrorReply(st);
    return Call(core, who, req, &AdminCore::ReplayDeadLetters);
  }
  if (is(0, "audiences")) {
    if (n == 1) {
      if (method == http::verb::get) {
        hookrelay::v1::ListAudiencesRequest req;
        int32_t size = 0;
        if (!(st = QueryInt(query, "page_size", &size)).ok()) return ErrorReply(st);
        req.set_page_size(size);
        if (auto it = query.find("page_token"); it != query.end()) req.set_page_token(it->second);
        return Call(core, who, req, &AdminCore::ListAudiences);
      }
      if (method == http::verb::post) {
        hookrelay::v1::CreateAudienceRequest req;
        bool validate_only = false;
        if (!(st = QueryBool(query, "validate_only", "validateOnly", &validate_only)).ok()) {
          return ErrorReply(st);
        }
        req.set_validate_only(validate_only);
        // The rule's shorthand {"all":[...]} / {"any":[...]} is read as match + conditions.
        absl::StatusOr<std::string> audience = common::CanonicalAudienceJson(body);
        if (!audience.ok()) {
          // "<field path>: <problem>", the path naming the rule's key.
          const std::string message(audience.status().message());
          const size_t colon = message.find(": ");
          return ErrorReply(InvalidField(message.substr(0, colon), message.substr(colon + 2)));
        }
        if (!(st = ParseBody(*audience, req.mutable_audience())).ok()) return ErrorReply(st);
        return Call(core, who, req, &AdminCore::CreateAudience);
      }
      return MethodNotAllowed("GET, POST");
    }
    std::string id = segments[1];
    if (n == 2 && absl::EndsWith(id, ":sync")) {
      if (method != http::verb::post) return MethodNotAllowed("POST");
      hookrelay::v1::SyncAudienceRequest req;
      req.set_id(id.substr(0, id.size() - 5));
      return Call(core, who, req, &AdminCore::SyncAudience);
    }
    if (n == 2) {
      if (method == http::verb::get) {
        hookrelay::v1::GetAudienceRequest req;
        req.set_id(id);
        return Call(core, who, req, &AdminCore::GetAudience);
      }
      if (method == http::verb::delete_) {
        hookrelay::v1::DeleteAudienceRequest req;
        req.set_id(id);
        return Call(core, who, req, &AdminCore::DeleteAudience);
      }
      return MethodNotAllowed("GET, DELETE");
    }
  }
  if (is(0, "deletions")) {
    if (n == 1) {
      if (method == http::verb::get) {
        hookrelay::v1::ListDeletionsRequest req;
        int32_t size = 0;
        if (!(st = QueryInt(query, "page_size", &size)).ok()) return ErrorReply(st);
        req.set_page_size(size);
        if (auto it = query.find("page_token"); it != query.end()) req.set_page_token(it->second);
        return Call(core, who, req, &AdminCore::ListDeletions);
      }
      if (method == http::verb::post) {
        hookrelay::v1::CreateDeletionRequest req;
        if (!(st = ParseBody(body, &req)).ok()) return ErrorReply(st);
        return Call(core, who, req, &AdminCore::CreateDeletion);
      }
      return MethodNotAllowed("GET, POST");
    }
    if (n == 2) {
      if (method != http::verb::get) return MethodNotAllowed("GET");
      hookrelay::v1::GetDeletionRequest req;
      req.set_id(segments[1]);
      return Call(core, who, req, &AdminCore::GetDeletion);
    }
  }
  return ErrorReply(absl::NotFoundError("no such admin resource; see docs/ADMIN_API.md"));
}

// The response for a reply, with the headers every answer of this port carries.
common::HttpResponse ToResponse(Reply reply, bool keep_alive) {
  common::HttpResponse response;
  response.version(11);
  response.keep_alive(keep_alive);
  response.result(static_cast<http::status>(reply.status));
  response.set(http::field::server, "hookrelay");
  response.set(http::field::content_type, reply.content_type);
  response.set("X-Content-Type-Options", "nosniff");
  response.set("X-Frame-Options", "DENY");
  response.set("Referrer-Policy", "no-referrer");
  response.set(http::field::cache_control, reply.console ? "no-cache" : "no-store");
  response.set("Content-Security-Policy", kConsoleCsp);
  if (!reply.allow.empty()) response.set(http::field::allow, reply.allow);
  response.body() = std::move(reply.body);
  return response;
}

Reply Static(const State& state, http::verb method, const std::string& path) {
  if (method != http::verb::get && method != http::verb::head) return MethodNotAllowed("GET");
  const std::string key = path == "/" ? "/index.html" : path;
  auto it = state.options.files.find(key);
  if (it == state.options.files.end()) {
    Reply r;
    r.status = 404;
    r.content_type = "text/plain; charset=utf-8";
    r.body = "not found\n";
    return r;
  }
  Reply r;
  r.content_type = it->second.content_type;
  r.body = it->second.body;
  r.console = true;
  return r;
}

// One request: the console's files, or an admin API call checked, authenticated and routed.
Reply Answer(State& state, const common::HttpRequest& request, const std::string& peer) {
  const std::string_view target(request.target().data(), request.target().size());
  const size_t q = target.find('?');
  const std::string path(target.substr(0, q));
  const Query query = ParseQuery(q == std::string_view::npos ? "" : target.substr(q + 1));
  const http::verb method = request.method();

  if (!absl::StartsWith(path, "/admin/")) return Static(state, method, path);
  // Cross-origin requests from browsers: refused (no CORS).
  if (auto origin = request.find(http::field::origin); origin != request.end()) {
    const std::string host(request[http::field::host]);
    const std::string value(origin->value());
    if (value != absl::StrCat("http://", host) && value != absl::StrCat("https://", host)) {
      return ErrorReply(absl::PermissionDeniedError(
          "cross-origin requests are refused; use the console served here"));
    }
  }
  const std::string& body = request.body();
  if (!absl::StripAsciiWhitespace(body).empty()) {
    const std::string type = absl::AsciiStrToLower(std::string(request[http::field::content_type]));
    if (!absl::StartsWith(type, kJson)) {
      Reply r = ErrorReply(InvalidField("Content-Type", "must be application/json"));
      r.status = 415;
      return r;
    }
  }
  absl::StatusOr<std::string> who =
      state.auth->Check(std::string(request[http::field::authorization]), peer);
  if (!who.ok()) return ErrorReply(who.status());
  std::vector<std::string> segments;
  for (absl::string_view s : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    segments.push_back(PercentDecode(common::ToStd(s), false));
  }
  // "admin", "v1", ...
  if (segments.size() < 3 || segments[0] != "admin" || segments[1] != "v1") {
    return ErrorReply(absl::NotFoundError("no such admin resource; see docs/ADMIN_API.md"));
  }
  segments.erase(segments.begin(), segments.begin() + 2);
  return Route(state, method, segments, query, body, *who);
}

}  // namespace

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

struct AdminHttpServer::Impl {
  // Last: its connections use the state until it is shut down.
  State state;
  std::unique_ptr<common::HttpListener> listener;
};

AdminHttpServer::AdminHttpServer(Options options, AdminCore& core, const AdminAuth& auth)
    : impl_(std::make_unique<Impl>()) {
  impl_->state.options = std::move(options);
  impl_->state.core = &core;
  impl_->state.auth = &auth;
  common::HttpListener::Options listener;
  listener.address = impl_->state.options.address;
  listener.address_name = "admin HTTP address";
  listener.threads = std::max(1, impl_->state.options.threads);
  listener.body_limit = kMaxBody;
  common::HttpListener::Handlers handlers;
  State* state = &impl_->state;
  handlers.request = [state](common::HttpRequest request, const tcp::endpoint& peer,
                             common::HttpResponder responder) {
    const bool keep_alive = request.keep_alive();
    std::move(responder).Respond(ToResponse(Answer(*state, request, PeerString(peer)), keep_alive));
  };
  handlers.read_error = [](beast::error_code ec) -> std::optional<common::HttpResponse> {
    if (ec != http::error::body_limit) return std::nullopt;
    Reply r = ErrorReply(InvalidField("body", absl::StrCat("larger than ", kMaxBody, " bytes")));
    r.status = 413;
    return ToResponse(std::move(r), false);
  };
  impl_->listener = std::make_unique<common::HttpListener>(std::move(listener), std::move(handlers));
}

AdminHttpServer::~AdminHttpServer() { Shutdown(); }

absl::Status AdminHttpServer::Start() { return impl_->listener->Start(); }

int AdminHttpServer::port() const { return impl_->listener->port(); }

void AdminHttpServer::Shutdown() { impl_->listener->Shutdown(); }

}  // namespace hookrelay::collector
