#include "collectors/core/collector_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "daemon/common/logging.h"
#include "daemon/common/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace fabricmon::collectors {
namespace {

using google::protobuf::FieldDescriptor;

// The stand-in for a collector the capture rule turned off: reads nothing, says why.
class TurnedOffCollector final : public Collector {
 public:
  TurnedOffCollector(std::string name, std::string reason)
      : name_(std::move(name)), status_(TurnedOffStatus(reason)) {}
  absl::string_view name() const override { return name_; }
  absl::Status Discover(v1::Inventory&) override { return status_; }
  absl::Status Collect(SampleSink&) override { return status_; }
  Diagnosis Diagnose(const DiagnosisInput&) const override {
    Diagnosis diagnosis;
    diagnosis.works = true;  // off by rule is not a fault
    diagnosis.reads = absl::StrCat("off: ", status_.message());
    return diagnosis;
  }
  int64_t interval_ms() const override { return 60000; }
  int64_t rediscover_interval_ms() const override { return 3600000; }

 private:
  const std::string name_;
  const absl::Status status_;
};

// The `name` sub-message of `config`, or null when CollectorsConfig has no such message field.
const google::protobuf::Message* SubMessage(const v1::CollectorsConfig& config,
                                            const std::string& name) {
  const FieldDescriptor* field = config.GetDescriptor()->FindFieldByName(name);
  if (field == nullptr || field->type() != FieldDescriptor::TYPE_MESSAGE || field->is_repeated()) {
    return nullptr;
  }
  return &config.GetReflection()->GetMessage(config, field);
}

bool IsLiveRoot(absl::string_view field, absl::string_view value) {
  while (value.size() > 1 && absl::ConsumeSuffix(&value, "/")) {
  }
  return value.empty() || (field == "sysfs_root" && value == "/sys") ||
         (field == "procfs_root" && value == "/proc");
}

}  // namespace

std::string CaptureRoot(const v1::CollectorsConfig& config) {
  const google::protobuf::Descriptor* descriptor = config.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* collector = descriptor->field(i);
    if (collector->type() != FieldDescriptor::TYPE_MESSAGE || collector->is_repeated()) {
      continue;
    }
    const google::protobuf::Message& sub = config.GetReflection()->GetMessage(config, collector);
    const google::protobuf::Descriptor* sub_descriptor = sub.GetDescriptor();
    for (int j = 0; j < sub_descriptor->field_count(); ++j) {
      const FieldDescriptor* field = sub_descriptor->field(j);
      if (field->type() != FieldDescriptor::TYPE_STRING || field->is_repeated() ||
          (field->name() != "sysfs_root" && field->name() != "procfs_root")) {
        continue;
      }
      const std::string value = sub.GetReflection()->GetString(sub, field);
      if (!IsLiveRoot(field->name(), value)) {
        return absl::StrCat(collector->name(), ".", field->name(), "=", value);
      }
    }
  }
  return "";
}

absl::Status EnableCollectors(const std::vector<std::string>& names, v1::CollectorsConfig& config) {
  for (const std::string& name : names) {
    const FieldDescriptor* field = config.GetDescriptor()->FindFieldByName(name);
    if (field == nullptr || field->type() != FieldDescriptor::TYPE_MESSAGE ||
        field->is_repeated()) {
      return absl::InvalidArgumentError(absl::StrCat("no collector named \"", name, "\""));
    }
    google::protobuf::Message* sub = config.GetReflection()->MutableMessage(&config, field);
    const FieldDescriptor* enabled = sub->GetDescriptor()->FindFieldByName("enabled");
    if (enabled == nullptr || enabled->type() != FieldDescriptor::TYPE_BOOL) {
      return absl::InvalidArgumentError(absl::StrCat("collector ", name, " has no enabled field"));
    }
    sub->GetReflection()->SetBool(sub, enabled, true);
  }
  return absl::OkStatus();
}

void CollectorRegistry::Register(std::string name, bool enabled_by_default,
                                 CollectorFactory factory, LiveSourceFn live_source) {
  for (const Entry& entry : entries_) {
    FABRICMON_CHECK(entry.name != name) << "collector registered twice: " << name;
  }
  entries_.push_back(
      {std::move(name), enabled_by_default, std::move(factory), std::move(live_source)});
}

bool CollectorRegistry::IsExplicitlyEnabled(const v1::CollectorsConfig& config,
                                            const Entry& entry) const {
  const google::protobuf::Message* sub = SubMessage(config, entry.name);
  if (sub == nullptr) {
    return false;
  }
  const FieldDescriptor* enabled = sub->GetDescriptor()->FindFieldByName("enabled");
  return enabled != nullptr && sub->GetReflection()->HasField(*sub, enabled) &&
         sub->GetReflection()->GetBool(*sub, enabled);
}

std::vector<CollectorRegistry::Decision> CollectorRegistry::Decide(
    const v1::CollectorsConfig& config) const {
  const std::string capture = CaptureRoot(config);
  std::vector<Decision> decisions;
  for (const Entry& entry : entries_) {
    Decision decision;
    decision.entry = &entry;
    if (!IsEnabled(config, entry)) {
      decision.state = Decision::State::kDisabled;
    } else if (!capture.empty() && entry.live_source != nullptr &&
               !IsExplicitlyEnabled(config, entry)) {
      const std::string live = entry.live_source(config);
      if (live.empty()) {
        decision.state = Decision::State::kEnabled;
      } else {
        decision.state = Decision::State::kTurnedOff;
        decision.reason = absl::StrCat(
            "the agent reads a capture (", capture, ") and ", entry.name, " would read ", live,
            ". Enable it explicitly to read this host anyway: ", entry.name,
            " { enabled: true } or --enable_collectors=", entry.name);
      }
    } else {
      decision.state = Decision::State::kEnabled;
    }
    decisions.push_back(std::move(decision));
  }
  return decisions;
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
  std::vector<std::string> turned_off;
  for (const Decision& decision : Decide(context.config)) {
    const Entry& entry = *decision.entry;
    if (decision.state == Decision::State::kDisabled) {
      FABRICMON_LOG(Debug) << "collector " << entry.name << " disabled";
      continue;
    }
    if (decision.state == Decision::State::kTurnedOff) {
      turned_off.push_back(absl::StrCat(entry.name, " (", entry.live_source(context.config), ")"));
      collectors.push_back(std::make_unique<TurnedOffCollector>(entry.name, decision.reason));
      continue;
    }
    absl::StatusOr<std::unique_ptr<Collector>> collector = entry.factory(context);
    if (!collector.ok()) {
      return Annotate(collector.status(), "collector " + entry.name);
    }
    collectors.push_back(*std::move(collector));
  }
  if (!turned_off.empty()) {
    FABRICMON_LOG(Warning) << "reading a capture (" << CaptureRoot(context.config)
                           << "), not this host: turned off " << absl::StrJoin(turned_off, ", ")
                           << "; enable one explicitly (<name> { enabled: true } or "
                              "--enable_collectors=<name>) to read this host anyway";
  }
  return collectors;
}

}  // namespace fabricmon::collectors
