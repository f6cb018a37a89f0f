// fabricmon_recording_last_values: the last recorded value of every series in a recording, read
// straight from its records (the recording reader, the declarations, the layouts and the batches'
// deltas summed here) — not through the aggregator's ingest, store or exporter, so that a test
// can check what `fabricmon replay --listen_metrics` serves against it.
//
//   fabricmon_recording_last_values RECORDING
//
// One JSON object per line and series, in no particular order:
//   {"node":"...","name":"...","labels":{"k":"v",...},"type":"counter|gauge|info",
//    "scale":S,"raw":"N","present":true|false}
// raw: the unsigned 64-bit raw value (a string: JSON numbers lose precision past 2^53); present:
// whether the series was in its stream's last batch of its layout set (else the aggregator
// reports it absent). Exit 0; 1 when the recording cannot be read or a record does not decode.

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/recording/recording_reader.h"
#include "fabricmon/v1/telemetry.pb.h"

namespace {

struct Declared {
  fabricmon::v1::SeriesDeclaration decl;
  uint64_t raw = 0;  // the delta base: the stream's last value of this id
};

struct StreamState {
  std::string node;
  std::map<uint32_t, Declared> series;                // by stream id
  std::map<uint32_t, std::vector<uint32_t>> layouts;  // by layout id
};

struct Last {
  fabricmon::v1::SeriesDeclaration decl;
  uint64_t raw = 0;
  bool present = false;
};

std::string Quoted(const std::string& text) {
  return absl::StrCat("\"", absl::CEscape(text), "\"");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s RECORDING\n", argv[0]);
    return 2;
  }
  std::map<uint64_t, StreamState> streams;
  // By node, name and labels (as "k=v\n" pairs): the last value wins, whichever stream sent it.
  std::map<std::tuple<std::string, std::string, std::string>, Last> last;
  std::string error;
  fabricmon::v1::AgentMessage message;
  auto read =
      fabricmon::recording::ReadRecording(argv[1], [&](const fabricmon::recording::Record& record) {
        if (record.type == fabricmon::recording::RecordType::kStreamEnd) {
          streams.erase(record.stream);
          return true;
        }
        if (!message.ParseFromString(record.payload)) {
          error = "a record does not parse";
          return false;
        }
        StreamState& stream = streams[record.stream];
        if (message.has_hello()) {
          stream = StreamState{record.node, {}, {}};
          return true;
        }
        if (message.has_declarations()) {
          // A declaration sent again (the aggregator asked for it) keeps the delta base, as
          // both ends of the stream do.
          for (const auto& decl : message.declarations().series()) {
            stream.series[decl.id()].decl = decl;
          }
        } else if (message.has_layouts()) {
          for (const auto& layout : message.layouts().layouts()) {
            stream.layouts[layout.id()] =
                std::vector<uint32_t>(layout.series_ids().begin(), layout.series_ids().end());
          }
        } else if (message.has_batch()) {
          const auto& batch = message.batch();
          auto layout = stream.layouts.find(batch.layout_id());
          if (layout == stream.layouts.end()) {
            error = absl::StrCat("a batch of ", record.node, " uses an undeclared layout");
            return false;
          }
          const std::string& present = batch.present();
          int k = 0;
          for (size_t i = 0; i < layout->second.size(); ++i) {
            auto declared = stream.series.find(layout->second[i]);
            if (declared == stream.series.end()) {
              error = absl::StrCat("a layout of ", record.node, " names an undeclared series");
              return false;
            }
            const bool here =
                present.empty() || ((static_cast<unsigned char>(present[i / 8]) >> (i % 8)) & 1);
            std::string labels;
            for (const auto& label : declared->second.decl.labels()) {
              absl::StrAppend(&labels, label.name(), "=", label.value(), "\n");
            }
            Last& entry = last[{stream.node, declared->second.decl.name(), labels}];
            entry.decl = declared->second.decl;
            entry.present = here;
            if (!here) continue;
            if (k >= batch.value_deltas_size()) {
              error = absl::StrCat("a batch of ", record.node, " has too few values");
              return false;
            }
            declared->second.raw += static_cast<uint64_t>(batch.value_deltas(k++));
            entry.raw = declared->second.raw;
          }
        }
        return true;
      });
  if (!read.ok() || !error.empty()) {
    std::fprintf(stderr, "%s: %s\n", argv[1],
                 read.ok() ? error.c_str() : std::string(read.status().message()).c_str());
    return 1;
  }
  for (const auto& [key, entry] : last) {
    std::string labels;
    for (const auto& label : entry.decl.labels()) {
      absl::StrAppend(&labels, labels.empty() ? "" : ",", Quoted(label.name()), ":",
                      Quoted(label.value()));
    }
    const char* type = entry.decl.type() == fabricmon::v1::METRIC_TYPE_COUNTER ? "counter"
                       : entry.decl.type() == fabricmon::v1::METRIC_TYPE_GAUGE ? "gauge"
                                                                               : "info";
    std::printf(
        "{\"node\":%s,\"name\":%s,\"labels\":{%s},\"type\":\"%s\",\"scale\":%.17g,"
        "\"raw\":\"%llu\",\"present\":%s}\n",
        Quoted(std::get<0>(key)).c_str(), Quoted(entry.decl.name()).c_str(), labels.c_str(), type,
        entry.decl.scale() == 0 ? 1.0 : entry.decl.scale(),
        static_cast<unsigned long long>(entry.raw), entry.present ? "true" : "false");
  }
  return 0;
}
