// ReadOperatorFile and PortFile: regular files only, a limit that refuses instead of cutting, and
// messages naming the file and the problem.

#include "daemon/common/operator_file.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ReadOperatorFileTest, ReadsARegularFileUpToTheLimitExactly) {
  testing::TempTree tree;
  tree.WriteFile("ten", "0123456789");
  absl::StatusOr<std::string> text = ReadOperatorFile(tree.root() + "/ten", 10, "config file");
  FABRICMON_ASSERT_OK(text);
  EXPECT_EQ(*text, "0123456789");
  tree.WriteFile("empty", "");
  text = ReadOperatorFile(tree.root() + "/empty", 10, "config file");
  FABRICMON_ASSERT_OK(text);
  EXPECT_EQ(*text, "");
}

TEST(ReadOperatorFileTest, OneByteOverTheLimitIsRefusedNotCut) {
  testing::TempTree tree;
  tree.WriteFile("eleven", "0123456789A");
  absl::StatusOr<std::string> text = ReadOperatorFile(tree.root() + "/eleven", 10, "topology_file");
  EXPECT_THAT(text, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(text.status().message(), HasSubstr("topology_file \"" + tree.root() +
                                                 "/eleven\" is 11 bytes, the limit is 10"));
}

TEST(ReadOperatorFileTest, AFileWithoutASizeIsReadToTheLimitAndRefusedBeyond) {
  // procfs reports size 0: what is read decides.
  absl::StatusOr<std::string> whole = ReadOperatorFile("/proc/self/status", 1 << 20, "config file");
  FABRICMON_ASSERT_OK(whole);
  EXPECT_THAT(*whole, HasSubstr("Pid:"));
  absl::StatusOr<std::string> cut = ReadOperatorFile("/proc/self/status", 16, "config file");
  EXPECT_THAT(cut, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(cut.status().message(),
              HasSubstr("config file \"/proc/self/status\" holds more than 16 bytes"));
}

TEST(ReadOperatorFileTest, DirectoriesFifosSocketsAndDevicesAreRefusedByKind) {
  testing::TempTree tree;
  const std::string fifo = tree.root() + "/pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // A FIFO without a writer: a blocking open would never return.
  EXPECT_THAT(
      ReadOperatorFile(fifo, 1 << 20, "tls cert_file").status().message(),
      HasSubstr("tls cert_file \"" + fifo + "\" is a FIFO (named pipe), not a regular file"));
  EXPECT_THAT(ReadOperatorFile(tree.root(), 1 << 20, "config file").status().message(),
              HasSubstr("config file \"" + tree.root() + "\" is a directory, not a regular file"));
  // An endless file is refused before a byte is read.
  absl::StatusOr<std::string> zero = ReadOperatorFile("/dev/zero", 1 << 20, "config file");
  EXPECT_THAT(zero, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(zero.status().message(),
              HasSubstr("\"/dev/zero\" is a character device, not a regular file"));

  const std::string socket_path = tree.root() + "/sock";
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(address.sun_path));
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  absl::StatusOr<std::string> socket_read = ReadOperatorFile(socket_path, 1 << 20, "key_file");
  close(fd);
  EXPECT_THAT(socket_read.status().message(), HasSubstr("is a socket, not a regular file"));
}

TEST(ReadOperatorFileTest, MissingFileKeepsErrnoMeaningAndNamesIt) {
  testing::TempTree tree;
  absl::StatusOr<std::string> text = ReadOperatorFile(tree.root() + "/nope", 10, "link_list_file");
  EXPECT_THAT(text, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(text.status().message(), HasSubstr("link_list_file \"" + tree.root() + "/nope\""));
}

TEST(PortFileTest, CommitWritesThePortWholeAndLeavesNoTemporary) {
  testing::TempTree tree;
  const std::string path = tree.root() + "/port";
  absl::StatusOr<PortFile> file = PortFile::Prepare(path);
  FABRICMON_ASSERT_OK(file);
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "nothing at the path before the port is known";
  FABRICMON_ASSERT_OK(file->Commit(7470));
  EXPECT_EQ(Slurp(path), "7470\n");
  EXPECT_NE(access((path + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
}

TEST(PortFileTest, AnAbandonedPortFileLeavesNothingBehind) {
  testing::TempTree tree;
  const std::string path = tree.root() + "/port";
  {
    absl::StatusOr<PortFile> file = PortFile::Prepare(path);
    FABRICMON_ASSERT_OK(file);
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_NE(access((path + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
}

TEST(PortFileTest, UnwritablePathsFailAtPrepareNamingThem) {
  testing::TempTree tree;
  const std::string in_missing_dir = tree.root() + "/no-such-dir/port";
  absl::StatusOr<PortFile> missing = PortFile::Prepare(in_missing_dir);
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(missing.status().message(), HasSubstr("port_file \"" + in_missing_dir + "\""));
  // Under a regular file (ENOTDIR): unwritable even for root.
  tree.WriteFile("plain", "x");
  EXPECT_FALSE(PortFile::Prepare(tree.root() + "/plain/port").ok());
  absl::StatusOr<PortFile> directory = PortFile::Prepare(tree.root());
  EXPECT_THAT(directory, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(directory.status().message(), HasSubstr("is a directory, not a regular file"));
}

}  // namespace
}  // namespace fabricmon
