#pragma once

// The explicit list of collectors (node_exporter's (name, enabled-by-default, factory) triple,
// registered by plain function calls from collectors/builtin.cc: no static initialisers).

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/core/collector.h"
#include "daemon/common/clock.h"
#include "fabricmon/v1/config.pb.h"

namespace fabricmon::collectors {

// What a factory may use. References must outlive the collectors built from them.
struct CollectorContext {
  const v1::CollectorsConfig& config;
  Clock& clock;
};

using CollectorFactory =
    std::function<absl::StatusOr<std::unique_ptr<Collector>>(const CollectorContext&)>;

// Where a collector, as configured, reads from outside its configured roots (sysfs_root,
// procfs_root, a statistics directory, a library named by path): a live source of this host such
// as an ioctl, a netlink socket, a library found on the loader path or a umad device. Returns ""
// when the collector reads only from its roots; otherwise names that source and the option that
// points the collector at a capture instead. A property of the registration, not of a built
// collector: the agent decides before anything is opened or loaded.
using LiveSourceFn = std::function<std::string(const v1::CollectorsConfig&)>;

// The capture the config points at: the first `sysfs_root` or `procfs_root` of any collector
// sub-message that is set and is not the live root ("/sys", "/proc"), as
// "ib_sysfs.sysfs_root=/tmp/tree"; "" when every root is the live one.
std::string CaptureRoot(const v1::CollectorsConfig& config);

// Sets `enabled: true` in the sub-message of each named collector (the --enable_collectors flag).
// InvalidArgument naming an unknown collector.
absl::Status EnableCollectors(const std::vector<std::string>& names, v1::CollectorsConfig& config);

class CollectorRegistry {
 public:
  struct Entry {
    std::string name;  // also the field name of its sub-message in v1.CollectorsConfig
    bool enabled_by_default;
    CollectorFactory factory;
    LiveSourceFn live_source;  // null: reads only from its roots
  };

  // What the agent does with one registered collector under a config.
  struct Decision {
    enum class State {
      kDisabled,   // off in the config (or by default)
      kEnabled,    // built and run
      kTurnedOff,  // enabled by default only, and the capture rule turned it off
    };
    const Entry* entry = nullptr;
    State state = State::kDisabled;
    std::string reason;  // kTurnedOff: why, and how to enable it anyway
  };

  // Adds a collector. Names must be unique (checked). `live_source` says when the collector
  // would read this host rather than its configured roots (see LiveSourceFn); null: never.
  void Register(std::string name, bool enabled_by_default, CollectorFactory factory,
                LiveSourceFn live_source = nullptr);
  const std::vector<Entry>& entries() const { return entries_; }

  // Whether `name` is enabled: the sub-message's `enabled` if set, else the default.
  bool IsEnabled(const v1::CollectorsConfig& config, const Entry& entry) const;
  // Whether the sub-message sets `enabled: true` itself.
  bool IsExplicitlyEnabled(const v1::CollectorsConfig& config, const Entry& entry) const;

  // The decision for every registered collector, in registration order. The capture rule: when
  // CaptureRoot(config) is not empty (the agent reads a captured tree, not this host), a
  // collector that is enabled only by default and whose live_source is not empty is turned off,
  // so that no data of this host is mixed into the capture. Enabling it explicitly keeps it on.
  std::vector<Decision> Decide(const v1::CollectorsConfig& config) const;

  // Builds every enabled collector, in registration order. A collector the capture rule turned
  // off is represented by a stand-in whose Discover() and Collect() return TurnedOffStatus(why),
  // and one log line (WARNING, so that
  // the default log level shows it) names all of them. A factory error (bad config) fails the whole
  // call: a daemon should not start half-configured.
  absl::StatusOr<std::vector<std::unique_ptr<Collector>>> CreateEnabled(
      const CollectorContext& context) const;

 private:
  std::vector<Entry> entries_;
};

}  // namespace fabricmon::collectors
