#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace fabricmon::testing {

// Absolute path of a file or directory under ../shared/fixtures (real captures; see its
// PROVENANCE.md). FABRICMON_SHARED_FIXTURES in the environment overrides the compiled-in path.
std::string SharedFixture(absl::string_view relative);

// Directory of this repository's source tree (for tests/fixtures, deploy/, dashboards/).
std::string SourcePath(absl::string_view relative);

// Directory of the build tree (for built binaries such as fabricmon-agent).
std::string BuildPath(absl::string_view relative);

}  // namespace fabricmon::testing
