#include "tests/testing/loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/common/status.h"

namespace fabricmon::testing {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (fd >= 0) {
      close(fd);
    }
    return 0;
  }
  close(fd);
  return ntohs(address.sin_port);
}

absl::StatusOr<HttpResponse> HttpFetch(int port, absl::string_view path,
                                       const std::vector<std::string>& request_headers,
                                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return ErrnoToStatus(errno, "socket");
  }
  // Bounds connect() and send() too; poll() below bounds the whole read.
  const int64_t timeout_us = absl::ToInt64Microseconds(timeout);
  timeval limit{static_cast<time_t>(timeout_us / 1000000),
                static_cast<suseconds_t>(timeout_us % 1000000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect 127.0.0.1:", port, ": ", std::strerror(error)));
  }
  // HTTP/1.0: the server closes after the response, so reading to EOF reads it all.
  std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
  for (const std::string& header : request_headers) {
    absl::StrAppend(&request, header, "\r\n");
  }
  request.append("\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      const int error = errno;
      close(fd);
      return ErrnoToStatus(error, "send");
    }
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) != 1) {
      close(fd);
      return absl::DeadlineExceededError(
          absl::StrCat("GET ", path, " from port ", port, ": no complete response in time"));
    }
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      const int error = errno;
      close(fd);
      return ErrnoToStatus(error, "recv");
    }
    if (n == 0) {
      break;
    }
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  const size_t end_of_headers = response.find("\r\n\r\n");
  if (!absl::StartsWith(response, "HTTP/1.") || end_of_headers == std::string::npos) {
    return absl::InternalError(
        absl::StrCat("no HTTP response from port ", port, ": ", response.substr(0, 200)));
  }
  const size_t end_of_status = response.find("\r\n");
  HttpResponse parsed;
  const std::vector<absl::string_view> status_words =
      absl::StrSplit(absl::string_view(response).substr(0, end_of_status), ' ');
  if (status_words.size() < 2 || !absl::SimpleAtoi(status_words[1], &parsed.status)) {
    return absl::InternalError(absl::StrCat("bad HTTP status line from port ", port, ": ",
                                            response.substr(0, end_of_status)));
  }
  parsed.headers = response.substr(end_of_status + 2, end_of_headers + 2 - (end_of_status + 2));
  parsed.body = response.substr(end_of_headers + 4);
  return parsed;
}

absl::StatusOr<std::string> HttpGet(int port, absl::string_view path, absl::Duration timeout) {
  absl::StatusOr<HttpResponse> response = HttpFetch(port, path, {}, timeout);
  if (!response.ok()) {
    return response.status();
  }
  if (response->status != 200) {
    return absl::UnavailableError(absl::StrCat("GET ", path, ": HTTP ", response->status));
  }
  return std::move(response->body);
}

}  // namespace fabricmon::testing
