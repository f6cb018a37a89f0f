#include "daemon/common/thread_name.h"

#include <fstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/thread_names.h"

namespace fabricmon {
namespace {

using ::testing::Contains;
using ::testing::Not;

// Names a new thread `name` and returns what the kernel then reports for it.
std::string NameInAThread(const std::string& name) {
  std::string seen;
  std::thread thread([&] {
    NameThisThread(name);
    std::ifstream comm("/proc/thread-self/comm");
    std::getline(comm, seen);
  });
  thread.join();
  return seen;
}

TEST(ThreadNameTest, TheKernelReportsTheName) {
  EXPECT_EQ(NameInAThread("detectors"), "detectors");
  EXPECT_EQ(NameInAThread("a"), "a");
}

// pthread_setname_np refuses a name over 15 bytes (ERANGE) and the thread would keep the process'
// name: it is cut instead, so a long collector name still tells its thread apart.
TEST(ThreadNameTest, ALongNameIsCutToWhatTheKernelKeeps) {
  EXPECT_EQ(NameInAThread("col_a_very_long_collector_name"), "col_a_very_long");
  EXPECT_EQ(NameInAThread(std::string(kThreadNameMax, 'x')), std::string(kThreadNameMax, 'x'));
}

std::string OwnName() {
  std::ifstream comm("/proc/thread-self/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

TEST(ThreadNameTest, NamesOnlyTheCallingThread) {
  const std::string before = OwnName();
  std::thread thread([] { NameThisThread("only_this_one"); });
  thread.join();
  EXPECT_EQ(OwnName(), before);
  EXPECT_THAT(testing::ThreadNames(), Not(Contains("only_this_one")));  // it has exited
}

}  // namespace
}  // namespace fabricmon
