// Property: whatever HELP texts, label names and label values agents declare (newlines, quotes,
// backslashes, '#', '{', invalid UTF-8, huge strings; catalogued families with the right or the
// wrong type, families of their own, the aggregator's reserved families), the aggregator's
// /metrics stays a valid exposition: `promtool check metrics` passes, every line parses, no line
// an agent wrote reaches it as a sample of its own, and an honest node's lines never change.
//
// Real ingest path (AgentStream over an in-process gRPC channel, the hostile peer a raw stream)
// and real exporter (MetricsExporter::AppendText, what /metrics serves, and Collect() through
// exposition::SerializeText). Bounded rounds from a fixed seed, printed on failure; set
// FABRICMON_PROPERTY_SEED to replay another.

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/wire/metric_catalogue.h"
#include "daemon/wire/series_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/stream_harness.h"
#include "tests/testing/temp_tree.h"
#include "tests/testing/text_format_check.h"

namespace fabricmon::testing {
namespace {

using collectors::MetricType;

constexpr uint32_t kDefaultSeed = 20261125;
constexpr int kRounds = 40;
constexpr char kVictim[] = "honest-node";

std::string Promtool() {
  for (const char* path : {"/usr/bin/promtool", "/usr/local/bin/promtool"}) {
    if (access(path, X_OK) == 0) {
      return path;
    }
  }
  return "";
}

// Runs `promtool check metrics` on `text`; "" when it passes, else its exit status and output.
std::string PromtoolCheck(const std::string& promtool, const std::string& text) {
  char input_path[] = "/tmp/fabricmon_property_XXXXXX";
  const int fd = mkstemp(input_path);
  if (fd < 0) {
    return "mkstemp failed";
  }
  close(fd);
  {
    std::ofstream out(input_path, std::ios::binary);
    out << text;
  }
  const std::string command = absl::StrCat(promtool, " check metrics < ", input_path, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (pipe != nullptr && fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    output += buffer;
  }
  const int status = pipe != nullptr ? pclose(pipe) : -1;
  unlink(input_path);
  if (status == 0) {
    return "";
  }
  return absl::StrCat("promtool exit status ", status, ": ", output.substr(0, 2000));
}

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  uint32_t Below(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }

  // A string an attacker would try: pieces of syntax, forged lines, bad and good UTF-8. Five
  // in six are valid UTF-8 of normal size (what gets past decoding and reaches the writer).
  std::string Text() {
    static const char* const kPieces[] = {
        "a", " ", "help", "\n", "\"", "\\", "#", "{", "}", "=", ",", "\\n", "\r", "\t",
        "# TYPE fabricmon_node_up counter", "\nfabricmon_node_up{node=\"victim-forged\"} 1\n",
        "fabricmon_finding_active{kind=\"link_flapping\"} 1", "\xc3\xa9", "\xe2\x9c\x93",
        // invalid UTF-8 from here on
        "\xff", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80"};
    constexpr size_t kValidPieces = 19;
    const uint32_t count = Below(6) != 0 ? kValidPieces : sizeof(kPieces) / sizeof(kPieces[0]);
    std::string out;
    if (count != kValidPieces && Below(20) == 0) {
      out.assign(1000 + Below(200000), 'x');  // huge: refused, never cut
    }
    const uint32_t n = Below(8);
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t piece = Below(count + 1);
      if (piece == count) {
        out.push_back('\0');
      } else {
        out += kPieces[piece];
      }
    }
    return out;
  }

  std::string LabelName() {
    static const char* const kNames[] = {"device",    "port",  "key", "x",        "_y",   "lane",
                                         "direction", "gpu",   "le",  "quantile", "node", "metric",
                                         "__name__",  "Camel", "a-b", "9x",       ""};
    if (Below(12) == 0) {
      return Text();
    }
    return kNames[Below(sizeof(kNames) / sizeof(kNames[0]))];
  }

  // One declaration of a random kind.
  v1::SeriesDeclaration Declaration(uint32_t id) {
    collectors::SeriesDesc desc;
    desc.collector = "hostile";
    const auto& catalogue = wire::MetricCatalogue::Project().families();
    switch (Below(6)) {
      case 0:
      case 1: {  // a catalogued family, right or (sometimes) wrong semantics
        const wire::CatalogueFamily& family = catalogue[Below(catalogue.size())];
        desc = family.ConformingSeries("hostile");
        if (Below(4) == 0) {
          desc.type =
              family.type == MetricType::kCounter ? MetricType::kGauge : MetricType::kCounter;
          desc.width_bits = desc.type == MetricType::kCounter ? 64 : 0;
          desc.overflow = collectors::Overflow::kWraps;
        }
        break;
      }
      case 2:
      case 3:
      case 4: {  // a family of the agent's own
        static const char* const kOwn[] = {"fabricmon_prop_alpha_total", "fabricmon_prop_beta",
                                           "fabricmon_prop_gamma_bytes", "fabricmon_x_ms",
                                           "fabricmon_prop_delta_total", "not_ours_total"};
        desc.name = kOwn[Below(sizeof(kOwn) / sizeof(kOwn[0]))];
        desc.type = absl::EndsWith(desc.name, "_total") ? MetricType::kCounter : MetricType::kGauge;
        if (Below(5) == 0) {
          desc.type = desc.type == MetricType::kCounter ? MetricType::kGauge : MetricType::kCounter;
        }
        break;
      }
      default: {  // the aggregator's own
        static const char* const kReserved[] = {"fabricmon_node_up", "fabricmon_finding_active",
                                                "fabricmon_aggregator_series",
                                                "fabricmon_series_saturated"};
        desc.name = kReserved[Below(4)];
        desc.type = MetricType::kGauge;
        break;
      }
    }
    if (desc.type == MetricType::kCounter) {
      if (desc.width_bits == 0) {
        desc.width_bits = 64;
        desc.overflow = collectors::Overflow::kWraps;
      }
    } else {
      desc.width_bits = 0;
      desc.overflow = collectors::Overflow::kNotApplicable;
    }
    desc.help = Below(6) == 0 ? "Plain help." : Text();
    const uint32_t labels = Below(3);
    for (uint32_t i = 0; i < labels; ++i) {
      std::string name = LabelName();
      const bool repeated = std::any_of(desc.labels.begin(), desc.labels.end(),
                                        [&](const auto& label) { return label.first == name; });
      if (!repeated || Below(8) == 0) {  // a duplicate label now and then
        desc.labels.emplace_back(std::move(name), Text());
      }
    }
    desc.Finalize();
    return wire::ToDeclaration(desc, id);
  }

 private:
  std::mt19937 rng_;
};

// Lines of `text` about node `node` (its series and its node health).
std::vector<std::string> NodeLines(const std::string& text, const std::string& node) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, absl::StrCat("node=\"", node, "\"")) &&
        !absl::StartsWith(line, "fabricmon_node_last_seen_age_seconds")) {
      lines.emplace_back(line);
    }
  }
  return lines;
}

