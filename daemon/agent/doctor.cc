#include "daemon/agent/doctor.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectors/builtin.h"
#include "collectors/core/recording_sink.h"

namespace fabricmon::agent {
namespace {

using collectors::CollectorRegistry;
using Decision = CollectorRegistry::Decision;

// Diagnoses one built collector: its own Discover(), one Collect() when that found something,
// then its own explanation.
collectors::Diagnosis Examine(collectors::Collector& collector) {
  v1::Inventory found;
  const absl::Status discovery = collector.Discover(found);
  absl::Status collection = discovery;
  collectors::RecordingSink sink;
  if (discovery.ok()) {
    collection = collector.Collect(sink);
  }
  return collector.Diagnose({discovery, collection, found, sink.samples().size()});
}

}  // namespace

int Doctor(const CollectorRegistry& registry, const v1::AgentConfig& config, Clock& clock,
           std::ostream& out) {
  const collectors::CollectorContext context{config.collectors(), clock};
  int enabled = 0;
  int working = 0;
  for (const Decision& decision : registry.Decide(config.collectors())) {
    const std::string& name = decision.entry->name;
    switch (decision.state) {
      case Decision::State::kDisabled:
        out << name << ": disabled in the config\n";
        continue;
      case Decision::State::kTurnedOff:
        out << name << ": off: " << decision.reason << "\n";
        continue;
      case Decision::State::kEnabled:
        break;
    }
    ++enabled;
    absl::StatusOr<std::unique_ptr<collectors::Collector>> built = decision.entry->factory(context);
    if (!built.ok()) {
      out << name << ": FAIL: cannot start: " << built.status().message()
          << "; fix: correct collectors { " << name << " { ... } } in the config\n";
      continue;
    }
    const collectors::Diagnosis diagnosis = Examine(**built);
    if (diagnosis.works) {
      ++working;
      out << name << ": ok: " << diagnosis.reads << "\n";
      continue;
    }
    out << name << ": FAIL: " << diagnosis.problem;
    if (!diagnosis.reads.empty()) {
      out << " (reads " << diagnosis.reads << ")";
    }
    if (!diagnosis.fix.empty()) {
      out << "; fix: " << diagnosis.fix;
    }
    out << "\n";
  }
  out << "doctor: " << working << " of " << enabled << " enabled collector(s) work\n";
  return working == enabled ? 0 : 1;
}

int RunDoctor(const v1::AgentConfig& config, std::ostream& out) {
  CollectorRegistry registry;
  collectors::RegisterBuiltinCollectors(registry);
  return Doctor(registry, config, RealClock::Get(), out);
}

}  // namespace fabricmon::agent
