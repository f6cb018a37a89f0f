// fabricmon-agent: the node agent.
//
//   fabricmon-agent --once [--sysfs_root=DIR] [--config=FILE]
//       Discover and collect once; print Prometheus text exposition to stdout.

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "collectors/builtin.h"
#include "collectors/core/collector_registry.h"
#include "collectors/core/recording_sink.h"
#include "daemon/agent/collector_runner.h"
#include "daemon/common/clock.h"
#include "daemon/common/config_loader.h"
#include "daemon/common/logging.h"
#include "daemon/exposition/text_exposition.h"
#include "fabricmon/v1/config.pb.h"

ABSL_FLAG(bool, once, false, "Discover and collect once, print Prometheus text to stdout, exit.");
ABSL_FLAG(std::string, config, "", "AgentConfig in protobuf text format.");
ABSL_FLAG(std::string, sysfs_root, "",
          "Override the sysfs root of every sysfs-based collector (default /sys; tests and "
          "offline analysis point it at a captured tree).");
ABSL_FLAG(std::string, log_level, "warning", "debug, info, warning or error.");

namespace fabricmon {
namespace {

void ApplyOverrides(v1::AgentConfig& config) {
  const std::string root = absl::GetFlag(FLAGS_sysfs_root);
  if (!root.empty()) {
    config.mutable_collectors()->mutable_ib_sysfs()->set_sysfs_root(root);
  }
}

int RunOnce(const v1::AgentConfig& config) {
  collectors::CollectorRegistry registry;
  collectors::RegisterBuiltinCollectors(registry);
  collectors::CollectorContext context{config.collectors(), RealClock::Get()};
  auto created = registry.CreateEnabled(context);
  if (!created.ok()) {
    std::cerr << "fabricmon-agent: " << created.status() << "\n";
    return 2;
  }
  std::vector<agent::CollectorRunner> runners;
  for (auto& collector : *created) {
    runners.emplace_back(std::move(collector), RealClock::Get());
  }
  v1::Inventory inventory;
  collectors::RecordingSink sink;
  for (agent::CollectorRunner& runner : runners) {
    (void)runner.Discover(inventory);  // exported as fabricmon_collector_hardware_present
    (void)runner.Collect(sink);        // exported as fabricmon_collector_success
  }
  const std::string text = exposition::SerializeText(exposition::BuildFamilies(sink.samples()));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace
}  // namespace fabricmon

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fabricmon node agent.\n  fabricmon-agent --once [--sysfs_root=DIR] [--config=FILE]");
  absl::ParseCommandLine(argc, argv);

  fabricmon::LogLevel level;
  if (!fabricmon::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    std::cerr << "fabricmon-agent: unknown --log_level\n";
    return 2;
  }
  fabricmon::SetMinLogLevel(level);

  fabricmon::v1::AgentConfig config;
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (!config_path.empty()) {
    absl::Status status = fabricmon::LoadTextConfig(config_path, &config);
    if (!status.ok()) {
      std::cerr << "fabricmon-agent: " << status << "\n";
      return 2;
    }
  }
  fabricmon::ApplyOverrides(config);

  if (absl::GetFlag(FLAGS_once)) {
    return fabricmon::RunOnce(config);
  }
  std::cerr << "fabricmon-agent: streaming mode is not built yet; use --once\n";
  return 2;
}
