// The ib_fabric collector against a simulated subnet: ibsim + opensm, real MAD traffic.
//
// The collector runs in a child process (fabricmon_ib_fabric_probe, or fabricmon-agent --once)
// under LD_PRELOAD=libumad2sim.so; the oracles are the infiniband-diags run the same way on the
// same simulator: ibnetdiscover for the topology, perfquery / perfquery -x for the counters.
// Faults come from ibsim's console: PerformanceSet (counters), Unlink / ReLink (link flaps),
// Error (a switch that stops answering).
//
// Built twice: fabricmon_ib_fabric_ibsim_test (label ibsim) and, with FABRICMON_IBSIM_SLOW,
// fabricmon_ib_fabric_ibsim_slow_test (labels ibsim;slow) with a fat tree near ibsim's limits.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collectors/fabric_model/ibnetdiscover_parser.h"
#include "collectors/fabric_model/subnet.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/sim/ibsim/ibsim_env.h"
#include "tests/testing/fixture_path.h"

#ifndef FABRICMON_IB_FABRIC_PROBE
#error "FABRICMON_IB_FABRIC_PROBE must name the built fabricmon_ib_fabric_probe"
#endif
#ifndef FABRICMON_AGENT_PATH
#error "FABRICMON_AGENT_PATH must name the built fabricmon-agent"
#endif
#ifndef FABRICMON_GEN_FAT_TREE
#error "FABRICMON_GEN_FAT_TREE must name tests/sim/ibsim/gen_fat_tree.py"
#endif

namespace fabricmon::collectors {
namespace {

using ::fabricmon::testing::CommandResult;
using ::fabricmon::testing::IbsimEnv;
using ::fabricmon::testing::IbsimOptions;
using ::fabricmon::testing::SharedFixture;
using ::fabricmon::testing::Subprocess;
using ::testing::HasSubstr;
using ::testing::Not;

#define SKIP_WITHOUT_IBSIM()                        \
  do {                                              \
    std::string why;                                \
    if (!IbsimEnv::Available(&why)) {               \
      GTEST_SKIP() << "ibsim unavailable: " << why; \
    }                                               \
  } while (false)

// ---------------------------------------------------------------------------------------------
// The collector in a child process.

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  uint64_t raw = 0;
  bool saturated = false;
  bool wants_rediscovery = false;
};

class Probe {
 public:
  static std::unique_ptr<Probe> Start(const IbsimEnv& env, const std::string& config) {
    Subprocess::Options options;
    options.argv = {FABRICMON_IB_FABRIC_PROBE, absl::StrCat("--config=", config)};
    options.env = env.ClientEnv();
    options.cwd = env.dir();
    options.pipe_stdin = true;
    options.pipe_stdout = true;
    options.stderr_path = env.dir() + "/probe.err";
    absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Start(options);
    EXPECT_TRUE(process.ok()) << process.status();
    if (!process.ok()) {
      return nullptr;
    }
    auto probe = std::make_unique<Probe>();
    probe->process_ = *std::move(process);
    return probe;
  }
  ~Probe() {
    if (process_ != nullptr) {
      (void)process_->WriteLine("quit");
      process_->CloseStdin();
      if (!process_->Wait(absl::Seconds(5)).has_value()) {
        process_->Stop();
      }
    }
  }

