#pragma once

// Names the calling thread, so that `top -H`, `ps -L`, perf and /proc/PID/task/*/comm tell a
// daemon's threads apart (a thread otherwise carries the process' name, and the aggregator's
// detector thread looked like its main thread and its remote_write forwarding).

#include "absl/strings/string_view.h"

namespace fabricmon {

// The kernel keeps at most this many bytes of a thread's name; a longer one is cut to its first
// kThreadNameMax bytes rather than refused (pthread_setname_np fails with ERANGE and would leave
// the process' name).
inline constexpr size_t kThreadNameMax = 15;

// Best effort: a failure leaves the thread's name as it was (naming is never worth an error).
void NameThisThread(absl::string_view name);

}  // namespace fabricmon
