#include "daemon/aggregator/detector_ticker.h"

#include "absl/time/time.h"
#include "daemon/common/thread_name.h"

namespace fabricmon::aggregator {

void DetectorTicker::Start() {
  thread_ = std::thread([this] {
    NameThisThread("detectors");
    for (;;) {
      engine_.Tick();
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Nanoseconds(engine_.tick_nanos()));
      if (stopping_) {
        return;
      }
    }
  });
}

void DetectorTicker::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

}  // namespace fabricmon::aggregator
