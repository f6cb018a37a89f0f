#pragma once

// Gives the heap's free pages back to the kernel every so often (glibc's malloc_trim(0)).
//
// glibc's free() returns memory to the kernel only from the top of an arena. What a long-lived
// process frees below that stays resident: in the aggregator, the read buffers gRPC sizes for an
// agent's first, large messages (hello and declarations: 64 KiB slices per connection, which
// libgrpc's read-size estimate lets go as later messages stay small) and the transient buffers
// of a reconnect storm or a scrape. At 400 agents x 1 Hz, four minutes in, one malloc_trim(0)
// (called by hand from gdb) took the aggregator from 138 to 116 MB of RSS; the README's "Memory
// allocator" paragraph has the run with this thread. malloc_trim walks each arena's free chunks
// under the arena's lock and madvise()s whole free pages; threads that allocate from that arena
// meanwhile wait for it (0.66 ms of CPU at 260 MB of RSS), so it runs every `interval`, not after
// every free. With another allocator preloaded (jemalloc, tcmalloc) it finds glibc's arenas
// empty and does nothing.
//
// Thread-safe. One thread of its own between Start() and Stop().

#include <cstdint>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fabricmon {

class HeapTrimmer {
 public:
  explicit HeapTrimmer(absl::Duration interval) : interval_(interval) {}
  ~HeapTrimmer() { Stop(); }
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

  // Trims every `interval` (the first one `interval` from now) until Stop(). Call at most once;
  // a non-positive interval starts nothing.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once the thread has exited. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Trims now, on the calling thread: whether any memory went back to the kernel.
  static bool TrimNow();

  // Trims done by the thread so far.
  uint64_t trims() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const absl::Duration interval_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t trims_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace fabricmon
