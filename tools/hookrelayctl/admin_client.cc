#include "tools/hookrelayctl/admin_client.h"

#include <curl/curl.h>
#include <google/protobuf/util/json_util.h>
#include <simdjson.h>

#include <mutex>

#include "absl/strings/str_cat.h"

namespace hookrelay::hookrelayctl {
namespace {

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

void ParseError(const std::string& body, ApiError* error) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body).get(doc) != simdjson::SUCCESS) {
    error->message = body.substr(0, 200);
    return;
  }
  simdjson::dom::element e;
  if (doc["error"].get(e) != simdjson::SUCCESS) return;
  std::string_view s;
  if (e["code"].get_string().get(s) == simdjson::SUCCESS) error->code = std::string(s);
  if (e["message"].get_string().get(s) == simdjson::SUCCESS) error->message = std::string(s);
  simdjson::dom::array list;
  if (e["fieldViolations"].get_array().get(list) == simdjson::SUCCESS) {
    for (simdjson::dom::element v : list) {
      std::string_view field, description;
      if (v["field"].get_string().get(field) != simdjson::SUCCESS) field = "";
      if (v["description"].get_string().get(description) != simdjson::SUCCESS) description = "";
      error->violations.emplace_back(std::string(field), std::string(description));
    }
  }
}

}  // namespace

std::string UrlEncode(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

AdminClient::AdminClient(std::string base_url, std::string token, absl::Duration timeout)
    : base_url_(std::move(base_url)), token_(std::move(token)), timeout_(timeout) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool AdminClient::Call(const std::string& method, const std::string& path,
                       const google::protobuf::Message* body, google::protobuf::Message* response,
                       ApiError* error, const std::string& raw_body) const {
  std::string request_body = raw_body;
  if (body != nullptr) {
    google::protobuf::util::JsonPrintOptions options;
    (void)google::protobuf::util::MessageToJsonString(*body, &request_body, options);
  }
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    error->message = "cannot initialise libcurl";
    return false;
  }
  std::string answer;
  const std::string url = base_url_ + path;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  if (!token_.empty()) {
    headers = curl_slist_append(headers, absl::StrCat("Authorization: Bearer ", token_).c_str());
  }
  if (!request_body.empty()) headers = curl_slist_append(headers, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(absl::ToInt64Milliseconds(timeout_)));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROXY, "");  // never through a proxy: the admin API is local
  if (!request_body.empty() || method == "POST" || method == "PATCH") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request_body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(request_body.size()));
  }
  const CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) {
    error->http_status = 0;
    error->code = "UNAVAILABLE";
    error->message = absl::StrCat("cannot reach ", base_url_, ": ", curl_easy_strerror(rc));
    return false;
  }
  if (status < 200 || status > 299) {
    error->http_status = static_cast<int>(status);
    ParseError(answer, error);
    if (error->code.empty()) error->code = absl::StrCat("HTTP ", status);
    return false;
  }
  if (response != nullptr) {
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;  // a newer server may add fields
    const auto st = google::protobuf::util::JsonStringToMessage(answer, response, options);
    if (!st.ok()) {
      error->code = "INTERNAL";
      error->message = absl::StrCat("unreadable answer from ", base_url_, ": ",
                                    std::string(st.message()));
      return false;
    }
  }
  return true;
}

}  // namespace hookrelay::hookrelayctl
