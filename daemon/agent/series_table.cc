#include "daemon/agent/series_table.h"

namespace fabricmon::agent {

uint32_t SeriesTable::Intern(const collectors::SeriesDesc& desc) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = by_fingerprint_.try_emplace(desc.fingerprint, 0);
  if (inserted) {
    auto owned = std::make_unique<const collectors::SeriesDesc>(desc);
    if (!reusable_.empty()) {
      it->second = reusable_.back();
      reusable_.pop_back();
      --released_;
      series_[it->second - 1] = std::move(owned);
    } else {
      series_.push_back(std::move(owned));
      it->second = static_cast<uint32_t>(series_.size());
    }
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

void SeriesTable::Release(absl::Span<const uint32_t> ids, uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  for (uint32_t id : ids) {
    if (id == 0 || id > series_.size() || series_[id - 1] == nullptr) {
      continue;
    }
    auto it = by_fingerprint_.find(series_[id - 1]->fingerprint);
    if (it == by_fingerprint_.end() || it->second != id) {
      continue;  // already released
    }
    by_fingerprint_.erase(it);
    quarantine_.push_back({id, sequence});
    ++released_;
  }
}

std::vector<uint32_t> SeriesTable::Reclaimable(uint64_t acked_sequence) {
  absl::MutexLock lock(&mu_);
  std::vector<uint32_t> ids;
  while (!quarantine_.empty() && quarantine_.front().sequence <= acked_sequence) {
    ids.push_back(quarantine_.front().id);
    quarantine_.pop_front();
  }
  return ids;
}

void SeriesTable::MakeReusable(absl::Span<const uint32_t> ids) {
  absl::MutexLock lock(&mu_);
  reusable_.insert(reusable_.end(), ids.begin(), ids.end());
}

size_t SeriesTable::size() const {
  absl::MutexLock lock(&mu_);
  return series_.size() - released_;
}

size_t SeriesTable::id_count() const {
  absl::MutexLock lock(&mu_);
  return series_.size();
}

}  // namespace fabricmon::agent
