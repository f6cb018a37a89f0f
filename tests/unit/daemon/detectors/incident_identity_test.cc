// A finding is an incident: one identity, labels that do not change while it lasts, one count in
// fabricmon_findings_total, cleared only by its rule. And every port is its owner's: a CA port
// swept from the fabric is the port of the node whose agent claims that HCA, not the sweeper's.
//
// Names are deliberately not the demo's (node01, leaf01): gpu-a17, r3-tor2, stor-9.

#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/detectors/engine.h"
#include "daemon/detectors/families.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "tests/unit/daemon/detectors/detector_test_util.h"

namespace fabricmon::detectors {
namespace {

using testing::Exported;
using testing::FabricFixture;
using testing::Hca;
using testing::HostCounter;

constexpr char kTorGuid[] = "0x0008f10500aa0002";
constexpr char kSpineGuid[] = "0x0008f10500bb0001";

std::string HcaGuid(int host) {
  return absl::StrCat("0x0002c90300cc", absl::Hex(host, absl::kZeroPad4));
}

// What a fabric sweeper's inventory says: r3-tor2's ports 1..n cabled to HCA guids (or none when
// the cable is down: rediscovery does not see a down cable).
v1::Inventory Sweep(const std::vector<std::pair<uint32_t, std::string>>& tor_ports) {
  v1::Inventory fabric;
  v1::FabricNode* tor = fabric.add_fabric_nodes();
  tor->set_guid(kTorGuid);
  tor->set_type(v1::FabricNode::TYPE_SWITCH);
  tor->set_description("r3-tor2");
  for (const auto& [port, hca_guid] : tor_ports) {
    v1::FabricLink* link = fabric.add_fabric_links();
    link->set_a_guid(kTorGuid);
    link->set_a_port(port);
    link->set_b_guid(hca_guid);
    link->set_b_port(1);
  }
  return fabric;
}

collectors::SeriesDesc TorCounter(const std::string& family, uint32_t port, uint8_t width = 64) {
  return collectors::CounterSeries(
      "ib_fabric", family, "", collectors::Unit::kNone, width, collectors::Overflow::kSaturates,
      1.0, {{"switch", "r3-tor2"}, {"switch_guid", kTorGuid}, {"port", absl::StrCat(port)}});
}

// A CA port as the fabric collector sweeps it (include_hca_ports).
collectors::SeriesDesc CaCounter(const std::string& family, const std::string& guid,
                                 const std::string& description, uint8_t width = 64) {
  return collectors::CounterSeries("ib_fabric", family, "", collectors::Unit::kNone, width,
                                   collectors::Overflow::kSaturates, 1.0,
                                   {{"ca", description}, {"ca_guid", guid}, {"port", "1"}});
}

class IncidentTest : public ::testing::Test {
 protected:
  IncidentTest() {
    v1::DetectorThresholds thresholds;
    thresholds.set_flap_window_s(60);
    thresholds.set_flap_quiet_s(120);
    engine_ =
        std::make_unique<DetectionEngine>(fabric_.store(), fabric_.clock(), thresholds, 1000000000);
  }

  std::vector<TrackedFinding> Active() {
    engine_->Tick();
    return engine_->tracker().Active();
  }

  // The labels of every fabricmon_finding_active series, one "name=value,..." string each.
  std::vector<std::string> ActiveLabels() const {
    std::vector<std::string> out;
    for (const auto& family : Exported(*engine_)) {
      if (family.name != "fabricmon_finding_active") continue;
      for (const auto& metric : family.metric) {
        std::string text;
        for (const auto& label : metric.label) {
          absl::StrAppend(&text, text.empty() ? "" : ",", label.name, "=", label.value);
        }
        out.push_back(text);
      }
    }
    return out;
  }

  double Raised(const std::string& kind, const std::string& severity) const {
    return testing::RaisedIncidents(*engine_, kind, severity);
  }

