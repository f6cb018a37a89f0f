#pragma once

// A remote_write Sender that keeps every request body it is given and answers 200: what a
// receiver got, for tests to decode. Thread-safe (an endpoint's shard threads send); the bodies
// and their lock are the test's.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/remote_write/sender.h"

namespace fabricmon::testing {

class CapturingSender final : public remote_write::Sender {
 public:
  CapturingSender(std::vector<std::string>& bodies, absl::Mutex& mu) : bodies_(bodies), mu_(mu) {}
  remote_write::SendResult Send(const std::string& body, int64_t) override {
    absl::MutexLock lock(&mu_);
    bodies_.push_back(body);
    return {200, ""};
  }

 private:
  std::vector<std::string>& bodies_;
  absl::Mutex& mu_;
};

}  // namespace fabricmon::testing
