// The benchmarks' node model: a fabric with a few bad links, not one that decays. Every figure the
// load generator prints is that of the fabric it simulates (the findings it raises cost each
// detector tick), so the shape is pinned here.

#include "tests/bench/stream/node_model.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fabricmon::bench {
namespace {

std::string PortOf(const collectors::SeriesDesc& desc) {
  std::string device, port;
  for (const auto& [name, value] : desc.labels) {
    if (name == "device") device = value;
    if (name == "port") port = value;
  }
  return device.empty() || port.empty() ? std::string() : absl::StrCat(device, "/", port);
}

uint64_t Moved(const std::vector<NodeSeries>& series, const ValueModel& model, size_t i) {
  return (model.values()[i] - series[i].initial) & series[i].desc.MaxRaw();
}

TEST(NodeModelTest, LinkErrorsRiseOnlyOnTheFewBadPorts) {
  const std::vector<NodeSeries> series = SyntheticNodeSeries(500);
  size_t ports = 0, bad = 0, link_error_series = 0;
  for (uint64_t node = 1; node <= 2000; ++node) {
    ValueModel model(series, Profile::kMixed, node);
    for (int second = 0; second < 60; ++second) model.Next();
    const std::set<std::string> bad_ports(model.bad_ports().begin(), model.bad_ports().end());
    std::set<std::string> node_ports;
    for (size_t i = 0; i < series.size(); ++i) {
      const std::string port = PortOf(series[i].desc);
      if (!port.empty()) node_ports.insert(port);
      if (series[i].motion != Motion::kLinkError) continue;
      ++link_error_series;
      if (!bad_ports.count(port)) {
        EXPECT_EQ(Moved(series, model, i), 0u) << series[i].desc.name << " on healthy " << port;
      }
    }
    ports += node_ports.size();
    bad += bad_ports.size();
  }
  // The symbol errors, receive errors, link downed, ... of every port.
  EXPECT_GE(link_error_series, 2000u * 7);
  // About kBadPortShare of the ports (2000 nodes x ~10 ports: 1 % is ~200, sd ~14).
  const double share = static_cast<double>(bad) / static_cast<double>(ports);
  EXPECT_GT(share, kBadPortShare * 0.7);
  EXPECT_LT(share, kBadPortShare * 1.3);
}

TEST(NodeModelTest, ABadPortIsDegradedWithinAMinuteAndGoesDownNowAndThen) {
  const std::vector<NodeSeries> series = SyntheticNodeSeries(500);
  size_t bad_ports = 0, downs = 0;
  for (uint64_t node = 1; node <= 2000; ++node) {
    ValueModel model(series, Profile::kMixed, node);
    if (model.bad_ports().empty()) continue;
    for (int second = 0; second < 60; ++second) model.Next();
    for (const std::string& port : model.bad_ports()) {
      ++bad_ports;
      uint64_t errors = 0;
      for (size_t i = 0; i < series.size(); ++i) {
        if (series[i].motion != Motion::kLinkError || PortOf(series[i].desc) != port) continue;
        if (series[i].desc.name == "fabricmon_ib_link_downed_total") {
          downs += Moved(series, model, i);
        } else {
          errors += Moved(series, model, i);
        }
      }
      // link_degraded's threshold is 10 errors in 5 minutes.
      EXPECT_GE(errors, 10u) << "node " << node << " port " << port;
    }
  }
  ASSERT_GT(bad_ports, 100u);
  // About one down per bad port every 4 minutes: a quarter of them in a minute, give or take.
  const double downs_per_port = static_cast<double>(downs) / static_cast<double>(bad_ports);
  EXPECT_GT(downs_per_port, 0.1);
  EXPECT_LT(downs_per_port, 0.5);
}

TEST(NodeModelTest, IdleMovesNothing) {
  const std::vector<NodeSeries> series = SyntheticNodeSeries(500);
  ValueModel model(series, Profile::kIdle, 7);
  for (int second = 0; second < 100; ++second) model.Next();
  EXPECT_TRUE(model.bad_ports().empty());
  for (size_t i = 0; i < series.size(); ++i) {
    EXPECT_EQ(model.values()[i], series[i].initial) << series[i].desc.name;
  }
}

}  // namespace
}  // namespace fabricmon::bench