// Sends `messages` and reads until the batch of sequence 1 is acknowledged, a Reject comes, or
// the stream ends. The stream stays open (its node stays up) until the caller finishes it.
std::string Drive(RawStream& raw, const std::vector<v1::AgentMessage>& messages) {
  for (const v1::AgentMessage& message : messages) {
    if (!raw.Write(message)) {
      break;
    }
  }
  for (;;) {
    std::optional<v1::AggregatorMessage> reply = raw.Read();
    if (!reply.has_value()) {
      return "ended";
    }
    if (reply->has_reject()) {
      return absl::StrCat("reject ", v1::Reject::Reason_Name(reply->reject().reason()), ": ",
                          reply->reject().message().substr(0, 200));
    }
    if (reply->has_ack() && reply->ack().sequence() >= 1) {
      return "stored";
    }
  }
}

TEST(ExpositionPropertyTest, HostileDeclarationsNeverBreakOrForgeMetrics) {
  const std::string promtool = Promtool();
  if (promtool.empty()) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  }
  uint32_t seed = kDefaultSeed;
  if (const char* env = std::getenv("FABRICMON_PROPERTY_SEED")) {
    ASSERT_TRUE(absl::SimpleAtoi(env, &seed)) << env;
  }
  SCOPED_TRACE(absl::StrCat("seed ", seed, " (FABRICMON_PROPERTY_SEED=", seed, " replays it)"));
  Generator gen(seed);

  AggregatorHarness aggregator(Transport::kTcp, AggregatorOptions{});
  ASSERT_TRUE(aggregator.Start());
  auto now = [] { return absl::ToUnixNanos(absl::Now()); };

  // An honest node: a catalogued counter and a family of its own. Its stream is opened again
  // each round (the same agent instance reconnecting, with the same values), so that it is up at
  // every scrape whatever the raw streams' deadline.
  uint64_t victim_sequence = 0;
  std::unique_ptr<RawStream> victim;
  auto stream_victim = [&]() -> std::string {
    auto next = std::make_unique<RawStream>(aggregator.channel());
    v1::AgentMessage declarations;
    collectors::SeriesDesc xmit = collectors::CounterSeries(
        "ib_sysfs", "fabricmon_ib_port_xmit_data_bytes_total", "x", collectors::Unit::kBytes, 64,
        collectors::Overflow::kSaturates, 4.0, {{"device", "mlx5_0"}, {"port", "1"}});
    collectors::SeriesDesc own = collectors::CounterSeries(
        "ib_sysfs", "fabricmon_prop_alpha_total", "The victim's own family.",
        collectors::Unit::kNone, 64, collectors::Overflow::kWraps, 1.0, {{"device", "mlx5_0"}});
    *declarations.mutable_declarations()->add_series() = wire::ToDeclaration(xmit, 1);
    *declarations.mutable_declarations()->add_series() = wire::ToDeclaration(own, 2);
    ++victim_sequence;
    const std::string outcome =
        Drive(*next, {HelloMessage(kVictim, "boot-v", 1), declarations, LayoutMessage(1, {1, 2}),
                      BatchMessage(victim_sequence, now(), 1, {250, 17})});
    if (victim != nullptr) {
      (void)victim->Finish();  // taken over by `next`
    }
    victim = std::move(next);
    return outcome;
  };
  ASSERT_EQ(stream_victim(), "stored");
  std::string text;
  aggregator.state().exporter()->AppendText(&text);
  const std::vector<std::string> victim_lines = NodeLines(text, kVictim);
  ASSERT_THAT(victim_lines, ::testing::Contains(::testing::HasSubstr(
                                "fabricmon_ib_port_xmit_data_bytes_total{node=\"honest-node\","
                                "device=\"mlx5_0\",port=\"1\"} 1000")));

  int stored = 0;
  int rejected = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    ASSERT_EQ(stream_victim(), "stored");
    RawStream raw(aggregator.channel());
    v1::AgentMessage declarations;
    const uint32_t count = 1 + gen.Below(2);
    std::vector<uint32_t> ids;
    std::vector<int64_t> deltas;
    for (uint32_t id = 1; id <= count; ++id) {
      *declarations.mutable_declarations()->add_series() = gen.Declaration(id);
      ids.push_back(id);
      deltas.push_back(gen.Below(1000));
    }
    const std::string outcome =
        Drive(raw, {HelloMessage(absl::StrCat("hostile-", round), "boot-h", 100 + round),
                    declarations, LayoutMessage(1, ids), BatchMessage(1, now(), 1, deltas)});
    outcome == "stored" ? ++stored : ++rejected;
    std::fprintf(stderr, "round %d: %s\n", round, outcome.c_str());

    // Scraped while the hostile stream is open, so whatever it got stored is exported. promtool
    // reads what /metrics serves (AppendText); both writers must parse line by line.
    std::string direct;
    aggregator.state().exporter()->AppendText(&direct);
    ASSERT_EQ(PromtoolCheck(promtool, direct), "") << outcome << "\n" << direct;
    const std::string collected =
        exposition::SerializeText(aggregator.state().exporter()->Collect());
    for (const std::string* scraped : {static_cast<const std::string*>(&direct), &collected}) {
      ASSERT_EQ(CheckTextFormat(*scraped), "") << outcome;
      for (absl::string_view line : absl::StrSplit(*scraped, '\n')) {
        ASSERT_FALSE(absl::StartsWith(line, "fabricmon_node_up{node=\"victim")) << line;
        ASSERT_FALSE(absl::StartsWith(line, "fabricmon_finding_active")) << line;
      }
      ASSERT_EQ(NodeLines(*scraped, kVictim), victim_lines);
    }
    (void)raw.Finish();
  }
  // The rounds exercised both sides of the rules (the default seed stores 5 of 40 rounds).
  EXPECT_GE(stored, 3);
  EXPECT_GE(rejected, 3);
  std::string final_text;
  aggregator.state().exporter()->AppendText(&final_text);
  EXPECT_THAT(final_text, ::testing::HasSubstr("reason=\"declaration_conflict\""));
  EXPECT_THAT(final_text, ::testing::Not(::testing::HasSubstr(
                              "fabricmon_aggregator_rejected_messages_total{reason="
                              "\"reserved_family\"} 0")));
  (void)victim->Finish();
}

}  // namespace
}  // namespace fabricmon::testing
