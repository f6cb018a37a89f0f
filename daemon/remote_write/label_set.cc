#include "daemon/remote_write/label_set.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "absl/hash/hash.h"
#include "daemon/remote_write/protobuf_wire.h"

namespace fabricmon::remote_write {

namespace {

// Label { string name = 1; string value = 2; }: proto3 leaves an empty string out.
size_t LabelMessageSize(absl::string_view name, absl::string_view value) {
  return (name.empty() ? 0 : wire::FieldSize(name.size())) +
         (value.empty() ? 0 : wire::FieldSize(value.size()));
}

// Prometheus' rules, as MakeLabelSet documents them, on `labels` (name, value) pairs whose
// first is ("__name__", the series' name): sorted by name, stably, so that of two equal names
// the first given is the one kept; empty values and a second `__name__` left out.
template <typename Pairs>
void Normalize(Pairs& labels) {
  auto drop = std::remove_if(labels.begin() + 1, labels.end(), [](const auto& label) {
    return label.second.empty() || label.first == "__name__";
  });
  labels.erase(drop, labels.end());
  auto by_name = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (labels.size() <= 16) {
    // A series has a handful of labels: an insertion sort, which (unlike std::stable_sort) takes
    // no buffer of its own.
    for (size_t i = 1; i < labels.size(); ++i) {
      for (size_t j = i; j > 0 && by_name(labels[j], labels[j - 1]); --j) {
        std::swap(labels[j], labels[j - 1]);
      }
    }
  } else {
    std::stable_sort(labels.begin(), labels.end(), by_name);
  }
  labels.erase(std::unique(labels.begin(), labels.end(),
                           [](const auto& a, const auto& b) { return a.first == b.first; }),
               labels.end());
}

// Normalized `labels`, encoded into `out` (appended).
template <typename Pairs>
void EncodeNormalized(const Pairs& labels, std::string& out) {
  size_t size = 0;  // exactly, so that the bytes take one allocation of their size
  for (const auto& [label_name, value] : labels) {
    size += wire::FieldSize(LabelMessageSize(label_name, value));
  }
  out.reserve(out.size() + size);
  for (const auto& [label_name, value] : labels) {
    AppendEncodedLabel(label_name, value, out);
  }
}

}  // namespace

void AppendEncodedLabel(absl::string_view name, absl::string_view value, std::string& out) {
  // The Label message inside TimeSeries.labels = 1.
  const size_t message = LabelMessageSize(name, value);
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
  LabelPairs sorted;
  sorted.reserve(labels.size() + 1);
  sorted.emplace_back("__name__", std::string(name));
  std::move(labels.begin(), labels.end(), std::back_inserter(sorted));
  Normalize(sorted);
  auto set = std::make_shared<LabelSet>();
  set->origin = origin;
  set->hash = absl::HashOf(sorted);
  EncodeNormalized(sorted, set->encoded);
  return set;
}

void EncodeLabelsInto(absl::string_view name, LabelRefs& labels, std::string& out) {
  labels.emplace(labels.begin(), "__name__", name);
  Normalize(labels);
  out.clear();
  EncodeNormalized(labels, out);
}

LabelPairs DecodeLabels(const LabelSet& set) {
  LabelPairs out;
  const std::string_view bytes = set.encoded;
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t cursor = pos + 1;  // past the TimeSeries.labels tag
    uint64_t length = 0;
    if (!wire::ReadVarint(bytes, &cursor, &length) || length > bytes.size() - cursor) {
      break;  // cannot happen: MakeLabelSet wrote these bytes
    }
    const size_t end = cursor + length;
    std::pair<std::string, std::string>& label = out.emplace_back();
    while (cursor < end) {
      const char tag = bytes[cursor++];
      uint64_t field_length = 0;
      if (!wire::ReadVarint(bytes, &cursor, &field_length) || field_length > end - cursor) {
        break;
      }
      (tag == wire::kLabelName ? label.first : label.second)
          .assign(bytes.substr(cursor, field_length));
      cursor += field_length;
    }
    pos = end;
  }
  return out;
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
