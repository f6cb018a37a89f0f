// journald priorities: with stderr connected to the journal (JOURNAL_STREAM names it), every
// line starts with the sd-daemon(3) prefix; otherwise the lines are unchanged.

#include "daemon/common/logging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricmon {
namespace {

using ::testing::MatchesRegex;

// What FABRICMON_LOG wrote to stderr while `log` ran.
template <typename F>
std::string CaptureStderr(F log) {
  char path[] = "/tmp/fabricmon-logging-test-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  log();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string text;
  char buffer[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) {
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  unlink(path);
  return text;
}

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override { SetMinLogLevel(LogLevel::kDebug); }
  void TearDown() override {
    SetJournalPrefixesForTest(false);
    SetMinLogLevel(LogLevel::kInfo);
  }
};

TEST_F(LoggingTest, JournalStreamMustNameTheFileOnTheDescriptor) {
  char path[] = "/tmp/fabricmon-journal-stream-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  const std::string right = absl::StrCat(st.st_dev, ":", st.st_ino);
  EXPECT_TRUE(IsJournalStream(right.c_str(), fd));
  EXPECT_FALSE(IsJournalStream(nullptr, fd));
  EXPECT_FALSE(IsJournalStream("", fd));
  EXPECT_FALSE(IsJournalStream(absl::StrCat(st.st_dev, ":", st.st_ino + 1).c_str(), fd));
  EXPECT_FALSE(IsJournalStream(absl::StrCat(st.st_dev + 1, ":", st.st_ino).c_str(), fd));
  EXPECT_FALSE(IsJournalStream(absl::StrCat(right, ":1").c_str(), fd));
  EXPECT_FALSE(IsJournalStream("8:abc", fd));
  EXPECT_FALSE(IsJournalStream(right.c_str(), -1));  // fstat fails: no prefixes
  close(fd);
  unlink(path);
}

TEST_F(LoggingTest, PrioritiesFollowSdDaemon) {
  EXPECT_EQ(SyslogPriority(LogLevel::kDebug), 7);
  EXPECT_EQ(SyslogPriority(LogLevel::kInfo), 6);
  EXPECT_EQ(SyslogPriority(LogLevel::kWarning), 4);
  EXPECT_EQ(SyslogPriority(LogLevel::kError), 3);
  EXPECT_EQ(SyslogPriority(LogLevel::kFatal), 2);
}

TEST_F(LoggingTest, EveryLineStartsWithItsPriorityUnderTheJournal) {
  SetJournalPrefixesForTest(true);
  EXPECT_EQ(JournalPrefix(LogLevel::kWarning), "<4>");
  const std::string text = CaptureStderr([] {
    FABRICMON_LOG(Debug) << "d";
    FABRICMON_LOG(Info) << "i";
    FABRICMON_LOG(Warning) << "w";
    FABRICMON_LOG(Error) << "first\nsecond";
  });
  EXPECT_THAT(text, MatchesRegex("<7>D logging_test.cc:[0-9]+\\] d\n"
                                 "<6>I logging_test.cc:[0-9]+\\] i\n"
                                 "<4>W logging_test.cc:[0-9]+\\] w\n"
                                 "<3>E logging_test.cc:[0-9]+\\] first\n"
                                 "<3>second\n"));
}

TEST_F(LoggingTest, LinesAreUnchangedWithoutTheJournal) {
  SetJournalPrefixesForTest(false);
  EXPECT_EQ(JournalPrefix(LogLevel::kError), "");
  const std::string text = CaptureStderr([] {
    FABRICMON_LOG(Warning) << "w";
    FABRICMON_LOG(Error) << "first\nsecond";
  });
  EXPECT_THAT(text, MatchesRegex("W logging_test.cc:[0-9]+\\] w\n"
                                 "E logging_test.cc:[0-9]+\\] first\nsecond\n"));
}

}  // namespace
}  // namespace fabricmon