  // "OK" and the inventory, or the status code name and an empty inventory.
  std::pair<std::string, v1::Inventory> Discover(absl::Duration timeout = absl::Seconds(60)) {
    std::string body = Command("discover", timeout);
    std::pair<std::string, v1::Inventory> out;
    const size_t newline = body.find('\n');
    out.first = Header(body.substr(0, newline), "discover");
    const std::string text = newline == std::string::npos ? "" : body.substr(newline + 1);
    std::string proto;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (!absl::StartsWith(line, "#")) {
        absl::StrAppend(&proto, line, "\n");
      }
    }
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(proto, &out.second)) << proto;
    return out;
  }

  std::pair<std::string, std::vector<Sample>> Collect(absl::Duration timeout = absl::Seconds(60)) {
    std::string body = Command("collect", timeout);
    std::pair<std::string, std::vector<Sample>> out;
    bool first = true;
    for (absl::string_view line : absl::StrSplit(body, '\n', absl::SkipEmpty())) {
      if (first) {
        out.first = Header(line, "collect");
        first = false;
        continue;
      }
      std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
      if (fields.size() != 6 || fields[0] != "S") {
        ADD_FAILURE() << "bad probe line: " << line;
        continue;
      }
      Sample sample;
      sample.name = std::string(fields[1]);
      for (absl::string_view label : absl::StrSplit(fields[2], '\x1f', absl::SkipEmpty())) {
        std::pair<std::string, std::string> kv = absl::StrSplit(label, absl::MaxSplits('=', 1));
        std::string value;
        absl::CUnescape(kv.second, &value);
        sample.labels[kv.first] = value;
      }
      EXPECT_TRUE(absl::SimpleAtoi(fields[3], &sample.raw)) << line;
      sample.saturated = fields[4] == "1";
      sample.wants_rediscovery = fields[5] == "1";
      out.second.push_back(std::move(sample));
    }
    return out;
  }

  std::string stderr_text(const IbsimEnv& env) const {
    std::ifstream in(env.dir() + "/probe.err");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

 private:
  std::string Command(const std::string& command, absl::Duration timeout) {
    EXPECT_TRUE(process_->WriteLine(command).ok());
    absl::StatusOr<std::string> body = process_->ReadUntilLine("END", timeout);
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? *body : std::string();
  }
  static std::string Header(absl::string_view line, absl::string_view command) {
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    EXPECT_GE(words.size(), 3u) << line;
    EXPECT_EQ(words.size() >= 2 ? words[1] : "", command) << line;
    return words.size() >= 3 ? words[2] : "";
  }

  std::unique_ptr<Subprocess> process_;
};

const Sample* Find(const std::vector<Sample>& samples, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  for (const Sample& sample : samples) {
    if (sample.name != name) {
      continue;
    }
    bool match = true;
    for (const auto& [key, value] : labels) {
      auto it = sample.labels.find(key);
      match = match && it != sample.labels.end() && it->second == value;
    }
    if (match) {
      return &sample;
    }
  }
  return nullptr;
}

size_t Count(const std::vector<Sample>& samples, const std::string& name,
             const std::map<std::string, std::string>& labels = {}) {
  size_t n = 0;
  for (const Sample& sample : samples) {
    bool match = sample.name == name;
    for (const auto& [key, value] : labels) {
      auto it = sample.labels.find(key);
      match = match && it != sample.labels.end() && it->second == value;
    }
    n += match;
  }
  return n;
}

std::map<std::string, std::string> SwitchPort(const std::string& name, int port) {
  return {{"switch", name}, {"port", std::to_string(port)}};
}

// ---------------------------------------------------------------------------------------------
// Oracles.

