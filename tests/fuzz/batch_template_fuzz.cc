// remote_write::BatchTemplate: the aggregator's own snappy writer, fed labels an agent chose (any
// bytes, any lengths) and values and timestamps of any bit pattern. Whatever the input, every
// batch it writes must decompress (snappy's own decompressor) to exactly the request a plain
// encoder writes for the same samples, and claim that request's length.
//
// Input: a label count byte, then each label's length byte and bytes; then samples of 10 bytes
// each (a labels key byte, a timestamp form byte, 8 value bytes) to the end. Three batches of
// that layout are written, each with other values and timestamps derived from the input.

#include <cstring>
#include <string>
#include <vector>

#include "daemon/remote_write/batch_template.h"
#include "daemon/remote_write/protobuf_wire.h"
#include "snappy.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

namespace rw = ::fabricmon::remote_write;
namespace wire = ::fabricmon::remote_write::wire;

// The request for `samples` as a plain encoder writes it in the template's layout (every field
// written out, a +0.0 value included).
std::string Reference(const std::vector<rw::KeyedSample>& samples,
                      const std::vector<std::string>& labels) {
  std::string out;
  for (const rw::KeyedSample& sample : samples) {
    const std::string& own = labels[sample.labels_key];
    const uint64_t timestamp = static_cast<uint64_t>(sample.timestamp_ms);
    const size_t sample_size = 1 + 8 + 1 + wire::VarintSize(timestamp);
    out.push_back(wire::kWriteRequestTimeseries);
    wire::AppendVarint(own.size() + wire::FieldSize(sample_size), out);
    out += own;
    out.push_back(wire::kTimeSeriesSamples);
    wire::AppendVarint(sample_size, out);
    out.push_back(wire::kSampleValue);
    uint64_t bits;
    std::memcpy(&bits, &sample.value, sizeof(bits));
    for (int i = 0; i < 8; ++i) {
      out.push_back(static_cast<char>(bits >> (8 * i)));
    }
    out.push_back(wire::kSampleTimestamp);
    wire::AppendVarint(timestamp, out);
  }
  return out;
}

int64_t Timestamp(uint8_t form, uint64_t bits, int64_t previous) {
  switch (form % 6) {
    case 0:
      return previous;  // the same as the sample before: copied
    case 1:
      return 1764300000000 + static_cast<int64_t>(bits % 100000);
    case 2:
      return static_cast<int64_t>(bits % 300);  // one or two varint bytes, zero too
    case 3:
      return -static_cast<int64_t>(bits % 5) - 1;  // ten varint bytes
    default:
      return static_cast<int64_t>(bits);
  }
}

}  // namespace

FABRICMON_FUZZ_TARGET(batch_template) {
  size_t at = 0;
  auto byte = [&]() -> uint8_t { return at < size ? data[at++] : 0; };
  const size_t label_count = 1 + byte() % 16;
  std::vector<std::string> labels(label_count);
  for (std::string& label : labels) {
    const size_t length = byte();
    for (size_t i = 0; i < length && at < size; ++i) {
      label.push_back(static_cast<char>(data[at++]));
    }
  }
  struct Input {
    uint32_t key;
    uint8_t form;
    uint64_t bits;
  };
  std::vector<Input> inputs;
  while (size - at >= 10 && inputs.size() < 4096) {
    Input input;
    input.key = data[at++] % label_count;
    input.form = data[at++];
    std::memcpy(&input.bits, data + at, 8);
    at += 8;
    inputs.push_back(input);
  }
  if (inputs.empty()) {
    return;
  }

  rw::BatchTemplate layout;
  const auto labels_of = [&labels](uint32_t key) -> absl::string_view { return labels[key]; };
  for (uint64_t round = 0; round < 3; ++round) {
    std::vector<rw::KeyedSample> batch;
    int64_t previous = 1764300000000;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Input& input = inputs[i];
      // Round 0 as given; later rounds change some values (and keep others: equal values and
      // low bytes are what the template copies) and move the timestamps.
      const uint64_t bits =
          round == 0 || (input.bits & 1) != 0 ? input.bits : input.bits ^ (round << (8 * (i % 8)));
      double value;
      std::memcpy(&value, &bits, sizeof(value));
      const int64_t timestamp =
          Timestamp(input.form, input.bits, previous) + static_cast<int64_t>(round);
      previous = timestamp;
      batch.push_back({input.key, timestamp, value});
    }
    if (!layout.Matches(1, batch)) {
      FABRICMON_FUZZ_CHECK(layout.Build(1, batch, labels_of));
    }
    FABRICMON_FUZZ_CHECK(layout.Matches(1, batch));
    rw::CompressedSamples run;
    layout.Compress(batch, run);
    const std::string want = Reference(batch, labels);
    FABRICMON_FUZZ_CHECK(run.samples == batch.size());
    FABRICMON_FUZZ_CHECK(run.raw_size == want.size());
    std::string body;
    rw::JoinRequest({run}, body);
    std::string got;
    FABRICMON_FUZZ_CHECK(snappy::Uncompress(body.data(), body.size(), &got));
    FABRICMON_FUZZ_CHECK(got == want);
  }
}
