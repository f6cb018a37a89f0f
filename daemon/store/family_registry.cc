#include "daemon/store/family_registry.h"

#include "absl/strings/str_cat.h"

namespace fabricmon::store {

absl::Status FamilyRegistry::Admit(collectors::SeriesDesc& desc) {
  if (wire::IsReservedFamily(desc.name)) {
    return absl::PermissionDeniedError(
        absl::StrCat(desc.name, " is written by the aggregator itself; agents may not declare it"));
  }
  for (const auto& [name, value] : desc.labels) {
    absl::Status label = wire::CheckLabelName(name);
    if (!label.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(desc.name, ": ", label.message()));
    }
  }
  if (const wire::CatalogueFamily* family = catalogue_.Find(desc.name)) {
    absl::Status agrees = wire::CheckAgainstCatalogue(*family, desc);
    if (!agrees.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("declaration contradicts the metric catalogue: ", agrees.message()));
    }
    desc.help = family->help;
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  auto it = pins_.find(desc.name);
  if (it == pins_.end()) {
    // The name and HELP rules run once per family: a pinned family's later declarations are
    // compared with its pin, which passed them.
    absl::Status name_ok = wire::CheckFamilyName(desc.name, desc.type);
    if (!name_ok.ok()) {
      return name_ok;
    }
    absl::Status help_ok = wire::CheckHelp(desc.help);
    if (!help_ok.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(desc.name, ": ", help_ok.message()));
    }
    if (pins_.size() >= max_pinned_) {
      return absl::ResourceExhaustedError(absl::StrCat(desc.name, ": the aggregator already holds ",
                                                       max_pinned_,
                                                       " families outside the metric catalogue"));
    }
    pins_.emplace(desc.name, Pin{desc.type, desc.unit, desc.help});
    return absl::OkStatus();
  }
  const Pin& pin = it->second;
  if (pin.type != desc.type || pin.unit != desc.unit || pin.help != desc.help) {
    return absl::FailedPreconditionError(
        absl::StrCat(desc.name, " was first declared with another ",
                     pin.type != desc.type ? "type" : (pin.unit != desc.unit ? "unit" : "HELP"),
                     "; the first declaration stands"));
  }
  return absl::OkStatus();
}

size_t FamilyRegistry::pinned() const {
  absl::MutexLock lock(&mu_);
  return pins_.size();
}

}  // namespace fabricmon::store
