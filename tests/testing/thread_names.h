#pragma once

// The names of this process' threads, as `top -H` and /proc/PID/task/*/comm show them.

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace fabricmon::testing {

// Every thread's name now (one entry per thread; a thread that exits meanwhile may be missing).
std::vector<std::string> ThreadNames();

// Whether a thread named `name` runs within `timeout` (a thread names itself once it starts, so a
// test that just started one waits for it).
bool WaitForThreadNamed(const std::string& name, absl::Duration timeout);

}  // namespace fabricmon::testing