  FabricFixture fabric_;
  std::unique_ptr<DetectionEngine> engine_;
};

// One cable flapping three times while rediscovery drops and finds it again: both ends count the
// flaps (the host's own LinkDowned, the sweeper's switch-port LinkDowned), the peer comes and goes
// from the topology. One finding, the same id and labels throughout, one increment, and it stays
// until the cable has been quiet for flap_quiet_s.
TEST_F(IncidentTest, AFlappingCableIsOneIncidentWhileRediscoveryLosesIt) {
  const std::string guid = HcaGuid(17);
  fabric_.Node("gpu-a17", Hca("mlx5_3", guid));
  std::shared_ptr<store::NodeState> sweeper = fabric_.Node("r3-sweep", Sweep({{5, guid}}));
  const auto host_downed = HostCounter(families::kIbLinkDowned, "mlx5_3", 1, 8);
  const auto tor_downed = TorCounter(families::kIbLinkDowned, 5, 8);

  uint64_t downs = 0;
  auto sample = [&] {
    fabric_.Set("gpu-a17", host_downed, downs);
    fabric_.Set("r3-sweep", tor_downed, downs);
    fabric_.Step();
  };
  sample();
  sample();
  ASSERT_TRUE(Active().empty());

  std::string id;
  std::vector<std::string> labels;
  for (int flap = 0; flap < 3; ++flap) {
    // Down: the sweep no longer sees the cable; the counters step on both ends.
    sweeper->SetInventory(Sweep({}));
    ++downs;
    sample();
    std::vector<TrackedFinding> active = Active();
    // Up again: rediscovered.
    sweeper->SetInventory(Sweep({{5, guid}}));
    sample();
    std::vector<TrackedFinding> after = Active();
    for (const auto* seen : {&active, &after}) {
      if (flap == 0) {
        EXPECT_TRUE(seen->empty()) << "one link-down is not flapping";
        continue;
      }
      ASSERT_EQ(seen->size(), 1u) << "flap " << flap;
      const TrackedFinding& finding = (*seen)[0];
      EXPECT_EQ(finding.finding.kind, "link_flapping");
      if (id.empty()) {
        id = finding.id;
        labels = ActiveLabels();
        EXPECT_EQ(finding.finding.subject.ToString(), "gpu-a17 mlx5_3/1");
        ASSERT_TRUE(finding.finding.has_peer) << "the peer is the one named while the cable was up";
        EXPECT_EQ(finding.finding.peer.ToString(), "switch r3-tor2/5");
      }
      EXPECT_EQ(finding.id, id) << "flap " << flap;
      EXPECT_EQ(ActiveLabels(), labels) << "flap " << flap;
    }
  }
  ASSERT_EQ(labels.size(), 1u);
  EXPECT_EQ(labels[0],
            "kind=link_flapping,severity=critical,node=gpu-a17,device=mlx5_3,port=1,switch=,"
            "switch_guid=,peer=switch r3-tor2/5");
  EXPECT_EQ(Raised("link_flapping", "critical"), 1);

  // Quiet for less than flap_quiet_s (120 s): still the same incident; then it clears, once.
  for (int i = 0; i < 10; ++i) {
    fabric_.Set("gpu-a17", host_downed, downs);
    fabric_.Set("r3-sweep", tor_downed, downs);
    fabric_.Step(10000);
    std::vector<TrackedFinding> active = Active();
    ASSERT_EQ(active.size(), 1u) << "cleared after only " << (i + 1) * 10 << " s of quiet";
    EXPECT_EQ(active[0].id, id);
  }
  for (int i = 0; i < 3; ++i) {
    fabric_.Set("gpu-a17", host_downed, downs);
    fabric_.Set("r3-sweep", tor_downed, downs);
    fabric_.Step(10000);
  }
  EXPECT_TRUE(Active().empty());
  std::vector<TrackedFinding> recent = engine_->tracker().Recent();
  ASSERT_EQ(recent.size(), 1u) << "one incident, cleared once";
  EXPECT_EQ(recent[0].id, id);
  EXPECT_EQ(Raised("link_flapping", "critical"), 1);
}

// A flap counted at both ends of a cable is one flap, not two: three flaps seen by both ends are
// three link-down events in the summary, and a single flap seen at both ends is no finding.
TEST_F(IncidentTest, AFlapSeenAtBothEndsIsOneEvent) {
  const std::string guid = HcaGuid(4);
  fabric_.Node("gpu-b04", Hca("mlx5_0", guid));
  fabric_.Node("r3-sweep", Sweep({{9, guid}}));
  const auto host_downed = HostCounter(families::kIbLinkDowned, "mlx5_0", 1, 8);
  const auto tor_downed = TorCounter(families::kIbLinkDowned, 9, 8);
  for (uint64_t downs : {0u, 0u, 1u, 1u}) {
    fabric_.Set("gpu-b04", host_downed, downs);
    fabric_.Set("r3-sweep", tor_downed, downs);
    fabric_.Step();
  }
  EXPECT_TRUE(Active().empty()) << "one flap at both ends is still one flap";
}

// The same CA port reported by its own agent (sysfs) and swept from the fabric by another node:
// the port belongs to its owner, one finding; a CA no agent claims is "ca:<description>".
TEST_F(IncidentTest, CaPortsSweptFromTheFabricBelongToTheNodeClaimingTheHca) {
  const std::string owned = HcaGuid(7);
  const std::string unclaimed = HcaGuid(99);
  fabric_.Node("gpu-c07", Hca("mlx5_2", owned));
  fabric_.Node("r3-sweep");
  const auto own_wait = HostCounter(families::kIbXmitWait, "mlx5_2", 1, 32);
  const auto own_data = HostCounter(families::kIbXmitData, "mlx5_2", 1, 64);
  const auto swept_wait = CaCounter(families::kIbXmitWait, owned, "gpu-c07 HCA-1", 32);
  const auto swept_data = CaCounter(families::kIbXmitData, owned, "gpu-c07 HCA-1");
  const auto stor_wait = CaCounter(families::kIbXmitWait, unclaimed, "stor-9 HCA-1", 32);
  const auto stor_data = CaCounter(families::kIbXmitData, unclaimed, "stor-9 HCA-1");
  for (uint64_t step = 0; step < 4; ++step) {
    engine_->Tick();  // each sample is judged (a plain congestion finding wants 2 in a row)
    fabric_.Set("gpu-c07", own_wait, step * 600000);
    fabric_.Set("gpu-c07", own_data, step * 400000);
    fabric_.Set("r3-sweep", swept_wait, step * 600000);
    fabric_.Set("r3-sweep", swept_data, step * 400000);
    fabric_.Set("r3-sweep", stor_wait, step * 600000);
    fabric_.Set("r3-sweep", stor_data, step * 400000);
    fabric_.Step();
  }
  std::vector<std::string> subjects;
  for (const TrackedFinding& tracked : Active()) {
    EXPECT_EQ(tracked.finding.kind, "congestion");
    subjects.push_back(tracked.finding.subject.ToString());
  }
  EXPECT_THAT(subjects, ::testing::UnorderedElementsAre("gpu-c07 mlx5_2/1", "ca:stor-9 HCA-1/1"));
  for (const std::string& labels : ActiveLabels()) {
    EXPECT_THAT(labels, ::testing::Not(::testing::HasSubstr("node=r3-sweep"))) << labels;
  }
}

// An incast seen only by a sweeper with include_hca_ports: switch ports and CA ports. The senders'
// HCA ports are victims of the tree (attributed to their nodes), one hop beyond the leaf uplink.
TEST_F(IncidentTest, SpreadingTreesCountHostPortsSweptFromTheFabric) {
  FABRICMON_ASSERT_OK(
      engine_->SetLinkList("gpu-a01/mlx5_0/1 switch:r1-tor1/1\n"
                           "gpu-a02/mlx5_0/1 switch:r1-tor1/2\n"
                           "gpu-b01/mlx5_0/1 switch:r2-tor1/1\n"
                           "switch:r1-tor1/33 switch:spine-x/1\n"
                           "switch:r2-tor1/33 switch:spine-x/2\n"));
  for (int host : {1, 2, 3}) {
    const std::string name = host == 3 ? "gpu-b01" : absl::StrCat("gpu-a0", host);
    fabric_.Node(name, Hca("mlx5_0", HcaGuid(host)));
  }
  fabric_.Node("r9-sweep");
  auto sw = [](const std::string& name, uint32_t port, const std::string& family) {
    return collectors::CounterSeries("ib_fabric", family, "", collectors::Unit::kNone, 64,
                                     collectors::Overflow::kSaturates, 1.0,
                                     {{"switch", name}, {"port", absl::StrCat(port)}});
  };
  struct Port {
    collectors::SeriesDesc wait;
    collectors::SeriesDesc data;
    bool waiting;
  };
  std::vector<Port> ports = {
      {CaCounter(families::kIbXmitWait, HcaGuid(1), "a01"),
       CaCounter(families::kIbXmitData, HcaGuid(1), "a01"), true},
      {CaCounter(families::kIbXmitWait, HcaGuid(2), "a02"),
       CaCounter(families::kIbXmitData, HcaGuid(2), "a02"), true},
      {CaCounter(families::kIbXmitWait, HcaGuid(3), "b01"),
       CaCounter(families::kIbXmitData, HcaGuid(3), "b01"), false},
      {sw("r1-tor1", 33, families::kIbXmitWait), sw("r1-tor1", 33, families::kIbXmitData), true},
      {sw("spine-x", 2, families::kIbXmitWait), sw("spine-x", 2, families::kIbXmitData), true},
      {sw("r2-tor1", 1, families::kIbXmitWait), sw("r2-tor1", 1, families::kIbXmitData), true},
  };
  for (uint64_t step = 0; step < 3; ++step) {
    for (const Port& port : ports) {
      fabric_.Set("r9-sweep", port.wait, port.waiting ? step * 600000 : 0);
      fabric_.Set("r9-sweep", port.data, step * 400000);
    }
    fabric_.Step();
  }
  std::vector<TrackedFinding> active = Active();
  ASSERT_EQ(active.size(), 1u);
  const Finding& tree = active[0].finding;
  EXPECT_EQ(tree.kind, "congestion_spreading");
  EXPECT_EQ(tree.subject.ToString(), "switch r2-tor1/1");
  EXPECT_EQ(tree.depth_hops, 3u);
  std::vector<std::string> victims;
  for (const Endpoint& victim : tree.victims) victims.push_back(victim.ToString());
  EXPECT_THAT(victims, ::testing::UnorderedElementsAre("switch spine-x/2", "switch r1-tor1/33",
                                                       "gpu-a01 mlx5_0/1", "gpu-a02 mlx5_0/1"));
  // A switch subject: labels switch/port, no node; the proto's device is the switch.
  ASSERT_EQ(ActiveLabels().size(), 1u);
  EXPECT_EQ(ActiveLabels()[0],
            "kind=congestion_spreading,severity=critical,node=,device=,port=1,switch=r2-tor1,"
            "switch_guid=,peer=gpu-b01 mlx5_0/1");
  const v1::Finding proto = ToProto(active[0]);
  EXPECT_EQ(proto.subject().node(), "");
  EXPECT_EQ(proto.subject().device(), "r2-tor1");
  EXPECT_TRUE(proto.subject().is_switch());
  EXPECT_EQ(proto.subject().peer_node(), "gpu-b01");
  EXPECT_EQ(proto.subject().peer_device(), "mlx5_0");
  EXPECT_EQ(proto.subject().peer_port(), 1u);
}

// HCAs a sweep sees that no node claims: a node whose agent is missing. Hosts that run no agent by
// design are left out by detectors.unclaimed_ca_ignore.
TEST(UnclaimedCaTest, HcasNoNodeClaimsAreExportedUnlessIgnored) {
  FabricFixture fabric;
  v1::DetectorThresholds thresholds;
  thresholds.set_unclaimed_ca_ignore("ufm-.*");
  DetectionEngine engine(fabric.store(), fabric.clock(), thresholds, 1000000000);
  v1::Inventory sweep = Sweep({{1, HcaGuid(1)}, {2, HcaGuid(2)}, {3, HcaGuid(3)}});
  const char* descriptions[] = {"gpu-a01 HCA-1", "gpu-a02 HCA-1", "ufm-host HCA-1"};
  for (int i = 0; i < 3; ++i) {
    v1::FabricNode* ca = sweep.add_fabric_nodes();
    ca->set_guid(HcaGuid(i + 1));
    ca->set_type(v1::FabricNode::TYPE_CA);
    ca->set_description(descriptions[i]);
  }
  fabric.Node("r3-sweep", sweep);
  fabric.Node("gpu-a01", Hca("mlx5_0", HcaGuid(1)));
  engine.Tick();
  std::vector<std::string> unclaimed;
  for (const auto& family : Exported(engine)) {
    if (family.name != "fabricmon_topology_unclaimed_ca") continue;
    for (const auto& metric : family.metric) {
      unclaimed.push_back(absl::StrCat(metric.label[0].name, "=", metric.label[0].value, ",",
                                       metric.label[1].name, "=", metric.label[1].value));
    }
  }
  EXPECT_THAT(unclaimed, ::testing::ElementsAre("ca_guid=0x0002c90300cc0002,ca=gpu-a02 HCA-1"));
  // Its agent connects: claimed.
  fabric.Node("gpu-a02", Hca("mlx5_0", HcaGuid(2)));
  engine.Tick();
  for (const auto& family : Exported(engine)) {
    if (family.name == "fabricmon_topology_unclaimed_ca") {
      EXPECT_TRUE(family.metric.empty());
    }
  }
}

}  // namespace
}  // namespace fabricmon::detectors

