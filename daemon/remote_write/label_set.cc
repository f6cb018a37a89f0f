#include "daemon/remote_write/label_set.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "daemon/remote_write/protobuf_wire.h"

namespace fabricmon::remote_write {

void AppendEncodedLabel(absl::string_view name, absl::string_view value, std::string& out) {
  // Label { string name = 1; string value = 2; } inside TimeSeries.labels = 1.
  const size_t message = (name.empty() ? 0 : wire::FieldSize(name.size())) +
                         (value.empty() ? 0 : wire::FieldSize(value.size()));
  out.push_back(wire::kTimeSeriesLabels);
  wire::AppendVarint(message, out);
  if (!name.empty()) {
    out.push_back(wire::kLabelName);
    wire::AppendVarint(name.size(), out);
    out.append(name.data(), name.size());
  }
  if (!value.empty()) {
    out.push_back(wire::kLabelValue);
    wire::AppendVarint(value.size(), out);
    out.append(value.data(), value.size());
  }
}

std::shared_ptr<const LabelSet> MakeLabelSet(absl::string_view name, LabelPairs labels,
                                             SeriesOrigin origin) {
  auto set = std::make_shared<LabelSet>();
  set->origin = origin;
  set->labels.reserve(labels.size() + 1);
  set->labels.emplace_back("__name__", std::string(name));
  for (auto& label : labels) {
    if (!label.second.empty() && label.first != "__name__") {
      set->labels.push_back(std::move(label));
    }
  }
  // Stable, so that of two equal names the first given stays first and is the one kept.
  std::stable_sort(set->labels.begin(), set->labels.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  set->labels.erase(std::unique(set->labels.begin(), set->labels.end(),
                                [](const auto& a, const auto& b) { return a.first == b.first; }),
                    set->labels.end());
  set->hash = absl::HashOf(set->labels);
  for (const auto& [label_name, value] : set->labels) {
    AppendEncodedLabel(label_name, value, set->encoded);
  }
  return set;
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty()) {
    return false;
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) {
      return false;
    }
  }
  return true;
}

}  // namespace fabricmon::remote_write
