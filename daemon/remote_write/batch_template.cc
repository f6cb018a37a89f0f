#include "daemon/remote_write/batch_template.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "daemon/remote_write/protobuf_wire.h"

namespace fabricmon::remote_write {
namespace {

// snappy's block format, as far as this writes it: a literal is a tag byte whose low two bits are
// 0, its length - 1 in the upper six bits (60..63: in the next 1..4 bytes), then the bytes; a copy
// of `length` bytes from `offset` bytes back is a tag with low bits 1 (length 4..11, offset below
// 2048: three bits of offset in the tag, one byte more) or 2 (length 1..64, two bytes of offset).
// A copy may overlap what it writes (offset < length repeats a pattern).
constexpr size_t kMaxCopyOffset = 65535;
constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

char* WriteLiteralTag(size_t length, char* out) {
  const size_t n = length - 1;
  if (n < 60) {
    *out++ = static_cast<char>(n << 2);
    return out;
  }
  int extra = 1;
  while (extra < 4 && (n >> (8 * extra)) != 0) {
    ++extra;
  }
  *out++ = static_cast<char>((59 + extra) << 2);
  for (int i = 0; i < extra; ++i) {
    *out++ = static_cast<char>(n >> (8 * i));
  }
  return out;
}

char* WriteLiteral(const char* bytes, size_t length, char* out) {
  out = WriteLiteralTag(length, out);
  std::memcpy(out, bytes, length);
  return out + length;
}

// `offset` in [1, kMaxCopyOffset], `length` ≥ 1.
char* WriteCopy(size_t offset, size_t length, char* out) {
  auto copy2 = [&](size_t n) {
    *out++ = static_cast<char>(2 | ((n - 1) << 2));
    *out++ = static_cast<char>(offset);
    *out++ = static_cast<char>(offset >> 8);
  };
  while (length > 64) {
    const size_t n = length >= 68 ? 64 : 60;  // leaves at least 4 for the last
    copy2(n);
    length -= n;
  }
  if (length >= 4 && length <= 11 && offset < 2048) {
    *out++ = static_cast<char>(1 | ((length - 4) << 2) | ((offset >> 8) << 5));
    *out++ = static_cast<char>(offset);
    return out;
  }
  copy2(length);
  return out;
}

uint64_t DoubleBits(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

char* WriteFixed64(uint64_t bits, char* out) {
  for (int i = 0; i < 8; ++i) {  // little-endian, whatever the host's order
    *out++ = static_cast<char>(bits >> (8 * i));
  }
  return out;
}

uint32_t Load32(const char* p) {
  uint32_t word;
  std::memcpy(&word, p, sizeof(word));
  return word;
}

// Bytes are moved kSmallCopy at a time when fewer: a fixed-size copy is two register moves,
// where a call to memcpy for a handful of bytes costs more than the bytes. Whatever is read so
// has kSmallCopy readable bytes, and the output kSmallCopy bytes of room past its end.
constexpr size_t kSmallCopy = 16;

char* CopySmall(const char* from, size_t size, char* out) {
  if (size <= kSmallCopy) {
    std::memcpy(out, from, kSmallCopy);
  } else {
    std::memcpy(out, from, size);
  }
  return out + size;
}

// CopySmall for a piece never longer than kSmallCopy (a value with its tag, a timestamp's
// varint): one fixed copy, no branch.
char* CopyAtMostSmall(const char* from, size_t size, char* out) {
  std::memcpy(out, from, kSmallCopy);
  return out + size;
}

// Writes elements, joining consecutive copies that reach equally far back into one (a copy is
// byte by byte, so two such copies are one of their lengths together).
class ElementWriter {
 public:
  explicit ElementWriter(char* out) : out_(out) {}

  void Copy(size_t offset, size_t length) {
    if (pending_length_ != 0 && pending_offset_ == offset) {
      pending_length_ += length;
      return;
    }
    Flush();
    pending_offset_ = offset;
    pending_length_ = length;
  }
  // Elements written before (kSmallCopy readable bytes at `elements`, see CopySmall).
  void Stored(const char* elements, size_t size) {
    if (size != 0) {
      Flush();
      out_ = CopySmall(elements, size, out_);
    }
  }
  // One literal of `first` then `second`: pieces of a sample (a value and its tag, a timestamp),
  // each at most kSmallCopy bytes with kSmallCopy readable.
  void Literal(const char* first, size_t first_size, const char* second = nullptr,
               size_t second_size = 0) {
    if (first_size + second_size == 0) {
      return;
    }
    Flush();
    out_ = WriteLiteralTag(first_size + second_size, out_);
    out_ = CopyAtMostSmall(first, first_size, out_);
    if (second_size != 0) {
      out_ = CopyAtMostSmall(second, second_size, out_);
    }
  }
  void Flush() {
    if (pending_length_ != 0) {
      out_ = WriteCopy(pending_offset_, pending_length_, out_);
      pending_length_ = 0;
    }
  }
  char* end() const { return out_; }

 private:
  char* out_;
  size_t pending_offset_ = 0;
  size_t pending_length_ = 0;
};

// A Sample of a layout is the value's tag, the value's 8 bytes, the timestamp's tag and the
// timestamp; the stored elements end after the value's tag, and the rest (the tail) is written
// per batch. The value and the timestamp's tag: kValueAndTag bytes.
constexpr size_t kValueAndTag = 8 + 1;

}  // namespace

bool BatchTemplate::Matches(uint64_t labels_version, absl::Span<const KeyedSample> samples) const {
  if (!built_ || labels_version != labels_version_ || samples.size() != keys_.size()) {
    return false;
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].labels_key != keys_[i] ||
        wire::VarintSize(static_cast<uint64_t>(samples[i].timestamp_ms)) != timestamp_sizes_[i]) {
      return false;
    }
  }
  return true;
}