namespace fabricmon::detectors {
namespace {

// The exporters read the active findings without copying them: the same findings, in the same
// order, as Active() returns, and none once cleared.
TEST(FindingTrackerTest, ForEachActiveVisitsWhatActiveReturns) {
  FindingTracker tracker;
  auto finding = [](const std::string& node, Severity severity) {
    Finding f;
    f.kind = "link_flapping";
    f.severity = severity;
    f.subject.node = node;
    f.subject.device = "mlx5_0";
    f.subject.port = 1;
    return f;
  };
  auto visited = [&tracker] {
    std::vector<std::string> out;
    tracker.ForEachActive([&out](const TrackedFinding& tracked) {
      out.push_back(absl::StrCat(tracked.id, " ", tracked.finding.subject.node, " ",
                                 SeverityName(tracked.finding.severity)));
    });
    return out;
  };
  auto active = [&tracker] {
    std::vector<std::string> out;
    for (const TrackedFinding& tracked : tracker.Active()) {
      out.push_back(absl::StrCat(tracked.id, " ", tracked.finding.subject.node, " ",
                                 SeverityName(tracked.finding.severity)));
    }
    return out;
  };
  EXPECT_TRUE(visited().empty());
  tracker.Update({finding("n2", Severity::kWarning), finding("n1", Severity::kCritical),
                  finding("n3", Severity::kWarning)},
                 1000);
  EXPECT_EQ(visited().size(), 3u);
  EXPECT_EQ(visited(), active());
  tracker.Update({finding("n3", Severity::kCritical)}, 2000);
  ASSERT_EQ(visited().size(), 1u);
  EXPECT_EQ(visited(), active());
  EXPECT_THAT(visited().front(), ::testing::EndsWith("n3 critical"));
  tracker.Update({}, 3000);
  EXPECT_TRUE(visited().empty());
}

// The tracker finds the incident a cable finding continues by its ends (an index), not by
// comparing it with every incident. Its answers must be the ones that comparison gives: here the
// comparison itself, written out as the tracker's rule says (own key first; else, for a cable,
// the incident with the smallest key that shares an end; this tick's incidents before the active
// ones), runs beside it over random ticks drawn from few ports, so that ends are shared often:
// peers come and go, both ends report, severities change, cables clear and return, and a switch
// port is at times cabled to another host.
TEST(FindingTrackerTest, CableIncidentsFollowTheirEndsAsAScanWould) {
  struct Reference {
    std::map<std::string, TrackedFinding> active;
    uint64_t next_id = 1;

    static const std::string* Of(const Finding& finding, const std::string& key,
                                 const std::map<std::string, TrackedFinding>& incidents) {
      if (auto it = incidents.find(key); it != incidents.end()) {
        return &it->first;
      }
      if (finding.identity == Identity::kCable) {
        for (const auto& [incident_key, tracked] : incidents) {
          if (finding.SharesCableEndWith(tracked.finding)) {
            return &incident_key;
          }
        }
      }
      return nullptr;
    }
    void Update(std::vector<Finding> current) {
      std::map<std::string, TrackedFinding> next;
      auto keep_labels = [](TrackedFinding& tracked, Finding finding) {
        finding.subject = tracked.finding.subject;
        finding.peer = tracked.finding.peer;
        finding.has_peer = tracked.finding.has_peer;
        tracked.finding = std::move(finding);
      };
      for (Finding& finding : current) {
        const std::string key = finding.Key();
        if (const std::string* seen = Of(finding, key, next)) {
          TrackedFinding& tracked = next.at(*seen);
          if (finding.severity > tracked.finding.severity) {
            keep_labels(tracked, std::move(finding));
          }
          continue;
        }
        TrackedFinding tracked;
        std::string incident_key = key;
        if (const std::string* seen = Of(finding, key, active)) {
          incident_key = *seen;
          auto it = active.find(incident_key);
          tracked = std::move(it->second);
          active.erase(it);
          keep_labels(tracked, std::move(finding));
        } else {
          tracked.id = absl::StrCat("f", next_id++);
          tracked.finding = std::move(finding);
        }
        next.emplace(std::move(incident_key), std::move(tracked));
      }
      active = std::move(next);
    }
  };
  auto describe = [](const TrackedFinding& tracked) {
    const Finding& f = tracked.finding;
    return absl::StrCat(tracked.id, " ", f.kind, " ", f.subject.ToString(), " <-> ",
                        f.has_peer ? f.peer.ToString() : "?", " ", SeverityName(f.severity));
  };

  std::mt19937 random(20261203);
  auto below = [&random](uint32_t n) { return static_cast<uint32_t>(random() % n); };
  FindingTracker tracker;
  Reference reference;
  for (int tick = 0; tick < 300; ++tick) {
    std::vector<Finding> current;
    const uint32_t count = below(24);
    for (uint32_t i = 0; i < count; ++i) {
      Finding finding;
      finding.kind = below(4) == 0 ? "link_degraded" : "link_flapping";
      finding.severity = below(3) == 0 ? Severity::kCritical : Severity::kWarning;
      const uint32_t host = below(6);
      finding.subject.node = absl::StrCat("gpu-b", host);
      finding.subject.device = absl::StrCat("mlx5_", below(2));
      finding.subject.port = 1;
      finding.identity = below(8) == 0 ? Identity::kSubject : Identity::kCable;
      if (finding.identity == Identity::kCable && below(3) != 0) {
        finding.has_peer = true;
        finding.peer.node = absl::StrCat("r7-tor", below(2));
        finding.peer.is_switch = true;
        // Mostly the host's own switch port; at times another host's (recabled).
        finding.peer.port = below(5) == 0 ? below(8) + 1 : host + 1;
        if (below(2) == 0) {
          std::swap(finding.subject, finding.peer);  // reported from the switch's end
        }
        finding.OrientCable();
      }
      current.push_back(std::move(finding));
    }
    tracker.Update(current, int64_t{tick + 1} * 1000000000);
    reference.Update(std::move(current));
    std::vector<std::string> got;
    for (const TrackedFinding& tracked : tracker.Active()) {
      got.push_back(describe(tracked));
    }
    std::vector<std::string> want;
    for (const auto& [key, tracked] : reference.active) {
      want.push_back(describe(tracked));
    }
    ASSERT_EQ(got, want) << "tick " << tick;
  }
}

}  // namespace
}  // namespace fabricmon::detectors
