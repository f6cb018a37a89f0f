// The exposition path for agent-chosen strings: HELP texts, label names and label values →
// SeriesDeclaration (wire) → FromDeclaration → FamilyRegistry::Admit (catalogue, reserved
// families, pinning) → two nodes' series → MetricsExporter (both writers). Whatever the bytes,
// the text parses line by line (testing::CheckTextFormat: no unescaped newline inside a HELP or
// sample line, only the format's escapes), the two writers agree, and no line an agent could
// write appears as a sample of the aggregator's own families.
//
// Input: fields separated by 0x1F. Field 0 picks the family and type (its bytes, see Pick);
// field 1 is the HELP; then label name / label value pairs. Node "a" declares it, then node "b"
// declares the same with the type or HELP changed when field 0 asks (a pin conflict).

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/store/series_store.h"
#include "daemon/wire/metric_catalogue.h"
#include "daemon/wire/series_codec.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/text_format_check.h"

namespace {

using fabricmon::collectors::MetricType;
using fabricmon::collectors::SeriesDesc;

constexpr size_t kMaxLabels = 8;

// Field 0: byte 0 the kind of family, byte 1 what node b changes, byte 2 a catalogue index.
SeriesDesc Pick(absl::string_view selector) {
  const auto byte = [&](size_t i) -> uint8_t {
    return i < selector.size() ? static_cast<uint8_t>(selector[i]) : 0;
  };
  const auto& catalogue = fabricmon::wire::MetricCatalogue::Project().families();
  SeriesDesc desc;
  desc.collector = "fuzz";
  switch (byte(0) % 4) {
    case 0: {
      desc = catalogue[byte(2) % catalogue.size()].ConformingSeries("fuzz");
      break;
    }
    case 1:
      desc.name = "fabricmon_fuzz_total";
      desc.type = MetricType::kCounter;
      break;
    case 2:
      desc.name = "fabricmon_fuzz_bytes";
      desc.type = MetricType::kGauge;
      break;
    default:
      desc.name = byte(2) % 2 ? "fabricmon_node_up" : "fabricmon_finding_active";
      desc.type = MetricType::kGauge;
      break;
  }
  if (desc.type == MetricType::kCounter && desc.width_bits == 0) {
    desc.width_bits = 64;
    desc.overflow = fabricmon::collectors::Overflow::kWraps;
  }
  return desc;
}

// What HandleDeclarations does with one declaration on node `node`, then one sample.
void Ingest(fabricmon::store::SeriesStore& store, fabricmon::store::NodeState& node,
            const SeriesDesc& wanted, uint64_t sequence, int64_t now) {
  SeriesDesc finalized = wanted;
  finalized.Finalize();
  absl::StatusOr<SeriesDesc> desc =
      fabricmon::wire::FromDeclaration(fabricmon::wire::ToDeclaration(finalized, 1));
  if (!desc.ok()) {
    return;
  }
  if (!store.families().Admit(*desc).ok()) {
    return;
  }
  // What was admitted is the aggregator's to write: not reserved, labels it can carry.
  FABRICMON_FUZZ_CHECK(!fabricmon::wire::IsReservedFamily(desc->name));
  for (const auto& [name, value] : desc->labels) {
    FABRICMON_FUZZ_CHECK(fabricmon::wire::CheckLabelName(name).ok());
    FABRICMON_FUZZ_CHECK(fabricmon::wire::IsValidUtf8(value));
  }
  absl::StatusOr<uint32_t> index = node.Declare(*desc);
  if (!index.ok()) {
    return;
  }
  node.AppendBatch(sequence, 0, now, {*index}, {sequence * 7}, {true}, now);
}

}  // namespace

FABRICMON_FUZZ_TARGET(exposition) {
  const std::vector<absl::string_view> fields =
      absl::StrSplit(fabricmon::fuzz::AsText(data, size), '\x1f');
  SeriesDesc desc = Pick(fields[0]);
  desc.help = fields.size() > 1 ? std::string(fields[1]) : "";
  for (size_t i = 2; i + 1 < fields.size() && desc.labels.size() < kMaxLabels; i += 2) {
    desc.labels.emplace_back(std::string(fields[i]), std::string(fields[i + 1]));
  }

  fabricmon::testing::FakeClock clock;
  fabricmon::store::SeriesStore store(fabricmon::store::StoreOptions{});
  fabricmon::aggregator::IngestStats stats;
  std::shared_ptr<fabricmon::store::NodeState> nodes[2];
  const char* names[] = {"a", "b"};
  for (int n = 0; n < 2; ++n) {
    fabricmon::v1::Hello hello;
    hello.set_node_name(names[n]);
    hello.set_agent_instance_id(n + 1);
    hello.set_boot_id("boot");
    auto attached = store.Attach(
        hello, n + 1, [] {}, clock.NowUnixNanos());
    FABRICMON_FUZZ_CHECK(attached.ok());
    nodes[n] = attached->node;
  }
  Ingest(store, *nodes[0], desc, 1, clock.NowUnixNanos());
  const uint8_t change = fields[0].size() > 1 ? static_cast<uint8_t>(fields[0][1]) : 0;
  if (change % 3 == 1) {
    desc.type = desc.type == MetricType::kCounter ? MetricType::kGauge : MetricType::kCounter;
    desc.width_bits = desc.type == MetricType::kCounter ? 64 : 0;
    desc.overflow = desc.type == MetricType::kCounter
                        ? fabricmon::collectors::Overflow::kWraps
                        : fabricmon::collectors::Overflow::kNotApplicable;
  } else if (change % 3 == 2) {
    desc.help += "\nfabricmon_node_up{node=\"victim\"} 1";
  }
  Ingest(store, *nodes[1], desc, 2, clock.NowUnixNanos());

  fabricmon::aggregator::MetricsExporter exporter(store, stats, clock,
                                                  fabricmon::aggregator::ExporterOptions{});
  std::string direct;
  exporter.AppendText(&direct);
  const std::string problem = fabricmon::testing::CheckTextFormat(direct);
  if (!problem.empty()) {
    std::fprintf(stderr, "%s\n", problem.c_str());
  }
  FABRICMON_FUZZ_CHECK(problem.empty());
  FABRICMON_FUZZ_CHECK(direct == fabricmon::exposition::SerializeText(exporter.Collect()));
  for (absl::string_view line : absl::StrSplit(direct, '\n')) {
    FABRICMON_FUZZ_CHECK(!absl::StartsWith(line, "fabricmon_node_up{node=\"victim"));
    FABRICMON_FUZZ_CHECK(!absl::StartsWith(line, "fabricmon_finding_active"));
  }
}
