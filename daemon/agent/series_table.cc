#include "daemon/agent/series_table.h"

namespace fabricmon::agent {

uint32_t SeriesTable::Intern(const collectors::SeriesDesc& desc) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = by_fingerprint_.try_emplace(desc.fingerprint, 0);
  if (inserted) {
    series_.push_back(std::make_unique<const collectors::SeriesDesc>(desc));
    it->second = static_cast<uint32_t>(series_.size());
  }
  return it->second;
}

const collectors::SeriesDesc* SeriesTable::Find(uint32_t id) const {
  absl::MutexLock lock(&mu_);
  if (id == 0 || id > series_.size()) {
    return nullptr;
  }
  return series_[id - 1].get();
}

size_t SeriesTable::size() const {
  absl::MutexLock lock(&mu_);
  return series_.size();
}

}  // namespace fabricmon::agent
