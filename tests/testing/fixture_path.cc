#include "tests/testing/fixture_path.h"

#include <cstdlib>

#include "daemon/common/file_reader.h"

namespace fabricmon::testing {

std::string SharedFixture(absl::string_view relative) {
  const char* env = std::getenv("FABRICMON_SHARED_FIXTURES");
  return JoinPath(env != nullptr ? env : FABRICMON_SHARED_FIXTURES_DIR, relative);
}

std::string SourcePath(absl::string_view relative) {
  return JoinPath(FABRICMON_SOURCE_DIR, relative);
}

std::string BuildPath(absl::string_view relative) {
  return JoinPath(FABRICMON_BUILD_DIR, relative);
}

}  // namespace fabricmon::testing
