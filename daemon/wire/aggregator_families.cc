#include "daemon/wire/aggregator_families.h"

#include <algorithm>
#include <string>

namespace fabricmon::wire {

const std::vector<CatalogueFamily>& AggregatorFamilies() {
  static const std::vector<CatalogueFamily>* const families = [] {
    auto* out = new std::vector<CatalogueFamily>();
    for (const FamilySpec& spec : kAggregatorFamilies) {
      CatalogueFamily family;
      family.name = spec.name;
      family.help = spec.help;
      family.type = spec.type;
      family.unit = spec.unit;
      family.scale = spec.scale;
      family.overflow = spec.overflow;
      out->push_back(std::move(family));
    }
    // Sorted in the table already; sorting again keeps a constant added out of order from
    // breaking FindAggregatorFamily.
    std::sort(out->begin(), out->end(),
              [](const CatalogueFamily& a, const CatalogueFamily& b) { return a.name < b.name; });
    return out;
  }();
  return *families;
}

const CatalogueFamily* FindAggregatorFamily(absl::string_view name) {
  const std::vector<CatalogueFamily>& families = AggregatorFamilies();
  auto it = std::lower_bound(
      families.begin(), families.end(), name,
      [](const CatalogueFamily& family, absl::string_view key) { return family.name < key; });
  return it != families.end() && it->name == name ? &*it : nullptr;
}

const CatalogueFamily* FindProjectFamily(absl::string_view name) {
  const CatalogueFamily* family = MetricCatalogue::Project().Find(name);
  return family != nullptr ? family : FindAggregatorFamily(name);
}

}  // namespace fabricmon::wire
