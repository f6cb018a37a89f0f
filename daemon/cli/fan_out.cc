#include "daemon/cli/fan_out.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fabricmon::cli {
namespace {

// Which of two rows for one node to show: the one where it is up, else the one seen last.
bool Better(const v1::NodeSummary& candidate, const v1::NodeSummary& kept) {
  if (candidate.up() != kept.up()) {
    return candidate.up();
  }
  return candidate.last_seen_unix_nanos() > kept.last_seen_unix_nanos();
}

std::string EndKey(const v1::LinkEnd& end) {
  return absl::StrCat(end.is_switch() ? "s:" : "h:", end.node(), "/", end.device(), "/", end.port(),
                      "/", end.guid());
}

std::string SubjectKey(const v1::Subject& subject) { return subject.SerializeAsString(); }

}  // namespace

absl::StatusOr<std::vector<std::string>> SplitAggregators(const std::string& flag) {
  std::vector<std::string> addresses;
  std::set<std::string> seen;
  for (absl::string_view part : absl::StrSplit(flag, ',')) {
    const std::string address(absl::StripAsciiWhitespace(part));
    if (address.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--aggregator \"", flag, "\": an empty address in the list"));
    }
    if (!seen.insert(address).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--aggregator: \"", address, "\" is listed twice"));
    }
    addresses.push_back(address);
  }
  return addresses;
}

v1::ListNodesResponse MergeNodes(const std::vector<const v1::ListNodesResponse*>& answers) {
  if (answers.size() == 1) {
    return *answers.front();  // one aggregator's answer as it gave it
  }
  std::map<std::string, v1::NodeSummary> by_name;
  for (const v1::ListNodesResponse* answer : answers) {
    for (const v1::NodeSummary& node : answer->nodes()) {
      auto [it, inserted] = by_name.emplace(node.name(), node);
      if (!inserted && Better(node, it->second)) {
        it->second = node;
      }
    }
  }
  v1::ListNodesResponse merged;
  for (auto& [name, node] : by_name) {
    *merged.add_nodes() = std::move(node);
  }
  return merged;
}

v1::ListFindingsResponse MergeFindings(
    const std::vector<const v1::ListFindingsResponse*>& answers) {
  if (answers.size() == 1) {
    return *answers.front();
  }
  // Each shard orders its findings; the merge keeps the first shard's order, then the next's.
  std::vector<v1::Finding> kept;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (const v1::ListFindingsResponse* answer : answers) {
    for (const v1::Finding& finding : answer->findings()) {
      const auto key = std::make_pair(finding.id(), SubjectKey(finding.subject()));
      auto [it, inserted] = index.emplace(key, kept.size());
      if (inserted) {
        kept.push_back(finding);
      } else if (finding.updated_unix_nanos() > kept[it->second].updated_unix_nanos()) {
        kept[it->second] = finding;
      }
    }
  }
  v1::ListFindingsResponse merged;
  for (v1::Finding& finding : kept) {
    *merged.add_findings() = std::move(finding);
  }
  return merged;
}

