#pragma once

// TCP on 127.0.0.1 for tests that run daemons as processes: a port to give them, and the HTTP GET
// a Prometheus scraper would make of their /metrics.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace fabricmon::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read back, released; the
// caller retries on another if it is taken meanwhile). 0 on failure.
int FreePort();

// GET http://127.0.0.1:<port><path> (HTTP/1.0, read to EOF): the body on HTTP 200. Unavailable
// when nothing listens or the status is not 200, DeadlineExceeded after `timeout` in all (a hung
// server fails the test instead of hanging it), Internal for anything that is not HTTP.
absl::StatusOr<std::string> HttpGet(int port, absl::string_view path,
                                    absl::Duration timeout = absl::Seconds(10));

// The same GET with extra request header lines ("Accept-Encoding: gzip"), whatever the status:
// the status code, the response's header block (without the status line) and the raw body.
struct HttpResponse {
  int status = 0;
  std::string headers;
  std::string body;
};
absl::StatusOr<HttpResponse> HttpFetch(int port, absl::string_view path,
                                       const std::vector<std::string>& request_headers = {},
                                       absl::Duration timeout = absl::Seconds(10));

}  // namespace fabricmon::testing
