#include "tests/testing/temp_tree.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "daemon/common/file_reader.h"
#include "daemon/common/logging.h"

namespace fabricmon::testing {

namespace fs = std::filesystem;

TempTree::TempTree() {
  std::string pattern = (fs::temp_directory_path() / "fabricmon-test-XXXXXX").string();
  FABRICMON_CHECK(mkdtemp(pattern.data()) != nullptr);
  root_ = pattern;
}

TempTree::~TempTree() {
  std::error_code ec;
  fs::permissions(root_, fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(root_, ec);
}

void TempTree::WriteFile(absl::string_view relative, absl::string_view content) const {
  const fs::path path = JoinPath(root_, relative);
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  FABRICMON_CHECK(out.good()) << path;
}

void TempTree::Symlink(absl::string_view relative, absl::string_view target) const {
  const fs::path path = JoinPath(root_, relative);
  fs::create_directories(path.parent_path());
  fs::create_symlink(std::string(target), path);
}

void TempTree::MakeDir(absl::string_view relative) const {
  fs::create_directories(JoinPath(root_, relative));
}

void TempTree::Remove(absl::string_view relative) const {
  std::error_code ec;
  fs::remove_all(JoinPath(root_, relative), ec);
}

void TempTree::CopyTree(const std::string& from, absl::string_view relative) const {
  const fs::path to = JoinPath(root_, relative);
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  // Fixture files are read-only; tests modify their copies.
  for (const auto& entry : fs::recursive_directory_iterator(to)) {
    std::error_code ec;
    fs::permissions(entry.path(), fs::perms::owner_write, fs::perm_options::add, ec);
  }
}

}  // namespace fabricmon::testing
