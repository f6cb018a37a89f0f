#include "daemon/common/heap_trimmer.h"

#include <malloc.h>

#include "daemon/common/thread_name.h"

namespace fabricmon {

void HeapTrimmer::Start() {
  if (interval_ <= absl::ZeroDuration() || thread_.joinable()) {
    return;
  }
  thread_ = std::thread([this] {
    NameThisThread("heap_trimmer");
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_)) {
          return;
        }
      }
      TrimNow();  // not under mu_: trims() and Stop() do not wait for it
      absl::MutexLock lock(&mu_);
      ++trims_;
    }
  });
}

void HeapTrimmer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

bool HeapTrimmer::TrimNow() { return malloc_trim(0) != 0; }

uint64_t HeapTrimmer::trims() const {
  absl::MutexLock lock(&mu_);
  return trims_;
}

}  // namespace fabricmon
