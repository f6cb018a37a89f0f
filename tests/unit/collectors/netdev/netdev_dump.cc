// netdev_dump: runs the netdev collector once and prints Prometheus text to stdout. A test driver
// for the netns tests: `ip netns exec NS netdev_dump ...` sees the namespace's sysfs (ip netns
// exec remounts /sys for it) and /proc/net (per network namespace of the reader).
//
//   netdev_dump [--sysfs_root=/sys] [--procfs_root=/proc] [--include=RE] [--exclude=RE]
//               [--tcp=true] [--sync_dir=DIR]
//
// --sync_dir: after Discover() create DIR/discovered, then wait (at most 20 s) for DIR/go before
// Collect(), so a test can change the system between the two.
// stderr: "discover: <status>", "collect: <status>", "wants_rediscovery: 0|1", the inventory.
// Exit code: 0 when Collect() returned OK, 1 otherwise, 2 on bad flags.

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectors/core/recording_sink.h"
#include "collectors/netdev/netdev_collector.h"
#include "daemon/exposition/text_exposition.h"
#include "fabricmon/v1/config.pb.h"

ABSL_FLAG(std::string, sysfs_root, "/sys", "sysfs root");
ABSL_FLAG(std::string, procfs_root, "/proc", "procfs root");
ABSL_FLAG(std::string, include, "", "netdev include pattern (RE2)");
ABSL_FLAG(std::string, exclude, "", "netdev exclude pattern (RE2)");
ABSL_FLAG(bool, tcp, true, "read /proc/net/snmp and netstat");
ABSL_FLAG(std::string, sync_dir, "", "handshake directory between Discover and Collect");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  fabricmon::v1::NetdevCollectorConfig config;
  config.set_sysfs_root(absl::GetFlag(FLAGS_sysfs_root));
  config.set_procfs_root(absl::GetFlag(FLAGS_procfs_root));
  config.mutable_netdevs()->set_include(absl::GetFlag(FLAGS_include));
  config.mutable_netdevs()->set_exclude(absl::GetFlag(FLAGS_exclude));
  config.set_tcp(absl::GetFlag(FLAGS_tcp));
  auto collector = fabricmon::collectors::NetdevCollector::Create(config);
  if (!collector.ok()) {
    std::cerr << "netdev_dump: " << collector.status() << "\n";
    return 2;
  }

  fabricmon::v1::Inventory inventory;
  const absl::Status discovered = (*collector)->Discover(inventory);
  std::cerr << "discover: " << discovered << "\n";

  const std::string sync_dir = absl::GetFlag(FLAGS_sync_dir);
  if (!sync_dir.empty()) {
    std::ofstream(sync_dir + "/discovered") << "1\n";
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    struct stat st;
    while (stat((sync_dir + "/go").c_str(), &st) != 0) {
      if (absl::Now() >= deadline) {
        std::cerr << "netdev_dump: no " << sync_dir << "/go within 20 s\n";
        return 1;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }

  fabricmon::collectors::RecordingSink sink;
  const absl::Status collected = (*collector)->Collect(sink);
  std::cerr << "collect: " << collected << "\n";
  std::cerr << "wants_rediscovery: " << ((*collector)->WantsRediscovery() ? 1 : 0) << "\n";
  std::cerr << inventory.DebugString();
  const std::string text =
      fabricmon::exposition::SerializeText(fabricmon::exposition::BuildFamilies(sink.samples()));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return collected.ok() ? 0 : 1;
}
