#include "daemon/remote_write/curl_sender.h"

#include <curl/curl.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fabricmon::remote_write {
namespace {

// Of a response body only this much is kept: enough for a receiver's error message.
constexpr size_t kMaxKeptResponseBytes = 512;

size_t KeepStart(char* data, size_t size, size_t count, void* user) {
  auto* kept = static_cast<std::string*>(user);
  const size_t bytes = size * count;
  if (kept->size() < kMaxKeptResponseBytes) {
    kept->append(data, std::min(bytes, kMaxKeptResponseBytes - kept->size()));
  }
  return bytes;  // the rest is read and dropped, so the connection stays usable
}

}  // namespace

absl::StatusOr<std::unique_ptr<CurlSender>> CurlSender::Create(const HttpOptions& options) {
  // curl_global_init is not thread-safe and must run once before any handle (a function-local
  // static is initialized exactly once, thread-safely).
  static const bool initialized = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!initialized) {
    return absl::InternalError("curl_global_init failed");
  }
  std::unique_ptr<CurlSender> sender(new CurlSender());
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    return absl::InternalError("curl_easy_init failed");
  }
  sender->curl_ = curl;
  sender->fixed_headers_ = {"Content-Encoding: snappy", "Content-Type: application/x-protobuf",
                            "X-Prometheus-Remote-Write-Version: 0.1.0",
                            "Expect:"};  // no 100-continue round trip before each body
  for (const auto& [name, value] : options.headers) {
    sender->fixed_headers_.push_back(absl::StrCat(name, ": ", value));
  }
  sender->bearer_token_ = options.bearer_token;
  if (!sender->UpdateHeaders()) {
    return absl::InternalError("curl_slist_append failed");
  }
  bool set = curl_easy_setopt(curl, CURLOPT_URL, options.url.c_str()) == CURLE_OK;
  set = set && curl_easy_setopt(curl, CURLOPT_POST, 1L) == CURLE_OK;
  // Signals are the daemon's (sigwait in main); curl must not use SIGALRM for timeouts.
  set = set && curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
  set = set && curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &KeepStart) == CURLE_OK;
  set = set && curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sender->response_) == CURLE_OK;
  set = set && curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, sender->error_) == CURLE_OK;
  // Redirects are not followed: a receiver URL that redirects is a misconfiguration, and a
  // redirect would carry the bearer token elsewhere.
  set = set && curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK;
  set = set && curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK;
  if (!options.user_agent.empty()) {
    set = set && curl_easy_setopt(curl, CURLOPT_USERAGENT, options.user_agent.c_str()) == CURLE_OK;
  }
  if (!options.ca_file.empty()) {
    set = set && curl_easy_setopt(curl, CURLOPT_CAINFO, options.ca_file.c_str()) == CURLE_OK;
  }
  if (!options.cert_file.empty()) {
    set = set && curl_easy_setopt(curl, CURLOPT_SSLCERT, options.cert_file.c_str()) == CURLE_OK;
    set = set && curl_easy_setopt(curl, CURLOPT_SSLKEY, options.key_file.c_str()) == CURLE_OK;
  }
  if (!set) {
    return absl::InternalError("libcurl refused an option (built without TLS or HTTP?)");
  }
  return sender;
}

bool CurlSender::UpdateHeaders() {
  std::string token = bearer_token_ != nullptr ? bearer_token_->Current() : std::string();
  if (headers_ != nullptr && token == token_in_headers_) {
    return true;
  }
  curl_slist* headers = nullptr;
  auto add = [&headers](const std::string& line) {
    curl_slist* grown = curl_slist_append(headers, line.c_str());
    if (grown != nullptr) {
      headers = grown;
    }
    return grown != nullptr;
  };
  bool ok = true;
  for (const std::string& line : fixed_headers_) {
    ok = ok && add(line);
  }
  if (!token.empty()) {
    ok = ok && add(absl::StrCat("Authorization: Bearer ", token));
  }
  if (!ok || curl_easy_setopt(static_cast<CURL*>(curl_), CURLOPT_HTTPHEADER, headers) != CURLE_OK) {
    curl_slist_free_all(headers);
    return false;  // the previous list stays set (and owned)
  }
  if (headers_ != nullptr) {
    curl_slist_free_all(static_cast<curl_slist*>(headers_));
  }
  headers_ = headers;
  token_in_headers_ = std::move(token);
  return true;
}

CurlSender::~CurlSender() {
  if (curl_ != nullptr) {
    curl_easy_cleanup(static_cast<CURL*>(curl_));
  }
  if (headers_ != nullptr) {
    curl_slist_free_all(static_cast<curl_slist*>(headers_));
  }
}

SendResult CurlSender::Send(const std::string& body, int64_t timeout_nanos) {
  CURL* curl = static_cast<CURL*>(curl_);
  if (!UpdateHeaders()) {
    SendResult result;
    result.error = "out of memory building the request headers";
    return result;
  }
  response_.clear();
  error_[0] = '\0';
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                   std::max<long>(1, static_cast<long>(timeout_nanos / 1000000)));
  SendResult result;
  const CURLcode code = curl_easy_perform(curl);
  if (code != CURLE_OK) {
    result.error = error_[0] != '\0' ? std::string(error_) : curl_easy_strerror(code);
    return result;
  }
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  result.http_status = static_cast<int>(status);
  if (status < 200 || status >= 300) {
    result.error = response_;
  }
  return result;
}

}  // namespace fabricmon::remote_write
