#pragma once

// A scratch directory tree for tests that build small sysfs/procfs layouts by hand. Removed on
// destruction.

#include <string>

#include "absl/strings/string_view.h"

namespace fabricmon::testing {

class TempTree {
 public:
  TempTree();
  ~TempTree();
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  const std::string& root() const { return root_; }
  // Writes `content` to root/relative, creating parent directories.
  void WriteFile(absl::string_view relative, absl::string_view content) const;
  // Creates root/relative → target symlink (parents created).
  void Symlink(absl::string_view relative, absl::string_view target) const;
  void MakeDir(absl::string_view relative) const;
  void Remove(absl::string_view relative) const;  // file or whole directory
  // Copies a whole directory tree into root/relative.
  void CopyTree(const std::string& from, absl::string_view relative) const;

 private:
  std::string root_;
};

}  // namespace fabricmon::testing
