#include "daemon/remote_write/label_set.h"

#include <algorithm>

#include "absl/hash/hash.h"

namespace fabricmon::remote_write {

std::shared_ptr<const LabelSet> MakeLabelSet(absl::string_view name, LabelPairs labels) {
  auto set = std::make_shared<LabelSet>();
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