v1::DiagnoseResponse MergeDiagnose(const std::vector<const v1::DiagnoseResponse*>& answers,
                                   const std::vector<std::string>& shards,
                                   const std::vector<std::string>& asked_nodes) {
  if (answers.size() == 1) {
    return *answers.front();
  }
  v1::DiagnoseResponse merged;
  std::vector<v1::ListFindingsResponse> per_shard(answers.size());
  std::map<std::string, v1::NodeSummary> nodes;
  std::map<std::string, v1::NodeTraffic> traffic;
  std::map<std::string, size_t> unknown_count;
  std::vector<std::string> verdicts;
  const size_t asked = asked_nodes.size();
  for (size_t i = 0; i < answers.size(); ++i) {
    const v1::DiagnoseResponse& answer = *answers[i];
    *per_shard[i].mutable_findings() = answer.findings();
    for (const v1::NodeSummary& node : answer.nodes()) {
      auto [it, inserted] = nodes.emplace(node.name(), node);
      if (!inserted && Better(node, it->second)) {
        it->second = node;
      }
    }
    // Traffic from the shard that holds the node (it reports -1 for what it does not have).
    for (const v1::NodeTraffic& row : answer.traffic()) {
      auto [it, inserted] = traffic.emplace(row.node(), row);
      if (!inserted &&
          row.rdma_bytes_per_second() + row.kernel_bytes_per_second() >
              it->second.rdma_bytes_per_second() + it->second.kernel_bytes_per_second()) {
        it->second = row;
      }
    }
    for (const std::string& unknown : answer.unknown_nodes()) {
      ++unknown_count[unknown];
    }
    if (answer.has_job() && !merged.has_job()) {
      *merged.mutable_job() = answer.job();
    }
    // A shard that knows none of the nodes (asked by name) has nothing to say about them.
    const bool knows_some = asked == 0 || static_cast<size_t>(answer.unknown_nodes_size()) < asked;
    if (knows_some && !answer.verdict().empty()) {
      verdicts.push_back(answers.size() > 1 ? absl::StrCat(shards[i], ": ", answer.verdict())
                                            : answer.verdict());
    }
  }
  std::vector<const v1::ListFindingsResponse*> finding_answers;
  for (const v1::ListFindingsResponse& one : per_shard) {
    finding_answers.push_back(&one);
  }
  *merged.mutable_findings() = MergeFindings(finding_answers).findings();
  for (auto& [name, node] : nodes) {
    *merged.add_nodes() = std::move(node);
  }
  for (auto& [name, row] : traffic) {
    *merged.add_traffic() = std::move(row);
  }
  for (const auto& [name, count] : unknown_count) {
    if (count == answers.size() && nodes.count(name) == 0) {
      merged.add_unknown_nodes(name);
    }
  }
  std::string verdict;
  for (const std::string& one : verdicts) {
    absl::StrAppend(&verdict, verdict.empty() ? "" : "\n", one);
  }
  merged.set_verdict(verdict);
  return merged;
}

v1::GetTopologyResponse MergeTopology(const std::vector<const v1::GetTopologyResponse*>& answers) {
  if (answers.size() == 1) {
    return *answers.front();
  }
  v1::GetTopologyResponse merged;
  std::set<std::pair<std::string, std::string>> cables;
  std::set<std::string> switches;
  std::set<std::string> hosts;
  std::set<std::string> disagreements;
  std::map<std::string, std::set<std::string>> conflicts;
  uint32_t most_switches = 0;
  uint32_t most_hosts = 0;
  for (const v1::GetTopologyResponse* answer : answers) {
    for (const v1::TopologyLink& link : answer->links()) {
      std::string a = EndKey(link.a());
      std::string b = EndKey(link.b());
      if (b < a && !link.a().is_switch() == !link.b().is_switch()) {
        std::swap(a, b);  // one cable seen from either end by two shards
      }
      if (!cables.emplace(a, b).second) {
        continue;
      }
      *merged.add_links() = link;
      for (const v1::LinkEnd* end : {&link.a(), &link.b()}) {
        (end->is_switch() ? switches : hosts).insert(end->node());
      }
    }
    most_switches = std::max(most_switches, answer->switches());
    most_hosts = std::max(most_hosts, answer->hosts());
    merged.set_resolved_unix_nanos(
        std::max(merged.resolved_unix_nanos(), answer->resolved_unix_nanos()));
    for (const std::string& line : answer->disagreements()) {
      disagreements.insert(line);
    }
    for (const v1::GuidConflict& conflict : answer->guid_conflicts()) {
      conflicts[conflict.guid()].insert(conflict.nodes().begin(), conflict.nodes().end());
    }
  }
  // The union's ends; never fewer than one shard counted (a shard may count ends it shows no
  // cable for).
  merged.set_switches(std::max<uint32_t>(most_switches, static_cast<uint32_t>(switches.size())));
  merged.set_hosts(std::max<uint32_t>(most_hosts, static_cast<uint32_t>(hosts.size())));
  for (const std::string& line : disagreements) {
    merged.add_disagreements(line);
  }
  for (const auto& [guid, nodes] : conflicts) {
    v1::GuidConflict* conflict = merged.add_guid_conflicts();
    conflict->set_guid(guid);
    for (const std::string& node : nodes) {
      conflict->add_nodes(node);
    }
  }
  return merged;
}

}  // namespace fabricmon::cli