// ibnetdiscover's view, through the same parser the aggregator uses, as inventory.
v1::Inventory IbnetdiscoverInventory(const IbsimEnv& env) {
  CommandResult result = env.RunClient({"ibnetdiscover"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  absl::StatusOr<fabric_model::ParsedSubnet> parsed = fabric_model::ParseIbnetdiscover(result.out);
  EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << result.out;
  v1::Inventory inventory;
  if (parsed.ok()) {
    fabric_model::AppendToInventory(parsed->topology, inventory);
  }
  return inventory;
}

// What both sources can know: a topology file has no port states and names nodes by file id.
v1::Inventory Comparable(v1::Inventory inventory) {
  for (v1::FabricNode& node : *inventory.mutable_fabric_nodes()) {
    node.clear_node_id();
  }
  for (v1::FabricLink& link : *inventory.mutable_fabric_links()) {
    link.clear_state();
    link.clear_phys_state();
  }
  inventory.clear_rdma_devices();
  return inventory;
}

void ExpectSameFabric(const v1::Inventory& collected, const v1::Inventory& oracle) {
  google::protobuf::util::MessageDifferencer differencer;
  std::string report;
  differencer.ReportDifferencesToString(&report);
  EXPECT_TRUE(differencer.Compare(Comparable(oracle), Comparable(collected)))
      << "collector vs ibnetdiscover:\n"
      << report;
  EXPECT_GT(collected.fabric_links_size(), 0);
}

// perfquery's "Name:.....value" lines.
std::map<std::string, uint64_t> Perfquery(const IbsimEnv& env, bool extended, uint32_t lid,
                                          uint32_t port) {
  std::vector<std::string> argv = {"perfquery"};
  if (extended) {
    argv.push_back("-x");
  }
  argv.push_back(std::to_string(lid));
  argv.push_back(std::to_string(port));
  CommandResult result = env.RunClient(argv);
  EXPECT_EQ(result.exit_code, 0) << absl::StrJoin(argv, " ") << ": " << result.err;
  std::map<std::string, uint64_t> values;
  for (absl::string_view line : absl::StrSplit(result.out, '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || absl::StartsWith(line, "#")) {
      continue;
    }
    absl::string_view value = absl::StripLeadingAsciiWhitespace(line.substr(colon + 1));
    while (absl::ConsumePrefix(&value, ".")) {
    }
    uint64_t number = 0;
    if (absl::SimpleAtoi(value, &number) || absl::SimpleHexAtoi(value, &number)) {
      values[std::string(line.substr(0, colon))] = number;
    }
  }
  return values;
}

// perfquery field → our family. Traffic counters keep moving with the MADs themselves (ibsim
// counts every MAD it routes), so they are compared as "perfquery, read later, is not behind".
struct OracleField {
  const char* perfquery;
  const char* metric;
  bool extended;  // from perfquery -x
  bool traffic;
};
constexpr OracleField kOracleFields[] = {
    {"SymbolErrorCounter", "fabricmon_ib_symbol_error_total", false, false},
    {"LinkErrorRecoveryCounter", "fabricmon_ib_link_error_recovery_total", false, false},
    {"LinkDownedCounter", "fabricmon_ib_link_downed_total", false, false},
    {"PortRcvErrors", "fabricmon_ib_port_rcv_errors_total", false, false},
    {"PortRcvRemotePhysicalErrors", "fabricmon_ib_port_rcv_remote_physical_errors_total", false,
     false},
    {"PortRcvSwitchRelayErrors", "fabricmon_ib_port_rcv_switch_relay_errors_total", false, false},
    {"PortXmitDiscards", "fabricmon_ib_port_xmit_discards_total", false, false},
    {"PortXmitConstraintErrors", "fabricmon_ib_port_xmit_constraint_errors_total", false, false},
    {"PortRcvConstraintErrors", "fabricmon_ib_port_rcv_constraint_errors_total", false, false},
    {"LocalLinkIntegrityErrors", "fabricmon_ib_local_link_integrity_errors_total", false, false},
    {"ExcessiveBufferOverrunErrors", "fabricmon_ib_excessive_buffer_overrun_errors_total", false,
     false},
    {"VL15Dropped", "fabricmon_ib_vl15_dropped_total", false, false},
    {"PortXmitWait", "fabricmon_ib_port_xmit_wait_total", false, false},
    {"PortXmitData", "fabricmon_ib_port_xmit_data_bytes_total", true, true},
    {"PortRcvData", "fabricmon_ib_port_rcv_data_bytes_total", true, true},
    {"PortXmitPkts", "fabricmon_ib_port_xmit_packets_total", true, true},
    {"PortRcvPkts", "fabricmon_ib_port_rcv_packets_total", true, true},
    {"PortUnicastXmitPkts", "fabricmon_ib_unicast_xmit_packets_total", true, true},
    {"PortUnicastRcvPkts", "fabricmon_ib_unicast_rcv_packets_total", true, true},
    {"PortMulticastXmitPkts", "fabricmon_ib_multicast_xmit_packets_total", true, true},
    {"PortMulticastRcvPkts", "fabricmon_ib_multicast_rcv_packets_total", true, true},
};

// Compares every counter of (switch, lid, port) in `samples` with perfquery.
[[maybe_unused]] void ExpectCountersMatchPerfquery(const IbsimEnv& env,
                                                   const std::vector<Sample>& samples,
                                                   const std::string& switch_name, uint32_t lid,
                                                   uint32_t port) {
  const std::map<std::string, uint64_t> basic = Perfquery(env, false, lid, port);
  const std::map<std::string, uint64_t> ext = Perfquery(env, true, lid, port);
  for (const OracleField& field : kOracleFields) {
    const std::map<std::string, uint64_t>& oracle = field.extended ? ext : basic;
    auto it = oracle.find(field.perfquery);
    ASSERT_NE(it, oracle.end()) << field.perfquery << " missing from perfquery output";
    const Sample* sample = Find(samples, field.metric, SwitchPort(switch_name, port));
    ASSERT_NE(sample, nullptr) << field.metric << " " << switch_name << "[" << port << "]";
    if (field.traffic) {
      EXPECT_LE(sample->raw, it->second)
          << field.metric << " " << switch_name << "[" << port << "]";
      EXPECT_LE(it->second - sample->raw, 200000u)
          << field.metric << " " << switch_name << "[" << port << "]";
    } else {
      EXPECT_EQ(sample->raw, it->second)
          << field.metric << " " << switch_name << "[" << port << "]";
    }
  }
}

[[maybe_unused]] std::string Example(const std::string& name) {
  return SharedFixture(absl::StrCat("ib/ibsim-net-examples/", name));
}

// Writes a fat tree (gen_fat_tree.py) into `dir` and returns its path.
std::string FatTree(const std::string& dir, int spines, int leaves, int hcas) {
  const std::string path = absl::StrCat(dir, "/fat-", spines, "x", leaves, "x", hcas, ".net");
  CommandResult result = ::fabricmon::testing::RunCommand(
      {"python3", FABRICMON_GEN_FAT_TREE, "--spines", std::to_string(spines), "--leaves",
       std::to_string(leaves), "--hcas", std::to_string(hcas)},
      {}, "", absl::Seconds(30));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  std::ofstream(path) << result.out;
  return path;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/fabricmon-ibsim-topo-XXXXXX";
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : "/tmp";
  }
  ~TempDir() {
    std::error_code ignored;
    if (path_ != "/tmp") {
      std::filesystem::remove_all(path_, ignored);
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

[[maybe_unused]] const v1::FabricNode* NodeNamed(const v1::Inventory& inventory,
                                                 const std::string& description) {
  for (const v1::FabricNode& node : inventory.fabric_nodes()) {
    if (node.description() == description) {
      return &node;
    }
  }
  return nullptr;
}

std::unique_ptr<IbsimEnv> StartEnv(const std::string& topology, const std::string& sim_host = "") {
  IbsimOptions options;
  options.topology = topology;
  options.sim_host = sim_host;
  absl::StatusOr<std::unique_ptr<IbsimEnv>> env = IbsimEnv::Start(options);
  EXPECT_TRUE(env.ok()) << env.status();
  return env.ok() ? *std::move(env) : nullptr;
}

#ifndef FABRICMON_IBSIM_SLOW

// ---------------------------------------------------------------------------------------------
// Subnet: the collector's discovery equals ibnetdiscover's, on every ibsim example and on a
// generated fat tree with 8 leaves.

struct TopologyCase {
  const char* name;
  int spines = 0;  // > 0: a generated fat tree instead of an example file
  int leaves = 0;
  int hcas = 0;
};

class IbsimTopologyTest : public ::testing::TestWithParam<TopologyCase> {};

TEST_P(IbsimTopologyTest, DiscoveryMatchesIbnetdiscover) {
  SKIP_WITHOUT_IBSIM();
  const TopologyCase& c = GetParam();
  TempDir topo_dir;
  const std::string topology =
      c.spines > 0 ? FatTree(topo_dir.path(), c.spines, c.leaves, c.hcas) : Example(c.name);
  std::unique_ptr<IbsimEnv> env = StartEnv(topology);
  ASSERT_NE(env, nullptr);
  std::unique_ptr<Probe> probe = Probe::Start(*env, "enabled: true");
  ASSERT_NE(probe, nullptr);
  auto [code, inventory] = probe->Discover();
  ASSERT_EQ(code, "OK") << probe->stderr_text(*env);
  ExpectSameFabric(inventory, IbnetdiscoverInventory(*env));
  // Every link is up after opensm, and ibsim's links are 4X SDR unless w= says otherwise.
  for (const v1::FabricLink& link : inventory.fabric_links()) {
    EXPECT_EQ(link.state(), fabric_model::kPortStateActive) << link.ShortDebugString();
    EXPECT_EQ(link.phys_state(), fabric_model::kPhysStateLinkUp);
  }
  // And a sweep reads every cabled switch port without a timeout.
  auto [collect_code, samples] = probe->Collect();
  ASSERT_EQ(collect_code, "OK") << probe->stderr_text(*env);
  size_t cabled_switch_ports = 0;
  std::set<std::string> switches;
  for (const v1::FabricNode& node : inventory.fabric_nodes()) {
    if (node.type() == v1::FabricNode::TYPE_SWITCH) {
      switches.insert(node.guid());
    }
  }
  for (const v1::FabricLink& link : inventory.fabric_links()) {
    cabled_switch_ports += switches.count(link.a_guid()) + switches.count(link.b_guid());
  }
  EXPECT_EQ(Count(samples, "fabricmon_ib_port_xmit_wait_total"), cabled_switch_ports);
  EXPECT_EQ(Count(samples, "fabricmon_ib_fabric_link_info"), cabled_switch_ports);
  const Sample* timeouts = Find(samples, "fabricmon_ib_fabric_mads_total", {{"result", "timeout"}});
  ASSERT_NE(timeouts, nullptr);
  EXPECT_EQ(timeouts->raw, 0u);
}

INSTANTIATE_TEST_SUITE_P(Ibsim, IbsimTopologyTest,
                         ::testing::Values(TopologyCase{"net"}, TopologyCase{"net.1"},
                                           TopologyCase{"net.2sw2path"},
                                           TopologyCase{"net.2sw2path4hca"},
                                           TopologyCase{"net.2sw2path4hca2port"},
                                           TopologyCase{"fat_tree_4x8x2", 4, 8, 2}),
                         [](const ::testing::TestParamInfo<TopologyCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) {
                             if (ch == '.') ch = '_';
                           }
                           return name;
                         });

// ---------------------------------------------------------------------------------------------
// Counters: equal to perfquery's after PerformanceSet changes them.

TEST(IbsimCounterTest, SweepMatchesPerfqueryAfterPerformanceSet) {
  SKIP_WITHOUT_IBSIM();
  std::unique_ptr<IbsimEnv> env = StartEnv(Example("net.2sw2path4hca"));
  ASSERT_NE(env, nullptr);
  for (const char* command : {
           "PerformanceSet \"Switch1\"[1] PortCounters.PortXmitWait=1234",
           "PerformanceSet \"Switch1\"[1] PortCounters.SymbolErrorCounter=17",
           "PerformanceSet \"Switch1\"[2] PortCounters.LinkErrorRecoveryCounter=3",
           "PerformanceSet \"Switch1\"[2] PortCounters.PortRcvErrors=5",
           "PerformanceSet \"Switch1\"[3] PortCounters.PortXmitDiscards=8",
           "PerformanceSet \"Switch1\"[5] PortCounters.LocalLinkIntegrityErrors=11",
           "PerformanceSet \"Switch2\"[1] PortCounters.ExcessiveBufferOverrunErrors=12",
           "PerformanceSet \"Switch2\"[2] PortCounters.VL15Dropped=13",
           "PerformanceSet \"Switch2\"[3] PortCounters.PortRcvRemotePhysicalErrors=6",
           "PerformanceSet \"Switch2\"[5] PortCounters.PortXmitWait=99",
           "PerformanceSet \"Switch1\"[1] PortCountersExtended.PortXmitData=99999999999",
           "PerformanceSet \"Switch2\"[2] PortCountersExtended.PortRcvData=5000000000",
           "PerformanceSet \"Switch2\"[1] PortCountersExtended.PortUnicastXmitPkts=77",
       }) {
    absl::StatusOr<std::string> reply = env->Console(command);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_THAT(*reply, HasSubstr("has been set to"));
  }
  std::unique_ptr<Probe> probe = Probe::Start(*env, "enabled: true");
  ASSERT_NE(probe, nullptr);
  auto [code, inventory] = probe->Discover();
  ASSERT_EQ(code, "OK");
  auto [collect_code, samples] = probe->Collect();
  ASSERT_EQ(collect_code, "OK") << probe->stderr_text(*env);

  const Sample* wait = Find(samples, "fabricmon_ib_port_xmit_wait_total", SwitchPort("Switch1", 1));
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(wait->raw, 1234u);
  const Sample* data =
      Find(samples, "fabricmon_ib_port_xmit_data_bytes_total", SwitchPort("Switch1", 1));
  ASSERT_NE(data, nullptr);
  EXPECT_GE(data->raw, 99999999999u) << "64-bit PortCountersExtended value";

  for (const char* name : {"Switch1", "Switch2"}) {
    const v1::FabricNode* node = NodeNamed(inventory, name);
    ASSERT_NE(node, nullptr);
    for (int port : {1, 2, 3, 5}) {
      SCOPED_TRACE(absl::StrCat(name, "[", port, "] lid ", node->lid()));
      ExpectCountersMatchPerfquery(*env, samples, name, node->lid(), port);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// A link flap through the console: Unlink, then ReLink and an SM sweep.

TEST(IbsimFlapTest, UnlinkAndReLinkShowInStateLinkDownedAndInventory) {
  SKIP_WITHOUT_IBSIM();
  std::unique_ptr<IbsimEnv> env = StartEnv(Example("net.2sw2path4hca"));
  ASSERT_NE(env, nullptr);
  std::unique_ptr<Probe> probe = Probe::Start(*env, "enabled: true");
  ASSERT_NE(probe, nullptr);
  auto [code, before] = probe->Discover();
  ASSERT_EQ(code, "OK");
  auto [c0, up] = probe->Collect();
  ASSERT_EQ(c0, "OK");
  ASSERT_NE(Find(up, "fabricmon_ib_port_state", SwitchPort("Switch1", 1)), nullptr);
  EXPECT_EQ(Find(up, "fabricmon_ib_port_state", SwitchPort("Switch1", 1))->raw, 4u);
  EXPECT_EQ(Find(up, "fabricmon_ib_link_downed_total", SwitchPort("Switch1", 1))->raw, 0u);

  // Unlink: the port goes Down/Polling at once.
  ASSERT_TRUE(env->Console("Unlink \"Switch1\"[1]").ok());
  auto [c1, down] = probe->Collect();
  ASSERT_EQ(c1, "OK");
  const Sample* state = Find(down, "fabricmon_ib_port_state", SwitchPort("Switch1", 1));
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->raw, 1u) << "Down";
  EXPECT_EQ(Find(down, "fabricmon_ib_port_phys_state", SwitchPort("Switch1", 1))->raw, 2u)
      << "Polling";
  EXPECT_EQ(Find(down, "fabricmon_ib_port_rate_bytes_per_second", SwitchPort("Switch1", 1))->raw,
            0u);
  EXPECT_TRUE(state->wants_rediscovery) << "a link went away: the inventory is stale";
  // ibsim does not count the event in LinkDownedCounter (verified: it stays 0); a switch would.
  // Do what the hardware does, through the console.
  EXPECT_EQ(Find(down, "fabricmon_ib_link_downed_total", SwitchPort("Switch1", 1))->raw, 0u);
  ASSERT_TRUE(env->Console("PerformanceSet \"Switch1\"[1] PortCounters.LinkDownedCounter=1").ok());

  auto [c2, rediscovered] = probe->Discover();
  ASSERT_EQ(c2, "OK");
  EXPECT_EQ(rediscovered.fabric_links_size(), before.fabric_links_size() - 1);
  ExpectSameFabric(rediscovered, IbnetdiscoverInventory(*env));
  auto [c3, still_down] = probe->Collect();
  ASSERT_EQ(c3, "OK");
  EXPECT_EQ(Find(still_down, "fabricmon_ib_link_downed_total", SwitchPort("Switch1", 1))->raw, 1u)
      << "the port stays swept after its cable is gone (it was connected before)";
  EXPECT_EQ(Find(still_down, "fabricmon_ib_fabric_link_info", SwitchPort("Switch1", 1)), nullptr);
  EXPECT_FALSE(
      Find(still_down, "fabricmon_ib_port_state", SwitchPort("Switch1", 1))->wants_rediscovery);

  // ReLink: the link trains (LinkUp) but stays Initialize until an SM arms it.
  ASSERT_TRUE(env->Console("ReLink \"Switch1\"[1]").ok());
  auto [c4, init] = probe->Collect();
  ASSERT_EQ(c4, "OK");
  EXPECT_EQ(Find(init, "fabricmon_ib_port_state", SwitchPort("Switch1", 1))->raw, 2u);
  EXPECT_EQ(Find(init, "fabricmon_ib_port_phys_state", SwitchPort("Switch1", 1))->raw, 5u);
  ASSERT_TRUE(env->RunOpenSm().ok());
  auto [c5, active] = probe->Collect();
  ASSERT_EQ(c5, "OK");
  const Sample* back = Find(active, "fabricmon_ib_port_state", SwitchPort("Switch1", 1));
  EXPECT_EQ(back->raw, 4u);
  EXPECT_TRUE(back->wants_rediscovery) << "a link came back";
  auto [c6, after] = probe->Discover();
  ASSERT_EQ(c6, "OK");
  EXPECT_EQ(after.fabric_links_size(), before.fabric_links_size());
  ExpectSameFabric(after, before);
}

// ---------------------------------------------------------------------------------------------
// A switch that stops answering costs its own ports only.

TEST(IbsimDeadSwitchTest, OnlyTheSilentSwitchIsMissingAndItIsCounted) {
  SKIP_WITHOUT_IBSIM();
  std::unique_ptr<IbsimEnv> env = StartEnv(Example("net.2sw2path4hca"));
  ASSERT_NE(env, nullptr);
  std::unique_ptr<Probe> probe =
      Probe::Start(*env, "enabled: true mad_timeout_ms: 50 mad_retries: 1");
  ASSERT_NE(probe, nullptr);
  auto [code, inventory] = probe->Discover();
  ASSERT_EQ(code, "OK");
  auto [c0, healthy] = probe->Collect();
  ASSERT_EQ(c0, "OK");
  EXPECT_EQ(Count(healthy, "fabricmon_ib_port_xmit_wait_total", {{"switch", "Switch2"}}), 4u);

  // ibsim drops every packet into Switch2 (error rate 100 %).
  ASSERT_TRUE(env->Console("Error \"Switch2\" 100").ok());
  auto [c1, silent] = probe->Collect();
  ASSERT_EQ(c1, "OK");
  EXPECT_EQ(Count(silent, "fabricmon_ib_port_xmit_wait_total", {{"switch", "Switch1"}}), 4u);
  EXPECT_EQ(Count(silent, "fabricmon_ib_port_xmit_wait_total", {{"switch", "Switch2"}}), 0u);
  EXPECT_EQ(Find(silent, "fabricmon_ib_fabric_node_up", {{"switch", "Switch2"}})->raw, 0u);
  EXPECT_EQ(Find(silent, "fabricmon_ib_fabric_node_up", {{"switch", "Switch1"}})->raw, 1u);
  EXPECT_EQ(Find(silent, "fabricmon_ib_fabric_mad_timeouts_total", {{"switch", "Switch2"}})->raw,
            1u);
  EXPECT_GE(Find(silent, "fabricmon_collector_errors_total", {{"kind", "io"}})->raw, 1u);
  EXPECT_EQ(Find(silent, "fabricmon_ib_fabric_mads_total", {{"result", "skipped"}})->raw, 11u);

  ASSERT_TRUE(env->Console("Error \"Switch2\" 0").ok());
  auto [c2, recovered] = probe->Collect();
  ASSERT_EQ(c2, "OK");
  EXPECT_EQ(Count(recovered, "fabricmon_ib_port_xmit_wait_total", {{"switch", "Switch2"}}), 4u);
  EXPECT_EQ(Find(recovered, "fabricmon_ib_fabric_node_up", {{"switch", "Switch2"}})->raw, 1u);
}

// ---------------------------------------------------------------------------------------------
// Saturated narrow counters, through the real agent: fabricmon-agent --once.

TEST(IbsimAgentTest, OnceFlagsSaturatedSwitchCounters) {
  SKIP_WITHOUT_IBSIM();
  std::unique_ptr<IbsimEnv> env = StartEnv(Example("net.2sw2path4hca"));
  ASSERT_NE(env, nullptr);
  for (const char* command : {
           "PerformanceSet \"Switch1\"[2] PortCounters.LinkDownedCounter=255",
           "PerformanceSet \"Switch1\"[2] PortCounters.SymbolErrorCounter=65535",
           "PerformanceSet \"Switch1\"[2] PortCounters.PortXmitWait=4294967295",
           "PerformanceSet \"Switch2\"[1] PortCounters.LinkDownedCounter=254",
       }) {
    ASSERT_TRUE(env->Console(command).ok()) << command;
  }
  const std::string config_path = env->dir() + "/agent.textproto";
  std::ofstream(config_path) << "collectors {\n"
                                "  ib_fabric { enabled: true }\n"
                                "  ib_sysfs { enabled: false }\n"
                                "  ethtool { enabled: false }\n"
                                "  netdev { enabled: false }\n"
                                "  nvml { enabled: false }\n"
                                "}\n";
  CommandResult result =
      env->RunClient({FABRICMON_AGENT_PATH, "--once", absl::StrCat("--config=", config_path)});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string& text = result.out;
  EXPECT_THAT(text, HasSubstr("fabricmon_collector_success{collector=\"ib_fabric\"} 1"));
  for (const char* metric : {"fabricmon_ib_link_downed_total", "fabricmon_ib_symbol_error_total",
                             "fabricmon_ib_port_xmit_wait_total"}) {
    EXPECT_THAT(text,
                HasSubstr(absl::StrCat(
                    "fabricmon_series_saturated{metric=\"", metric,
                    "\",switch_guid=\"0x0000000000200000\",switch=\"Switch1\",port=\"2\"} 1")))
        << text;
  }
  // 254 is not saturated; the counter itself is still exported as a counter.
  EXPECT_THAT(text, Not(HasSubstr("metric=\"fabricmon_ib_link_downed_total\",switch_guid="
                                  "\"0x0000000000200001\",switch=\"Switch2\",port=\"1\"")));
  EXPECT_THAT(text, HasSubstr("fabricmon_ib_link_downed_total{switch_guid=\"0x0000000000200001\","
                              "switch=\"Switch2\",port=\"1\"} 254"));
  EXPECT_THAT(text, HasSubstr("# TYPE fabricmon_ib_link_downed_total counter"));
  EXPECT_THAT(text, HasSubstr("fabricmon_ib_fabric_link_info{switch_guid=\"0x0000000000200000\","
                              "switch=\"Switch1\",port=\"3\",peer_guid=\"0x0000000000200001\","
                              "peer=\"Switch2\",peer_port=\"3\",peer_type=\"switch\",width=\"4x\","
                              "speed=\"SDR\"} 1"));
}

// ---------------------------------------------------------------------------------------------
// fabricmon-agent --doctor over the simulated subnet: the collector explains itself.

TEST(IbsimAgentTest, DoctorSaysWhatTheSweepReadsAndWhyItCannot) {
  SKIP_WITHOUT_IBSIM();
  std::unique_ptr<IbsimEnv> env = StartEnv(Example("net.2sw2path4hca"));
  ASSERT_NE(env, nullptr);
  auto doctor = [&](const std::string& ib_fabric) {
    const std::string config_path = env->dir() + "/doctor.textproto";
    std::ofstream(config_path) << "collectors {\n  ib_fabric { " << ib_fabric
                               << " }\n"
                                  "  ib_sysfs { enabled: false }\n"
                                  "  ethtool { enabled: false }\n"
                                  "  netdev { enabled: false }\n"
                                  "  rdma_qp { enabled: false }\n"
                                  "  nvml { enabled: false }\n"
                                  "}\n";
    return env->RunClient(
        {FABRICMON_AGENT_PATH, "--doctor", absl::StrCat("--config=", config_path)});
  };
  CommandResult works = doctor("enabled: true");
  EXPECT_EQ(works.exit_code, 0) << works.out << works.err;
  EXPECT_THAT(works.out, HasSubstr("ib_fabric: ok: 6 fabric node(s), "));
  EXPECT_THAT(works.out, HasSubstr("doctor: 1 of 1 enabled collector(s) work"));

  CommandResult fails = doctor("enabled: true ca: \"mlx5_9\"");
  EXPECT_EQ(fails.exit_code, 1) << fails.out << fails.err;
  EXPECT_THAT(fails.out, HasSubstr("ib_fabric: FAIL: RDMA device mlx5_9 not found"));
  EXPECT_THAT(fails.out, HasSubstr("fix: "));
}

#else  // FABRICMON_IBSIM_SLOW

// ---------------------------------------------------------------------------------------------
// A fat tree of 1,024 switch ports: discovery equals ibnetdiscover, the sweep reads every port.

TEST(IbsimSlowTest, LargeFatTreeMatchesIbnetdiscoverAndSweepsEveryPort) {
  SKIP_WITHOUT_IBSIM();
  TempDir topo_dir;
  std::unique_ptr<IbsimEnv> env = StartEnv(FatTree(topo_dir.path(), 8, 32, 16));
  ASSERT_NE(env, nullptr);
  std::unique_ptr<Probe> probe = Probe::Start(*env, "enabled: true");
  ASSERT_NE(probe, nullptr);
  auto [code, inventory] = probe->Discover(absl::Seconds(300));
  ASSERT_EQ(code, "OK");
  EXPECT_EQ(inventory.fabric_nodes_size(), 8 + 32 + 32 * 16);
  EXPECT_EQ(inventory.fabric_links_size(), 32 * 16 + 8 * 32);
  ExpectSameFabric(inventory, IbnetdiscoverInventory(*env));
  auto [c1, samples] = probe->Collect(absl::Seconds(300));
  ASSERT_EQ(c1, "OK");
  EXPECT_EQ(Count(samples, "fabricmon_ib_port_xmit_wait_total"), 32u * 24 + 8 * 32);
  EXPECT_EQ(Find(samples, "fabricmon_ib_fabric_mads_total", {{"result", "timeout"}})->raw, 0u);
  EXPECT_EQ(Find(samples, "fabricmon_ib_fabric_nodes", {{"type", "switch"}})->raw, 40u);
}

#endif  // FABRICMON_IBSIM_SLOW

}  // namespace
}  // namespace fabricmon::collectors