void BatchTemplate::Clear() {
  built_ = false;
  keys_.clear();
  timestamp_sizes_.clear();
  value_offsets_.clear();
  elements_ends_.clear();
  leads_.clear();
  trails_.clear();
  elements_.clear();
  raw_size_ = 0;
}

bool BatchTemplate::Build(uint64_t labels_version, absl::Span<const KeyedSample> samples,
                          absl::FunctionRef<absl::string_view(uint32_t labels_key)> labels) {
  Clear();
  // The run uncompressed, its values and timestamps left zero: only the regions before each
  // value (`regions`) are compressed, and only from one another.
  struct Region {
    size_t begin;
    size_t end;
  };
  std::string raw;
  std::vector<Region> regions;
  regions.reserve(samples.size());
  for (const KeyedSample& sample : samples) {
    const absl::string_view own = labels(sample.labels_key);
    const size_t timestamp_size = wire::VarintSize(static_cast<uint64_t>(sample.timestamp_ms));
    const size_t sample_size = 1 + kValueAndTag + timestamp_size;
    const size_t series_size = own.size() + wire::FieldSize(sample_size);
    const size_t begin = raw.size();
    char head[12];
    head[0] = wire::kWriteRequestTimeseries;
    raw.append(head, wire::WriteVarint(series_size, head + 1) - head);
    raw.append(own.data(), own.size());
    head[0] = wire::kTimeSeriesSamples;
    char* end = wire::WriteVarint(sample_size, head + 1);
    *end++ = wire::kSampleValue;
    raw.append(head, end - head);
    regions.push_back({begin, raw.size()});
    if (raw.size() > std::numeric_limits<uint32_t>::max() - sample_size) {
      Clear();
      return false;
    }
    keys_.push_back(sample.labels_key);
    timestamp_sizes_.push_back(static_cast<uint8_t>(timestamp_size));
    value_offsets_.push_back(static_cast<uint32_t>(raw.size()));
    raw.append(8, '\0');
    raw.push_back(wire::kSampleTimestamp);
    raw.append(timestamp_size, '\0');
  }
  raw_size_ = raw.size();

  // Greedy matching as snappy does it, but every position of a region is hashed, the longest
  // of the last kChain positions with the same hash is taken (snappy looks at the last one), and
  // a match never reaches outside its region: built once per layout, the smaller output is worth
  // the time.
  constexpr int kHashBits = 14;
  constexpr int kChain = 16;
  std::vector<uint32_t> head(size_t{1} << kHashBits, kNone);  // by hash: the last position
  std::vector<uint32_t> previous(raw_size_, kNone);  // by position: the one before, same hash
  std::vector<uint32_t> region_of(raw_size_, 0);     // by hashed position
  auto hash = [](uint32_t word) { return (word * 0x1e35a7bdU) >> (32 - kHashBits); };
  const char* base = raw.data();
  auto insert = [&](size_t pos, uint32_t region) {
    uint32_t& last = head[hash(Load32(base + pos))];
    previous[pos] = last;
    last = static_cast<uint32_t>(pos);
    region_of[pos] = region;
  };
  // A generous bound: a copy never writes more than the bytes it stands for, and a literal's tag
  // (up to 5 bytes) comes at most once per copy and once more per region.
  std::string out(2 * raw_size_ + 5 * regions.size() + 16, '\0');
  char* w = out.data();
  for (uint32_t r = 0; r < regions.size(); ++r) {
    const Region& region = regions[r];
    HeldCopy lead;
    HeldCopy trail;
    size_t literal = region.begin;
    size_t pos = region.begin;
    while (pos + 4 <= region.end) {
      const uint32_t word = Load32(base + pos);
      size_t best_length = 0;
      size_t best_source = 0;
      int looked = 0;
      for (uint32_t c = head[hash(word)];
           c != kNone && pos - c <= kMaxCopyOffset && looked < kChain; c = previous[c], ++looked) {
        if (Load32(base + c) != word) {
          continue;
        }
        const size_t source_end = regions[region_of[c]].end;
        size_t length = 4;
        while (pos + length < region.end && c + length < source_end &&
               base[c + length] == base[pos + length]) {
          ++length;
        }
        if (length > best_length) {
          best_length = length;
          best_source = c;
        }
      }
      insert(pos, r);
      if (best_length == 0) {
        ++pos;
        continue;
      }
      const size_t length = best_length;
      struct {
        uint32_t pos;
        uint32_t region;
      } const candidate = {static_cast<uint32_t>(best_source), region_of[best_source]};
      const size_t source_end = regions[candidate.region].end;
      if (pos > literal) {
        w = WriteLiteral(base + literal, pos - literal, w);
      }
      const HeldCopy held = {static_cast<uint16_t>(pos - candidate.pos),
                             static_cast<uint16_t>(length), kNone};
      if (length > std::numeric_limits<uint16_t>::max()) {
        w = WriteCopy(pos - candidate.pos, length, w);
      } else if (pos == region.begin) {
        // Kept apart: Compress joins it to the copy before it when both reach equally far back
        // (the previous sample's timestamp, then its labels' beginning).
        lead = held;
      } else if (pos + length == region.end) {
        // Kept apart too: when its source also ends a region, the bytes after both are values,
        // and Compress extends it over what the two values have in common.
        trail = held;
        if (candidate.pos + length == source_end) {
          trail.source = candidate.region;
        }
      } else {
        w = WriteCopy(pos - candidate.pos, length, w);
      }
      for (size_t p = pos + 1; p < pos + length && p + 4 <= region.end; ++p) {
        insert(p, r);
      }
      pos += length;
      literal = pos;
    }
    if (region.end > literal) {
      w = WriteLiteral(base + literal, region.end - literal, w);
    }
    elements_ends_.push_back(static_cast<uint32_t>(w - out.data()));
    leads_.push_back(lead);
    trails_.push_back(trail);
  }
  // At its size (`out` is twice the run's), and kSmallCopy bytes more that Compress may read.
  elements_.reserve(w - out.data() + kSmallCopy);
  elements_.assign(out.data(), w - out.data());
  elements_.append(kSmallCopy, '\0');
  // Kept for the stream's life: no slack (29 bytes per sample for 3,000 ib_sysfs-like series).
  for (auto* v : {&keys_, &value_offsets_, &elements_ends_}) {
    v->shrink_to_fit();
  }
  timestamp_sizes_.shrink_to_fit();
  leads_.shrink_to_fit();
  trails_.shrink_to_fit();
  labels_version_ = labels_version;
  built_ = true;
  return true;
}

