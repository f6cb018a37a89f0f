#pragma once

// What a binary was built from: the project version (CMake's project(VERSION)) and the git
// revision captured at build time (cmake/git_revision.cmake). Thread-safe, constant.

#include <string>

#include "absl/strings/string_view.h"

namespace fabricmon {

// "0.1.0": the version in the top-level CMakeLists.txt.
absl::string_view ProjectVersion();
// "1a2b3c4", "1a2b3c4-dirty" (tracked files changed), or "unknown" (no git checkout: a tarball).
absl::string_view GitRevision();
// The --version line: "<program> <version> (git <revision>)".
std::string VersionLine(absl::string_view program);

}  // namespace fabricmon
