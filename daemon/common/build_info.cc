#include "daemon/common/build_info.h"

#include "absl/strings/str_cat.h"
#include "fabricmon_git_revision.h"  // generated in the build tree

#ifndef FABRICMON_PROJECT_VERSION
#error "FABRICMON_PROJECT_VERSION must come from CMake (daemon/common/CMakeLists.txt)"
#endif

namespace fabricmon {

absl::string_view ProjectVersion() { return FABRICMON_PROJECT_VERSION; }
absl::string_view GitRevision() { return FABRICMON_GIT_REVISION; }
std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", ProjectVersion(), " (git ", GitRevision(), ")");
}

}  // namespace fabricmon