void BatchTemplate::Compress(absl::Span<const KeyedSample> samples, CompressedSamples& out) const {
  CompressLayout<false>(samples, out);
}

bool BatchTemplate::CompressIfMatches(uint64_t labels_version,
                                      absl::Span<const KeyedSample> samples,
                                      CompressedSamples& out) const {
  if (!built_ || labels_version != labels_version_ || samples.size() != keys_.size()) {
    return false;
  }
  return CompressLayout<true>(samples, out);
}

template <bool kCheck>
bool BatchTemplate::CompressLayout(absl::Span<const KeyedSample> samples,
                                   CompressedSamples& out) const {
  // Written into a buffer kept per thread, then copied out at its size: a queued run holds no
  // slack. A bound, generously: the stored elements, and no element longer than three bytes
  // per raw byte it stands for or than a literal's tag and its bytes.
  thread_local std::string scratch;
  const size_t bound = elements_.size() + 3 * raw_size_ + 2 * kSmallCopy;
  if (scratch.size() < bound) {
    scratch.resize(bound);  // only grows: resize() zero-fills what it adds
  }
  ElementWriter w(scratch.data());
  // The last sample with a value of each hash: a later one with the same value (and, as often,
  // timestamp) copies it rather than repeating it.
  constexpr int kValueHashBits = 6;
  std::array<uint32_t, size_t{1} << kValueHashBits> last_with_value;
  last_with_value.fill(kNone);
  // The last sample whose value's first (low) k bytes are zero, for k = 4..8: small integers
  // and round numbers have several, and copying them beats writing them from 4 on.
  std::array<uint32_t, 9> last_with_zeros;
  last_with_zeros.fill(kNone);
  size_t from = 0;
  // Checking: the encoded size of the timestamp last sized (a batch's samples mostly share one).
  int64_t sized_timestamp = 0;
  size_t sized_timestamp_size = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    if constexpr (kCheck) {
      if (samples[i].labels_key != keys_[i]) {
        return false;
      }
      if (i == 0 || samples[i].timestamp_ms != sized_timestamp) {
        sized_timestamp = samples[i].timestamp_ms;
        sized_timestamp_size = wire::VarintSize(static_cast<uint64_t>(sized_timestamp));
      }
      if (sized_timestamp_size != timestamp_sizes_[i]) {
        return false;
      }
    }
    const size_t at = value_offsets_[i];
    if (leads_[i].length != 0) {
      w.Copy(leads_[i].offset, leads_[i].length);
    }
    const size_t to = elements_ends_[i];
    w.Stored(elements_.data() + from, to - from);
    from = to;
    if (trails_[i].length != 0) {
      w.Copy(trails_[i].offset, trails_[i].length);
    }

    const KeyedSample& sample = samples[i];
    const uint64_t bits = DoubleBits(sample.value);
    const size_t timestamp_size = timestamp_sizes_[i];
    auto reach = [&](uint32_t j) { return j != kNone && at - value_offsets_[j] <= kMaxCopyOffset; };
    // The previous sample's timestamp lies as far back as its value: copied when equal.
    const bool same_time_as_previous =
        i > 0 && samples[i - 1].timestamp_ms == sample.timestamp_ms && reach(i - 1);
    const size_t previous_distance = i > 0 ? at - value_offsets_[i - 1] : 0;
    // The timestamp as written, only where it is not copied: most samples copy it.
    char timestamp[kSmallCopy];
    auto written_timestamp = [&]() -> const char* {
      wire::WriteVarint(static_cast<uint64_t>(sample.timestamp_ms), timestamp);
      return timestamp;
    };

    uint32_t& last = last_with_value[(bits * 0x9e3779b97f4a7c15ULL) >> (64 - kValueHashBits)];
    const uint32_t j = last;
    last = static_cast<uint32_t>(i);
    const size_t zeros = bits == 0 ? 8 : static_cast<size_t>(__builtin_ctzll(bits)) / 8;
    const uint32_t zeros_from = zeros >= 4 ? last_with_zeros[zeros] : kNone;
    for (size_t n = 4; n <= zeros; ++n) {
      last_with_zeros[n] = static_cast<uint32_t>(i);
    }
    // The trail's source sample: its value lies exactly trail.offset back.
    const HeldCopy& trail = trails_[i];
    size_t in_common = 0;  // low bytes of the value equal to that sample's
    if (trail.source != kNone) {
      const uint64_t differ = bits ^ DoubleBits(samples[trail.source].value);
      in_common = differ == 0 ? 8 : static_cast<size_t>(__builtin_ctzll(differ)) / 8;
    }
    uint32_t same = kNone;  // an earlier sample with this value
    if (in_common == 8) {
      same = trail.source;
    } else if (reach(j) && j != i && DoubleBits(samples[j].value) == bits) {
      same = j;
    }
    if (same != kNone) {
      const size_t distance = at - value_offsets_[same];
      if (samples[same].timestamp_ms == sample.timestamp_ms) {
        w.Copy(distance, kValueAndTag + timestamp_size);  // the whole tail
        continue;
      }
      w.Copy(distance, kValueAndTag);
      if (same_time_as_previous) {
        w.Copy(previous_distance, timestamp_size);
      } else {
        w.Literal(written_timestamp(), timestamp_size);
      }
      continue;
    }
    char value[2 * kSmallCopy];  // read from value + skip (up to 8)
    WriteFixed64(bits, value);
    value[8] = wire::kSampleTimestamp;
    size_t skip = 0;
    if (in_common > 0) {  // the trail goes on over them
      w.Copy(trail.offset, in_common);
      skip = in_common;
    } else if (reach(zeros_from)) {  // the low zero bytes from the last value with as many
      w.Copy(at - value_offsets_[zeros_from], zeros);
      skip = zeros;
    }
    if (same_time_as_previous) {
      // The previous sample's value's high bytes (its sign, exponent and first bits of
      // mantissa: values of one magnitude share them) go with its timestamp in one copy, which
      // the next sample's lead usually joins.
      const uint64_t differ = bits ^ DoubleBits(samples[i - 1].value);
      const size_t high =
          std::min(8 - skip, differ == 0 ? 8 : static_cast<size_t>(__builtin_clzll(differ)) / 8);
      w.Literal(value + skip, 8 - skip - high);
      w.Copy(previous_distance, high + 1 + timestamp_size);  // and the tag and the timestamp
      continue;
    }
    w.Literal(value + skip, kValueAndTag - skip, written_timestamp(), timestamp_size);
  }
  w.Flush();
  out.elements.assign(scratch.data(), w.end() - scratch.data());
  out.raw_size = raw_size_;
  out.samples = samples.size();
  return true;
}

size_t BatchTemplate::MemoryBytes() const {
  return keys_.capacity() * sizeof(uint32_t) + timestamp_sizes_.capacity() +
         value_offsets_.capacity() * sizeof(uint32_t) +
         elements_ends_.capacity() * sizeof(uint32_t) +
         (leads_.capacity() + trails_.capacity()) * sizeof(HeldCopy) + elements_.capacity();
}

}  // namespace fabricmon::remote_write
