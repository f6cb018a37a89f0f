#include "daemon/wire/series_codec.h"

#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::wire {
namespace {

using collectors::CounterSeries;
using collectors::GaugeSeries;
using collectors::InfoSeries;
using collectors::MetricType;
using collectors::Overflow;
using collectors::SeriesDesc;
using collectors::Unit;
using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::StatusIs;
using ::testing::HasSubstr;

v1::SeriesDeclaration ValidCounter() {
  return ToDeclaration(CounterSeries("ib_sysfs", "fabricmon_ib_port_xmit_data_bytes_total",
                                     "Data transmitted.", Unit::kBytes, 64, Overflow::kSaturates,
                                     4.0, {{"device", "mlx5_0"}, {"port", "1"}}),
                       7);
}

TEST(SeriesCodecTest, DeclarationRoundTripsEveryKind) {
  const SeriesDesc descs[] = {
      CounterSeries("ib_sysfs", "fabricmon_ib_port_xmit_data_bytes_total", "Data transmitted.",
                    Unit::kBytes, 64, Overflow::kSaturates, 4.0,
                    {{"device", "mlx5_0"}, {"port", "1"}}),
      CounterSeries("ethtool", "fabricmon_ethtool_rx_pause_seconds_total", "Pause time.",
                    Unit::kSeconds, 32, Overflow::kWraps, 1e-6, {{"netdev", "eth0"}}),
      GaugeSeries("ib_sysfs", "fabricmon_ib_port_state", "State.", Unit::kState, 1.0,
                  {{"device", "mlx5_0"}, {"port", "1"}}),
      InfoSeries("ib_sysfs", "fabricmon_ib_device_info", "Identity.",
                 {{"device", "mlx5_0"}, {"fw_ver", "28.41.1000"}, {"hca_type", "MT4129"}}),
      CounterSeries("agent", "fabricmon:recorded_total", "Colon is legal in metric names.",
                    Unit::kNone, 4, Overflow::kWraps, 1.0, {}),
  };
  for (const SeriesDesc& desc : descs) {
    SCOPED_TRACE(desc.name);
    absl::StatusOr<SeriesDesc> back = FromDeclaration(ToDeclaration(desc, 3));
    ASSERT_THAT(back, IsOk());
    EXPECT_EQ(back->fingerprint, desc.fingerprint);
    EXPECT_EQ(back->collector, desc.collector);
    EXPECT_EQ(back->name, desc.name);
    EXPECT_EQ(back->help, desc.help);
    EXPECT_EQ(back->labels, desc.labels);
    EXPECT_EQ(back->type, desc.type);
    EXPECT_EQ(back->unit, desc.unit);
    EXPECT_EQ(back->width_bits, desc.width_bits);
    EXPECT_EQ(back->overflow, desc.overflow);
    EXPECT_EQ(back->scale, desc.scale);
  }
}

TEST(SeriesCodecTest, ScaleOneTravelsAsZeroAndZeroMeansOne) {
  const SeriesDesc desc = GaugeSeries("x", "fabricmon_x", "h", Unit::kNone, 1.0, {});
  const v1::SeriesDeclaration declaration = ToDeclaration(desc, 1);
  EXPECT_EQ(declaration.scale(), 0.0);
  absl::StatusOr<SeriesDesc> back = FromDeclaration(declaration);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->scale, 1.0);
}

struct BadCase {
  const char* what;
  std::function<void(v1::SeriesDeclaration&)> mutate;
  const char* message;  // substring the error must contain
};

void PrintTo(const BadCase& bad, std::ostream* os) { *os << bad.what; }

class FromDeclarationRejectsTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(FromDeclarationRejectsTest, WithInvalidArgumentAndAReason) {
  v1::SeriesDeclaration declaration = ValidCounter();
  ASSERT_THAT(FromDeclaration(declaration), IsOk());
  GetParam().mutate(declaration);
  absl::StatusOr<SeriesDesc> desc = FromDeclaration(declaration);
  EXPECT_THAT(desc, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(desc.status().message(), HasSubstr(GetParam().message));
}

void SetLabel(v1::SeriesDeclaration& d, int index, std::string name, std::string value) {
  v1::Label* label = d.mutable_labels(index);
  label->set_name(std::move(name));
  label->set_value(std::move(value));
}

void AddLabel(v1::SeriesDeclaration& d, std::string name, std::string value) {
  v1::Label* label = d.add_labels();
  label->set_name(std::move(name));
  label->set_value(std::move(value));
}

INSTANTIATE_TEST_SUITE_P(
    Hostile, FromDeclarationRejectsTest,
    ::testing::Values(
        BadCase{"id_zero", [](auto& d) { d.set_id(0); }, "series id 0 is reserved"},
        BadCase{"empty_name", [](auto& d) { d.set_name(""); }, "invalid metric name"},
        BadCase{"name_starts_with_digit", [](auto& d) { d.set_name("1fabricmon"); },
                "invalid metric name"},
        BadCase{"name_with_dash", [](auto& d) { d.set_name("fabricmon-x"); },
                "invalid metric name"},
        BadCase{"name_with_space", [](auto& d) { d.set_name("fabricmon x"); },
                "invalid metric name"},
        BadCase{"name_with_utf8", [](auto& d) { d.set_name("fabricmon_\xc3\xa4"); },
                "invalid metric name"},
        BadCase{"name_too_long", [](auto& d) { d.set_name(std::string(201, 'a')); },
                "invalid metric name"},
        BadCase{"label_name_empty", [](auto& d) { SetLabel(d, 0, "", "x"); }, "invalid label name"},
        BadCase{"label_name_reserved_prefix", [](auto& d) { SetLabel(d, 0, "__name__", "x"); },
                "invalid label name"},
        BadCase{"label_name_colon", [](auto& d) { SetLabel(d, 0, "a:b", "x"); },
                "invalid label name"},
        BadCase{"label_name_digit_first", [](auto& d) { SetLabel(d, 0, "0a", "x"); },
                "invalid label name"},
        BadCase{"label_name_too_long", [](auto& d) { SetLabel(d, 0, std::string(65, 'a'), "x"); },
                "invalid label name"},
        BadCase{"reserved_node_label", [](auto& d) { AddLabel(d, "node", "evil"); },
                "label 'node' is reserved"},
        BadCase{"duplicate_label", [](auto& d) { AddLabel(d, "device", "mlx5_1"); },
                "duplicate label device"},
        BadCase{"too_many_labels",
                [](auto& d) {
                  for (int i = 0; i < 15; ++i) {
                    AddLabel(d, absl::StrCat("l", i), "v");
                  }
                },
                "too many labels"},
        BadCase{"label_value_too_long",
                [](auto& d) { SetLabel(d, 0, "device", std::string(257, 'x')); }, "not UTF-8"},
        BadCase{"label_value_invalid_byte", [](auto& d) { SetLabel(d, 0, "device", "mlx5_\xff"); },
                "not UTF-8"},
        BadCase{"label_value_truncated_sequence",
                [](auto& d) { SetLabel(d, 0, "device", "mlx5_\xe2\x82"); }, "not UTF-8"},
        BadCase{"label_value_lone_continuation",
                [](auto& d) { SetLabel(d, 0, "device", "\x80mlx5"); }, "not UTF-8"},
        // Forms a lenient decoder accepts but Prometheus (Go's utf8.ValidString) does not: one
        // such label value would make every scrape of the aggregator fail.
        BadCase{"label_value_overlong_nul", [](auto& d) { SetLabel(d, 0, "device", "a\xc0\x80"); },
                "not UTF-8"},
        BadCase{"label_value_overlong_slash",
                [](auto& d) { SetLabel(d, 0, "device", "\xe0\x80\xaf"); }, "not UTF-8"},
        BadCase{"label_value_surrogate", [](auto& d) { SetLabel(d, 0, "device", "\xed\xa0\x80"); },
                "not UTF-8"},
        BadCase{"label_value_above_unicode",
                [](auto& d) { SetLabel(d, 0, "device", "\xf4\x90\x80\x80"); }, "not UTF-8"},
        BadCase{"counter_width_zero", [](auto& d) { d.set_width_bits(0); },
                "counter width must be"},
        BadCase{"counter_width_too_wide", [](auto& d) { d.set_width_bits(65); },
                "counter width must be"},
        BadCase{"counter_width_huge", [](auto& d) { d.set_width_bits(4294967295u); },
                "counter width must be"},
        BadCase{"type_unspecified", [](auto& d) { d.set_type(v1::METRIC_TYPE_UNSPECIFIED); },
                "unknown metric type"},
        BadCase{"type_out_of_range", [](auto& d) { d.set_type(static_cast<v1::MetricType>(42)); },
                "unknown metric type"},
        BadCase{"scale_nan", [](auto& d) { d.set_scale(std::numeric_limits<double>::quiet_NaN()); },
                "scale not finite"},
        BadCase{"scale_infinite",
                [](auto& d) { d.set_scale(std::numeric_limits<double>::infinity()); },
                "scale not finite"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.what; });

TEST(SeriesCodecTest, AcceptsValidUtf8LabelValues) {
  v1::SeriesDeclaration declaration = ValidCounter();
  // Two-, three- and four-byte sequences at the edges of their ranges.
  SetLabel(declaration, 0, "device",
           "\xc2\x80 \xdf\xbf \xe0\xa0\x80 \xef\xbf\xbf \xf0\x90\x80\x80 "
           "\xf4\x8f\xbf\xbf gr\xc3\xbc\xc3\x9f \xe2\x82\xac");
  EXPECT_THAT(FromDeclaration(declaration), IsOk());
}

TEST(SeriesCodecTest, WidthBoundariesAndGaugesIgnoreWidth) {
  v1::SeriesDeclaration declaration = ValidCounter();
  for (uint32_t width : {1u, 4u, 32u, 64u}) {
    declaration.set_width_bits(width);
    absl::StatusOr<SeriesDesc> desc = FromDeclaration(declaration);
    ASSERT_THAT(desc, IsOk()) << width;
    EXPECT_EQ(desc->width_bits, width);
  }
  declaration.set_type(v1::METRIC_TYPE_GAUGE);
  declaration.set_width_bits(0);
  absl::StatusOr<SeriesDesc> gauge = FromDeclaration(declaration);
  ASSERT_THAT(gauge, IsOk());
  EXPECT_EQ(gauge->type, MetricType::kGauge);
}

// Refused, never cut or blanked: what is stored is what the agent sent, or nothing.
TEST(SeriesCodecTest, InvalidOrOversizedHelpAndCollectorAreRefused) {
  v1::SeriesDeclaration declaration = ValidCounter();
  declaration.set_help("bad \xff help");
  EXPECT_THAT(FromDeclaration(declaration), StatusIs(absl::StatusCode::kInvalidArgument));
  declaration.set_help(std::string(1025, 'h'));
  EXPECT_THAT(FromDeclaration(declaration), StatusIs(absl::StatusCode::kInvalidArgument));
  declaration.set_help(std::string(1024, 'h'));
  EXPECT_THAT(FromDeclaration(declaration), IsOk());
  declaration.set_collector(std::string(65, 'c'));
  EXPECT_THAT(FromDeclaration(declaration), StatusIs(absl::StatusCode::kInvalidArgument));
  declaration.set_collector("bad \xc0\x80");
  EXPECT_THAT(FromDeclaration(declaration), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SeriesCodecTest, UnknownUnitIsNone) {
  v1::SeriesDeclaration declaration = ValidCounter();
  declaration.set_unit(static_cast<v1::Unit>(99));
  absl::StatusOr<SeriesDesc> desc = FromDeclaration(declaration);
  ASSERT_THAT(desc, IsOk());
  EXPECT_EQ(desc->unit, Unit::kNone);
}

TEST(SeriesCodecTest, CounterOverflowDefaultsToWrapping) {
  v1::SeriesDeclaration declaration = ValidCounter();
  declaration.set_overflow(v1::OVERFLOW_UNSPECIFIED);
  absl::StatusOr<SeriesDesc> desc = FromDeclaration(declaration);
  ASSERT_THAT(desc, IsOk());
  EXPECT_EQ(desc->overflow, Overflow::kWraps);
}

TEST(SeriesCodecTest, NameValidators) {
  EXPECT_TRUE(IsValidMetricName("fabricmon_ib_port_xmit_data_bytes_total"));
  EXPECT_TRUE(IsValidMetricName(":recording:rule"));
  EXPECT_TRUE(IsValidMetricName("_x9"));
  EXPECT_FALSE(IsValidMetricName("9x"));
  EXPECT_FALSE(IsValidMetricName("a.b"));
  EXPECT_TRUE(IsValidLabelName("device"));
  EXPECT_TRUE(IsValidLabelName("_private"));
  EXPECT_FALSE(IsValidLabelName("__reserved"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName(""));
}

}  // namespace
}  // namespace fabricmon::wire
