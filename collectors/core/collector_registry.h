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

class CollectorRegistry {
 public:
  struct Entry {
    std::string name;  // also the field name of its sub-message in v1.CollectorsConfig
    bool enabled_by_default;
    CollectorFactory factory;
  };

  // Adds a collector. Names must be unique (checked).
  void Register(std::string name, bool enabled_by_default, CollectorFactory factory);
  const std::vector<Entry>& entries() const { return entries_; }

  // Whether `name` is enabled: the sub-message's `enabled` if set, else the default.
  bool IsEnabled(const v1::CollectorsConfig& config, const Entry& entry) const;

  // Builds every enabled collector, in registration order. A factory error (bad config) fails
  // the whole call: a daemon should not start half-configured.
  absl::StatusOr<std::vector<std::unique_ptr<Collector>>> CreateEnabled(
      const CollectorContext& context) const;

 private:
  std::vector<Entry> entries_;
};

}  // namespace fabricmon::collectors
