#include "tests/testing/thread_names.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"

namespace fabricmon::testing {

std::vector<std::string> ThreadNames() {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) {
      names.push_back(name);
    }
  }
  return names;
}

bool WaitForThreadNamed(const std::string& name, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const std::vector<std::string> names = ThreadNames();
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      return true;
    }
    if (absl::Now() >= deadline) {
      return false;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace fabricmon::testing
