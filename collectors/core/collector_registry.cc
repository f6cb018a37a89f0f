#include "collectors/core/collector_registry.h"

#include "daemon/common/logging.h"
#include "daemon/common/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace fabricmon::collectors {

void CollectorRegistry::Register(std::string name, bool enabled_by_default,
                                 CollectorFactory factory) {
  for (const Entry& entry : entries_) {
    FABRICMON_CHECK(entry.name != name) << "collector registered twice: " << name;
  }
  entries_.push_back({std::move(name), enabled_by_default, std::move(factory)});
}

bool CollectorRegistry::IsEnabled(const v1::CollectorsConfig& config, const Entry& entry) const {
  // Each collector owns the CollectorsConfig field of its own name; its `enabled` field is
  // `optional`, so "unset" falls back to the registered default.
  const auto* descriptor = config.GetDescriptor();
  const auto* field = descriptor->FindFieldByName(entry.name);
  if (field == nullptr || field->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
    return entry.enabled_by_default;
  }
  const auto* reflection = config.GetReflection();
  if (!reflection->HasField(config, field)) {
    return entry.enabled_by_default;
  }
  const google::protobuf::Message& sub = reflection->GetMessage(config, field);
  const auto* enabled = sub.GetDescriptor()->FindFieldByName("enabled");
  if (enabled == nullptr || !sub.GetReflection()->HasField(sub, enabled)) {
    return entry.enabled_by_default;
  }
  return sub.GetReflection()->GetBool(sub, enabled);
}

absl::StatusOr<std::vector<std::unique_ptr<Collector>>> CollectorRegistry::CreateEnabled(
    const CollectorContext& context) const {
  std::vector<std::unique_ptr<Collector>> collectors;
  for (const Entry& entry : entries_) {
    if (!IsEnabled(context.config, entry)) {
      FABRICMON_LOG(Debug) << "collector " << entry.name << " disabled";
      continue;
    }
    absl::StatusOr<std::unique_ptr<Collector>> collector = entry.factory(context);
    if (!collector.ok()) {
      return Annotate(collector.status(), "collector " + entry.name);
    }
    collectors.push_back(*std::move(collector));
  }
  return collectors;
}

}  // namespace fabricmon::collectors
