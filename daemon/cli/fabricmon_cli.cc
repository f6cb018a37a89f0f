// fabricmon: the command-line client of the aggregator's Diagnostics service.
//
//   fabricmon [--aggregator=HOST:PORT] nodes            list nodes, up/down, series, last seen
//   fabricmon [--aggregator=HOST:PORT] node NAME        one node's inventory (HCAs, ports, GPUs)
//   fabricmon [--aggregator=HOST:PORT] findings         active findings
//   fabricmon [--aggregator=HOST:PORT] diagnose --nodes=a,b,c
//   fabricmon [--aggregator=HOST:PORT] topology         every cable the detectors know of
//   fabricmon record export --dir=DIR --from=TIME --to=TIME [--nodes=a,b] > FILE
//   fabricmon replay FILE|DIR [--config=AGGREGATOR_CONFIG] [--fast | --speed=N] [--json]
//                    [--listen_metrics=HOST:PORT]
//   fabricmon job start --name=ID (--nodes=a,b | --slurm_job=ID)   register a job
//   fabricmon job end --name=ID                          forget it
//   fabricmon jobs                                       registered jobs
//   fabricmon diagnose --job=NAME | --slurm_job=ID       ... plus the nodes' traffic side by side
//   fabricmon gate --nodes=a,b | --slurm_job=ID | --job=NAME
//
// Exit status: 0 success, 1 the aggregator answered with an error (or could not be reached),
// 2 usage error (unknown flag or command, bad value). `gate` differs (for Slurm prologs): 0
// healthy, 1 an active warning-or-worse finding touches the nodes, 2 usage error or no answer.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectors/fabric_model/ibnetdiscover_parser.h"
#include "daemon/cli/fan_out.h"
#include "daemon/cli/record_export.h"
#include "daemon/cli/replay.h"
#include "daemon/cli/replay_metrics.h"
#include "daemon/cli/slurm.h"
#include "daemon/common/command_line.h"
#include "daemon/common/config_loader.h"
#include "daemon/common/operator_file.h"
#include "daemon/common/tls.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, aggregator, "127.0.0.1:7470",
          "HOST:PORT of the aggregator, or HOST:PORT,HOST:PORT,... of every shard: nodes, "
          "findings, diagnose and topology ask them all and merge the answers; the other "
          "commands ask the first.");
ABSL_FLAG(std::string, nodes, "",
          "Comma-separated node names (diagnose, gate, job start, record export).");
ABSL_FLAG(std::string, dir, "", "record export: the aggregator's recording.directory.");
ABSL_FLAG(std::string, from, "",
          "record export: start of the window, RFC 3339 (2026-03-01T03:12:00Z) or Unix seconds.");
ABSL_FLAG(std::string, to, "", "record export: end of the window (inclusive), as --from.");
ABSL_FLAG(std::string, config, "",
          "replay: the aggregator's configuration (AggregatorConfig text): detector thresholds, "
          "tick_ms, store limits, link_list_file, topology_file.");
ABSL_FLAG(std::string, link_list, "", "replay: link-list file (overrides config link_list_file).");
ABSL_FLAG(std::string, topology_file, "",
          "replay: ibnetdiscover output (overrides config topology_file).");
ABSL_FLAG(bool, fast, false, "replay: as fast as possible (the default).");
ABSL_FLAG(
    double, speed, 0,
    "replay: recorded seconds per wall-clock second (1: as recorded); 0: as fast as possible.");
ABSL_FLAG(std::string, listen_metrics, "",
          "replay: HOST:PORT (port 0: a free one) to serve the replay's /metrics on, as the "
          "aggregator would, while it runs and after it ended, until SIGINT or SIGTERM.");
ABSL_FLAG(std::string, name, "", "Job name (job start, job end): 1..128 of [A-Za-z0-9._:@+-].");
ABSL_FLAG(std::string, job, "", "A registered job's name (diagnose, gate).");
ABSL_FLAG(std::string, slurm_job, "",
          "A Slurm job id whose nodes `scontrol show job` and `scontrol show hostnames` give "
          "(diagnose, gate, job start).");
ABSL_FLAG(std::string, scontrol, "scontrol", "The scontrol command (--slurm_job).");
ABSL_FLAG(std::string, source, "cli", "job start: who registers the job (e.g. slurm).");
ABSL_FLAG(int, timeout_s, 10, "RPC deadline in seconds.");
ABSL_FLAG(bool, json, false, "Print the service's answer as JSON (one object) instead of text.");
ABSL_FLAG(bool, all, false, "findings: include recently cleared findings.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA file: connect with TLS and verify the aggregator's certificate against it.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate (with --tls_key): an aggregator in mutual TLS requires one.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to verify the aggregator's certificate against instead of the host in "
          "--aggregator (e.g. when dialling an IP address or a tunnel).");

namespace fabricmon::cli {
namespace {

std::string Age(int64_t unix_nanos) {
  if (unix_nanos == 0) {
    return "never";
  }
  const absl::Duration age = absl::Now() - absl::FromUnixNanos(unix_nanos);
  return absl::StrFormat("%.1fs ago", absl::ToDoubleSeconds(age));
}

// How the call was secured, for explaining failures in words.
struct Transport {
  bool tls = false;          // --tls_ca given
  bool client_cert = false;  // --tls_cert given
};
Transport g_transport;

// gRPC reports a failed TLS handshake as UNAVAILABLE with a terse message ("Socket closed",
// "failed to connect to all addresses", an SSL error string); say what most likely happened.
std::string Explain(const grpc::Status& status, const std::string& address) {
  if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    return absl::StrCat(
        "\n  the aggregator refused your certificate: Diagnostics (this CLI) is for operators "
        "only; use a certificate whose CN or DNS name matches the aggregator's "
        "authorization.operators",
        g_transport.client_cert ? "" : " (you gave no --tls_cert)");
  }
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) {
    return "";
  }
  if (absl::StrContains(status.error_message(), "Connection refused")) {
    return absl::StrCat("\n  nothing listens at ", address,
                        ": is the aggregator running, on this address (--aggregator)?");
  }
  if (!g_transport.tls) {
    return "\n  if the aggregator runs mutual TLS (the default), connect with TLS: pass --tls_ca "
           "(the CA that signed the aggregator's certificate) and --tls_cert/--tls_key (an "
           "operator's client certificate)";
  }
  if (!g_transport.client_cert) {
    return "\n  the aggregator requires a client certificate (mutual TLS): pass "
           "--tls_cert/--tls_key with an operator's certificate signed by the aggregator's CA";
  }
  return "\n  if the aggregator is up, the TLS handshake failed: check that --tls_ca signed the "
         "aggregator's certificate (and --tls_server_name when dialling an address it does not "
         "name), and that the aggregator's CA signed --tls_cert and it has not expired";
}

// `name_shard`: say which of several aggregators answered so.
int Fail(const grpc::Status& status, const std::string& address, bool name_shard = false) {
  std::cerr << "fabricmon: " << (name_shard ? absl::StrCat("shard ", address, ": ") : "")
            << status.error_message() << " (gRPC code " << status.error_code() << ")"
            << Explain(status, address) << "\n";
  return 1;
}

// The aggregator (the first listed) that the single-shard commands ask.
struct Shards {
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<v1::Diagnostics::Stub>> stubs;
  v1::Diagnostics::Stub& first() { return *stubs.front(); }
};
Shards* g_shards = nullptr;

int Fail(const grpc::Status& status) { return Fail(status, g_shards->addresses.front()); }

// The answers of the shards that answered. A shard that did not is named on stderr and makes
// the command exit 1 after printing what the others answered; when none answered, each failure
// is explained as a single aggregator's would be (`none`, exit 1).
template <typename Response>
struct Gathered {
  std::vector<const Response*> answers;
  std::vector<std::string> shards;
  bool none = false;
  int exit_status = 0;
};
template <typename Response>
Gathered<Response> Gather(const std::vector<ShardAnswer<Response>>& all) {
  Gathered<Response> gathered;
  for (const ShardAnswer<Response>& answer : all) {
    if (answer.status.ok()) {
      gathered.answers.push_back(&answer.response);
      gathered.shards.push_back(answer.shard);
    }
  }
  if (gathered.answers.empty()) {
    gathered.none = true;
    for (const ShardAnswer<Response>& answer : all) {
      gathered.exit_status = Fail(answer.status, answer.shard, /*name_shard=*/all.size() > 1);
    }
    return gathered;
  }
  for (const ShardAnswer<Response>& answer : all) {
    if (!answer.status.ok()) {
      std::cerr << "fabricmon: shard " << answer.shard
                << " did not answer: " << answer.status.error_message() << " (gRPC code "
                << answer.status.error_code() << "); the answer leaves out what only it holds\n";
      gathered.exit_status = 1;
    }
  }
  return gathered;
}

// Severity reads as in metrics and alerts ("critical"), not as the proto enum's value name
// ("SEVERITY_CRITICAL"): one spelling wherever an operator meets it.
void LowercaseSeverities(google::protobuf::Value& value) {
  if (value.has_struct_value()) {
    for (auto& [name, field] : *value.mutable_struct_value()->mutable_fields()) {
      if (name == "severity" && field.has_string_value() &&
          absl::StartsWith(field.string_value(), "SEVERITY_")) {
        field.set_string_value(
            absl::AsciiStrToLower(absl::StripPrefix(field.string_value(), "SEVERITY_")));
      } else {
        LowercaseSeverities(field);
      }
    }
  } else if (value.has_list_value()) {
    for (google::protobuf::Value& item : *value.mutable_list_value()->mutable_values()) {
      LowercaseSeverities(item);
    }
  }
}

// With --json, prints `message` as JSON and returns true.
bool PrintJson(const google::protobuf::Message& message) {
  if (!absl::GetFlag(FLAGS_json)) {
    return false;
  }
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string compact;
  google::protobuf::Value tree;
  // Neither can fail for our own messages.
  (void)google::protobuf::util::MessageToJsonString(message, &compact, options);
  (void)google::protobuf::util::JsonStringToMessage(compact, &tree);
  LowercaseSeverities(tree);
  options.add_whitespace = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(tree, &json, options);
  std::printf("%s\n", json.c_str());
  return true;
}

std::chrono::system_clock::time_point DeadlineTime() {
  return std::chrono::system_clock::now() + std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
}

void Deadline(grpc::ClientContext& context) { context.set_deadline(DeadlineTime()); }

int ListNodes(Shards& shards) {
  const auto all = AskEveryShard<v1::ListNodesResponse>(
      shards.addresses, shards.stubs, DeadlineTime(),
      [](v1::Diagnostics::Stub& stub, grpc::ClientContext& context, v1::ListNodesResponse* out) {
        return stub.ListNodes(&context, v1::ListNodesRequest(), out);
      });
  const Gathered<v1::ListNodesResponse> gathered = Gather(all);
  if (gathered.none) {
    return gathered.exit_status;
  }
  const v1::ListNodesResponse response = MergeNodes(gathered.answers);
  if (PrintJson(response)) {
    return gathered.exit_status;
  }
  std::printf("%-24s %-5s %-8s %-14s %-10s %s\n", "NODE", "UP", "SERIES", "LAST SEEN", "AGENT",
              "CONFLICTS");
  for (const v1::NodeSummary& node : response.nodes()) {
    // Identity conflicts: another machine with this node's certificate or name was refused.
    const std::string conflicts =
        node.identity_conflicts() == 0
            ? "-"
            : absl::StrCat(node.identity_conflicts(), " (", node.last_identity_conflict(), ")");
    std::printf("%-24s %-5s %-8llu %-14s %-10s %s\n", node.name().c_str(), node.up() ? "yes" : "NO",
                static_cast<unsigned long long>(node.series()),
                Age(node.last_seen_unix_nanos()).c_str(), node.agent_version().c_str(),
                conflicts.c_str());
  }
  return gathered.exit_status;
}

// "node017 mlx5_0/1", "switch leaf03/17", "ca:storage01/1", "node017 gpu3 link5", "node017".
std::string SubjectText(const v1::Subject& subject) {
  if (subject.has_gpu()) {
    return absl::StrCat(subject.node(), " gpu", subject.gpu(), " link", subject.link());
  }
  if (subject.is_switch()) {
    return absl::StrCat("switch ", subject.device(), "/", subject.port());
  }
  std::string text = subject.node();
  if (!subject.device().empty()) {
    absl::StrAppend(&text, " ", subject.device());
  }
  if (subject.port() != 0) {
    absl::StrAppend(&text, "/", subject.port());
  }
  return text;
}

void PrintFinding(const v1::Finding& finding) {
  static const char* kSeverity[] = {"?", "INFO", "WARNING", "CRITICAL"};
  const int severity = finding.severity() >= 0 && finding.severity() <= 3 ? finding.severity() : 0;
  std::printf("%-8s %-22s %s  (since %s%s)\n", kSeverity[severity], finding.kind().c_str(),
              finding.summary().c_str(), Age(finding.onset_unix_nanos()).c_str(),
              finding.cleared_unix_nanos() != 0
                  ? absl::StrCat(", cleared ", Age(finding.cleared_unix_nanos())).c_str()
                  : "");
  if (finding.victims_size() > 0) {
    std::vector<std::string> victims;
    for (const v1::Subject& victim : finding.victims()) {
      victims.push_back(SubjectText(victim));
    }
    std::printf("         victims (%d, depth %u hops): %s\n", finding.victims_size(),
                finding.depth_hops(), absl::StrJoin(victims, ", ").c_str());
  }
  for (const v1::Evidence& evidence : finding.evidence()) {
    std::printf("         %s{%s} %g/s %s\n", evidence.series().c_str(),
                absl::StrJoin(evidence.labels(), ",").c_str(), evidence.rate_per_second(),
                evidence.note().c_str());
  }
}

int ShowNode(v1::Diagnostics::Stub& stub, const std::string& name) {
  grpc::ClientContext context;
  Deadline(context);
  v1::GetNodeRequest request;
  request.set_name(name);
  v1::NodeView view;
  grpc::Status status = stub.GetNode(&context, request, &view);
  if (!status.ok()) {
    return Fail(status);
  }
  if (PrintJson(view)) {
    return 0;
  }
  const v1::NodeSummary& summary = view.summary();
  std::printf("node %s: %s, %llu series, last seen %s, agent %s, boot %s\n", summary.name().c_str(),
              summary.up() ? "up" : "DOWN", static_cast<unsigned long long>(summary.series()),
              Age(summary.last_seen_unix_nanos()).c_str(), summary.agent_version().c_str(),
              summary.boot_id().c_str());
  if (summary.identity_conflicts() > 0) {
    std::printf("  IDENTITY CONFLICT: %llu streams refused; last: %s\n",
                static_cast<unsigned long long>(summary.identity_conflicts()),
                summary.last_identity_conflict().c_str());
  }
  for (const v1::RdmaDevice& device : view.inventory().rdma_devices()) {
    std::printf("  %-12s %-10s fw %-12s %-8s guid %s%s\n", device.name().c_str(),
                device.driver().empty() ? "?" : device.driver().c_str(), device.fw_ver().c_str(),
                device.hca_type().c_str(), device.node_guid().c_str(),
                device.restricted() ? "  RESTRICTED (counters refused)" : "");
    for (const v1::RdmaPort& port : device.ports()) {
      std::printf("    port %u  %-10s %-8s %-10s %-22s lid %u%s%s\n", port.number(),
                  port.link_layer().c_str(), port.state_name().c_str(),
                  port.phys_state_name().c_str(), port.rate().c_str(), port.lid(),
                  port.netdevs().empty() ? "" : "  netdev ",
                  absl::StrJoin(port.netdevs(), ",").c_str());
    }
  }
  for (const v1::Netdev& netdev : view.inventory().netdevs()) {
    std::printf("  netdev %-12s kind %d %s\n", netdev.name().c_str(), netdev.kind(),
                netdev.operstate().c_str());
  }
  for (const v1::Gpu& gpu : view.inventory().gpus()) {
    int active = 0;
    for (const v1::NvLink& link : gpu.nvlinks()) {
      active += link.active() ? 1 : 0;
    }
    std::printf("  gpu %u %s %s  nvlinks %d/%d active\n", gpu.index(), gpu.name().c_str(),
                gpu.pci_bus_id().c_str(), active, gpu.nvlinks_size());
  }
  for (const v1::Finding& finding : view.findings()) {
    PrintFinding(finding);
  }
  return 0;
}

int ListFindings(Shards& shards) {
  v1::ListFindingsRequest request;
  request.set_include_cleared(absl::GetFlag(FLAGS_all));
  const auto all = AskEveryShard<v1::ListFindingsResponse>(
      shards.addresses, shards.stubs, DeadlineTime(),
      [&request](v1::Diagnostics::Stub& stub, grpc::ClientContext& context,
                 v1::ListFindingsResponse* out) {
        return stub.ListFindings(&context, request, out);
      });
  const Gathered<v1::ListFindingsResponse> gathered = Gather(all);
  if (gathered.none) {
    return gathered.exit_status;
  }
  const v1::ListFindingsResponse response = MergeFindings(gathered.answers);
  if (PrintJson(response)) {
    return gathered.exit_status;
  }
  if (response.findings().empty()) {
    std::printf("no active findings\n");
  }
  for (const v1::Finding& finding : response.findings()) {
    PrintFinding(finding);
  }
  return gathered.exit_status;
}

// One end as a link list names it (NODE/DEVICE/PORT for a host, switch:NAME/PORT), or
// ca:NAME/PORT for a fabric CA or router that no agent claims (a link list cannot name those).
std::string FormatEnd(const v1::LinkEnd& end) {
  if (end.is_switch()) {
    return absl::StrCat("switch:", end.node(), "/", end.port());
  }
  if (end.device().empty()) {
    // The aggregator names such CAs "ca:..." already; older aggregators did not.
    return absl::StrCat(absl::StartsWith(end.node(), "ca:") ? "" : "ca:", end.node(), "/",
                        end.port());
  }
  return absl::StrCat(end.node(), "/", end.device(), "/", end.port());
}

const char* SourceName(v1::LinkSource source) {
  switch (source) {
    case v1::LINK_SOURCE_LINK_LIST:
      return "link list";
    case v1::LINK_SOURCE_TOPOLOGY_FILE:
      return "topology file";
    case v1::LINK_SOURCE_FABRIC_COLLECTOR:
      return "fabric collector";
    default:
      return "unknown source";
  }
}

std::string Plural(uint64_t n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

int Topology(Shards& shards) {
  const auto all = AskEveryShard<v1::GetTopologyResponse>(
      shards.addresses, shards.stubs, DeadlineTime(),
      [](v1::Diagnostics::Stub& stub, grpc::ClientContext& context, v1::GetTopologyResponse* out) {
        return stub.GetTopology(&context, v1::GetTopologyRequest(), out);
      });
  const Gathered<v1::GetTopologyResponse> gathered = Gather(all);
  if (gathered.none) {
    return gathered.exit_status;
  }
  const v1::GetTopologyResponse response = MergeTopology(gathered.answers);
  if (PrintJson(response)) {
    return gathered.exit_status;
  }
  if (response.links().empty()) {
    std::printf(
        "no topology: give the aggregator topology_file or link_list_file, or run the "
        "ib_fabric collector on an agent\n");
  }
  // Padded so that the arrows line up, up to a limit (switch descriptions can be long).
  size_t width = 0;
  for (const v1::TopologyLink& link : response.links()) {
    width = std::max(width, std::min<size_t>(FormatEnd(link.a()).size(), 40));
  }
  std::map<v1::LinkSource, uint64_t> by_source;
  for (const v1::TopologyLink& link : response.links()) {
    ++by_source[link.source()];
    std::printf("%-*s  <->  %s  (%s)\n", static_cast<int>(width), FormatEnd(link.a()).c_str(),
                FormatEnd(link.b()).c_str(), SourceName(link.source()));
  }
  std::vector<std::string> sources;
  for (const auto& [source, count] : by_source) {
    sources.push_back(absl::StrCat(count, " from ", SourceName(source)));
  }
  for (const v1::GuidConflict& conflict : response.guid_conflicts()) {
    std::printf("GUID CONFLICT: %s is claimed by %s (it names none of them)\n",
                conflict.guid().c_str(), absl::StrJoin(conflict.nodes(), ", ").c_str());
  }
  for (const std::string& disagreement : response.disagreements()) {
    std::printf("DISAGREEMENT (the operator's cable kept): %s\n", disagreement.c_str());
  }
  std::printf("%s, %s, %s%s\n", Plural(response.links_size(), "link", "links").c_str(),
              Plural(response.switches(), "switch", "switches").c_str(),
              Plural(response.hosts(), "host", "hosts").c_str(),
              sources.empty() ? "" : absl::StrCat(" (", absl::StrJoin(sources, ", "), ")").c_str());
  return gathered.exit_status;
}

// The nodes --nodes or --slurm_job name, for a command that takes either; `allow_job` also
// accepts --job (the aggregator resolves it). Exactly one must be given.
struct Target {
  std::vector<std::string> nodes;
  std::string job;
};
absl::StatusOr<Target> ResolveTarget(const char* command, bool allow_job) {
  const std::string nodes = absl::GetFlag(FLAGS_nodes);
  const std::string slurm_job = absl::GetFlag(FLAGS_slurm_job);
  const std::string job = allow_job ? absl::GetFlag(FLAGS_job) : "";
  const int given = !nodes.empty() + !slurm_job.empty() + !job.empty();
  if (given != 1) {
    return absl::InvalidArgumentError(absl::StrCat("fabricmon ", command,
                                                   ": give one of --nodes=a,b,c, --slurm_job=ID",
                                                   allow_job ? ", --job=NAME" : ""));
  }
  Target target;
  target.job = job;
  if (!nodes.empty()) {
    if (absl::StrContains(nodes, "[")) {
      return absl::InvalidArgumentError(
          "--nodes takes plain names (a,b,c); for a Slurm hostlist such as gpu[01-04] use "
          "--slurm_job, or expand it with `scontrol show hostnames`");
    }
    for (absl::string_view node : absl::StrSplit(nodes, ',', absl::SkipEmpty())) {
      target.nodes.emplace_back(absl::StripAsciiWhitespace(node));
    }
  }
  if (!slurm_job.empty()) {
    absl::StatusOr<std::vector<std::string>> resolved =
        ResolveSlurmJob(slurm_job, absl::GetFlag(FLAGS_scontrol),
                        std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s)));
    if (!resolved.ok()) {
      return absl::Status(resolved.status().code(),
                          absl::StrCat("Slurm job ", slurm_job, ": ", resolved.status().message()));
    }
    target.nodes = *std::move(resolved);
  }
  return target;
}

// "12.3" MB/s, "4%", "-" where the node reports none of the series.
std::string Cell(double value, double scale, const absl::FormatSpec<double>& format) {
  return value < 0 ? "-" : absl::StrFormat(format, value * scale);
}

void PrintTraffic(const v1::DiagnoseResponse& response) {
  if (response.traffic().empty()) {
    return;
  }
  std::set<std::string> stragglers;
  for (const v1::Finding& finding : response.findings()) {
    if (finding.kind() == "straggler" && finding.cleared_unix_nanos() == 0) {
      stragglers.insert(finding.subject().node());
    }
  }
  std::printf("\n%-24s %12s %12s %6s %6s %12s %5s %s\n", "NODE", "RDMA MB/s", "KERNEL MB/s", "WAIT",
              "PAUSE", "NVLINK ERR/s", "GPU", "");
  for (const v1::NodeTraffic& node : response.traffic()) {
    std::printf("%-24s %12s %12s %6s %6s %12s %5s %s\n", node.node().c_str(),
                Cell(node.rdma_bytes_per_second(), 1e-6, "%.1f").c_str(),
                Cell(node.kernel_bytes_per_second(), 1e-6, "%.1f").c_str(),
                Cell(node.wait_fraction(), 100, "%.0f%%").c_str(),
                Cell(node.pause_fraction(), 100, "%.0f%%").c_str(),
                Cell(node.nvlink_errors_per_second(), 1, "%.2f").c_str(),
                Cell(node.gpu_utilization(), 100, "%.0f%%").c_str(),
                stragglers.count(node.node()) ? "STRAGGLER" : "");
  }
}

// Asks the aggregator's Diagnose about `target`.
grpc::Status AskDiagnose(v1::Diagnostics::Stub& stub, const Target& target,
                         v1::DiagnoseResponse* response) {
  v1::DiagnoseRequest request;
  request.set_job(target.job);
  for (const std::string& node : target.nodes) {
    request.add_nodes(node);
  }
  grpc::ClientContext context;
  Deadline(context);
  return stub.Diagnose(&context, request, response);
}

int Diagnose(Shards& shards) {
  absl::StatusOr<Target> target = ResolveTarget("diagnose", /*allow_job=*/true);
  if (!target.ok()) {
    std::cerr << target.status().message() << "\n";
    return kExitUsage;
  }
  const Target& asked = *target;
  const auto all = AskEveryShard<v1::DiagnoseResponse>(
      shards.addresses, shards.stubs, DeadlineTime(),
      [&asked](v1::Diagnostics::Stub& stub, grpc::ClientContext&, v1::DiagnoseResponse* out) {
        return AskDiagnose(stub, asked, out);  // sets the same deadline itself
      });
  const Gathered<v1::DiagnoseResponse> gathered = Gather(all);
  if (gathered.none) {
    return gathered.exit_status;
  }
  const v1::DiagnoseResponse response =
      MergeDiagnose(gathered.answers, gathered.shards, asked.nodes);
  if (PrintJson(response)) {
    return gathered.exit_status;
  }
  if (response.has_job()) {
    std::printf("job %s: %d nodes, registered %s by %s\n", response.job().name().c_str(),
                response.job().nodes_size(), Age(response.job().started_unix_nanos()).c_str(),
                response.job().started_by().c_str());
  }
  std::printf("%s\n", response.verdict().c_str());
  for (const std::string& unknown : response.unknown_nodes()) {
    std::printf("unknown node: %s\n", unknown.c_str());
  }
  for (const v1::Finding& finding : response.findings()) {
    PrintFinding(finding);
  }
  PrintTraffic(response);
  return gathered.exit_status;
}

// For a Slurm prolog or epilog: 0 when no active warning-or-worse finding touches the nodes, 1
// when one does (one line each on stdout), 2 when the question could not be asked or answered.
int Gate(Shards& shards) {
  absl::StatusOr<Target> target = ResolveTarget("gate", /*allow_job=*/true);
  if (!target.ok()) {
    std::cerr << target.status().message() << "\n";
    return kExitUsage;
  }
  const Target& asked = *target;
  const auto all = AskEveryShard<v1::DiagnoseResponse>(
      shards.addresses, shards.stubs, DeadlineTime(),
      [&asked](v1::Diagnostics::Stub& stub, grpc::ClientContext&, v1::DiagnoseResponse* out) {
        return AskDiagnose(stub, asked, out);
      });
  std::vector<const v1::DiagnoseResponse*> answers;
  std::vector<std::string> answered;
  bool incomplete = false;
  for (const ShardAnswer<v1::DiagnoseResponse>& answer : all) {
    if (!answer.status.ok()) {
      Fail(answer.status, answer.shard, /*name_shard=*/all.size() > 1);
      incomplete = true;
    }
    answers.push_back(&answer.response);
    answered.push_back(answer.shard);
  }
  if (incomplete) {
    // No answer is not "healthy", and neither is part of one (the silent shard may hold the
    // fault): the caller decides what to do.
    return kExitUsage;
  }
  const v1::DiagnoseResponse response = MergeDiagnose(answers, answered, asked.nodes);
  int unhealthy = 0;
  for (const v1::Finding& finding : response.findings()) {
    if (finding.cleared_unix_nanos() != 0 || finding.severity() < v1::SEVERITY_WARNING) {
      continue;
    }
    ++unhealthy;
    std::printf(
        "%s %s %s: %s\n", finding.severity() == v1::SEVERITY_CRITICAL ? "critical" : "warning",
        finding.kind().c_str(), SubjectText(finding.subject()).c_str(), finding.summary().c_str());
  }
  if (!response.unknown_nodes().empty()) {
    // Not a failure: a node without an agent has no findings to report, which the gate cannot
    // tell from a healthy one; say so on stderr.
    std::cerr << "fabricmon gate: not known to the aggregator (no agent?): "
              << absl::StrJoin(response.unknown_nodes(), ",") << "\n";
  }
  if (unhealthy > 0) {
    return 1;
  }
  std::printf("healthy: no active warning or critical finding touches %d node%s\n",
              static_cast<int>(response.nodes_size() + response.unknown_nodes_size()),
              response.nodes_size() + response.unknown_nodes_size() == 1 ? "" : "s");
  return 0;
}

void PrintJob(const v1::Job& job) {
  std::printf("%-24s %5d nodes  registered %s by %s (%s)  %s\n", job.name().c_str(),
              job.nodes_size(), Age(job.started_unix_nanos()).c_str(), job.started_by().c_str(),
              job.source().empty() ? "-" : job.source().c_str(),
              absl::StrJoin(job.nodes(), ",").c_str());
}

int StartJob(Shards& shards) {
  if (absl::GetFlag(FLAGS_name).empty()) {
    std::cerr << "fabricmon job start: give --name=ID\n";
    return kExitUsage;
  }
  absl::StatusOr<Target> target = ResolveTarget("job start", /*allow_job=*/false);
  if (!target.ok()) {
    std::cerr << target.status().message() << "\n";
    return kExitUsage;
  }
  v1::StartJobRequest request;
  request.set_name(absl::GetFlag(FLAGS_name));
  request.set_source(absl::GetFlag(FLAGS_source));
  for (const std::string& node : target->nodes) {
    request.add_nodes(node);
  }
  // Every shard registers the job: each judges the job's nodes it holds (straggler) and answers
  // diagnose/gate --job.
  const auto all = AskEveryShard<v1::Job>(
      shards.addresses, shards.stubs, DeadlineTime(),
      [&request](v1::Diagnostics::Stub& stub, grpc::ClientContext& context, v1::Job* out) {
        return stub.StartJob(&context, request, out);
      });
  const Gathered<v1::Job> gathered = Gather(all);
  if (gathered.none) {
    return gathered.exit_status;
  }
  const v1::Job& job = *gathered.answers.front();
  if (!PrintJson(job)) {
    PrintJob(job);
  }
  return gathered.exit_status;
}

int EndJob(Shards& shards) {
  if (absl::GetFlag(FLAGS_name).empty()) {
    std::cerr << "fabricmon job end: give --name=ID\n";
    return kExitUsage;
  }
  v1::EndJobRequest request;
  request.set_name(absl::GetFlag(FLAGS_name));
  const auto all = AskEveryShard<v1::Job>(
      shards.addresses, shards.stubs, DeadlineTime(),
      [&request](v1::Diagnostics::Stub& stub, grpc::ClientContext& context, v1::Job* out) {
        return stub.EndJob(&context, request, out);
      });
  const Gathered<v1::Job> gathered = Gather(all);
  if (gathered.none) {
    return gathered.exit_status;
  }
  const v1::Job& job = *gathered.answers.front();
  if (!PrintJson(job)) {
    std::printf("ended %s (%d nodes)\n", job.name().c_str(), job.nodes_size());
  }
  return gathered.exit_status;
}

int ListJobs(v1::Diagnostics::Stub& stub) {
  grpc::ClientContext context;
  Deadline(context);
  v1::ListJobsResponse response;
  grpc::Status status = stub.ListJobs(&context, v1::ListJobsRequest(), &response);
  if (!status.ok()) {
    return Fail(status);
  }
  if (PrintJson(response)) {
    return 0;
  }
  if (response.jobs().empty()) {
    std::printf("no jobs registered\n");
  }
  for (const v1::Job& job : response.jobs()) {
    PrintJob(job);
  }
  return 0;
}

// JSON text of `value` with object keys sorted: protobuf prints a Struct's fields in its map's
// order, which changes from one process to the next, and a replay's output must not.
void AppendSortedJson(const google::protobuf::Value& value, std::string& out) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kStructValue: {
      std::vector<std::pair<std::string, const google::protobuf::Value*>> fields;
      for (const auto& [name, field] : value.struct_value().fields()) {
        fields.emplace_back(name, &field);
      }
      std::sort(fields.begin(), fields.end());
      out += '{';
      for (size_t i = 0; i < fields.size(); ++i) {
        if (i > 0) out += ',';
        google::protobuf::Value key;
        key.set_string_value(fields[i].first);
        AppendSortedJson(key, out);
        out += ':';
        AppendSortedJson(*fields[i].second, out);
      }
      out += '}';
      return;
    }
    case google::protobuf::Value::kListValue: {
      out += '[';
      const auto& values = value.list_value().values();
      for (int i = 0; i < values.size(); ++i) {
        if (i > 0) out += ',';
        AppendSortedJson(values[i], out);
      }
      out += ']';
      return;
    }
    case google::protobuf::Value::kStringValue: {
      out += '"';
      for (unsigned char c : value.string_value()) {
        if (c == '"' || c == '\\') {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
      }
      out += '"';
      return;
    }
    case google::protobuf::Value::kNumberValue: {
      const double v = value.number_value();
      if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {
        out += absl::StrCat(static_cast<int64_t>(v));  // counts: all their digits
      } else if (std::isfinite(v)) {
        out += absl::StrFormat("%.17g", v);
      } else {
        out += "null";
      }
      return;
    }
    case google::protobuf::Value::kBoolValue:
      out += value.bool_value() ? "true" : "false";
      return;
    default:
      out += "null";
      return;
  }
}

// Unix nanoseconds as RFC 3339 UTC with milliseconds.
std::string Rfc3339(int64_t unix_nanos) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixNanos(unix_nanos),
                          absl::UTCTimeZone());
}

int ExportRecording() {
  if (absl::GetFlag(FLAGS_dir).empty() || absl::GetFlag(FLAGS_from).empty() ||
      absl::GetFlag(FLAGS_to).empty()) {
    std::cerr << "fabricmon record export: --dir, --from and --to are required; see --help\n";
    return kExitUsage;
  }
  replay::ExportOptions options;
  for (const auto& [text, target] : {std::pair{absl::GetFlag(FLAGS_from), &options.from_unix_nanos},
                                     std::pair{absl::GetFlag(FLAGS_to), &options.to_unix_nanos}}) {
    absl::StatusOr<int64_t> time = replay::ParseTime(text);
    if (!time.ok()) {
      std::cerr << "fabricmon record export: " << time.status().message() << "\n";
      return kExitUsage;
    }
    *target = *time;
  }
  if (options.to_unix_nanos < options.from_unix_nanos) {
    std::cerr << "fabricmon record export: --to is before --from\n";
    return kExitUsage;
  }
  for (absl::string_view node :
       absl::StrSplit(absl::GetFlag(FLAGS_nodes), ',', absl::SkipWhitespace())) {
    options.nodes.emplace(absl::StripAsciiWhitespace(node));
  }
  if (isatty(STDOUT_FILENO)) {
    std::cerr << "fabricmon record export: writes a binary recording to standard output; "
                 "redirect it to a file (> FILE)\n";
    return kExitUsage;
  }
  absl::StatusOr<replay::ExportSummary> summary =
      replay::ExportRecording(absl::GetFlag(FLAGS_dir), options, stdout);
  if (!summary.ok()) {
    std::cerr << "fabricmon record export: " << summary.status().message() << "\n";
    return kExitFailure;
  }
  std::cerr << "fabricmon record export: " << summary->records << " records ("
            << summary->carried_records << " carried from before the window), " << summary->bytes
            << " bytes, " << summary->rebased_batches << " batches re-encoded to absolute values";
  if (summary->streams_left_out > 0) {
    std::cerr << "; left out " << summary->streams_left_out
              << " streams whose records before the window do not decode (a replay ends them)";
  }
  if (summary->damage.damaged_regions > 0) {
    std::cerr << "; skipped " << summary->damage.skipped_bytes << " damaged bytes in "
              << summary->damage.damaged_regions << " places";
  }
  std::cerr << "\n";
  return kExitOk;
}

// What replay needs from the aggregator's configuration files, read as the aggregator reads
// them. Usage errors (exit 2) as messages.
absl::Status LoadReplayOptions(replay::ReplayOptions& options) {
  if (!absl::GetFlag(FLAGS_config).empty()) {
    if (absl::Status loaded = LoadTextConfig(absl::GetFlag(FLAGS_config), &options.config);
        !loaded.ok()) {
      return loaded;
    }
  }
  if (!absl::GetFlag(FLAGS_link_list).empty()) {
    options.config.set_link_list_file(absl::GetFlag(FLAGS_link_list));
  }
  if (!absl::GetFlag(FLAGS_topology_file).empty()) {
    options.config.set_topology_file(absl::GetFlag(FLAGS_topology_file));
  }
  if (!options.config.link_list_file().empty()) {
    absl::StatusOr<std::string> text =
        ReadOperatorFile(options.config.link_list_file(), size_t{64} << 20, "link_list_file");
    if (!text.ok()) return text.status();
    options.link_list = *std::move(text);
  }
  if (!options.config.topology_file().empty()) {
    absl::StatusOr<std::string> text = ReadOperatorFile(
        options.config.topology_file(), fabric_model::kMaxTopologyFileBytes, "topology_file");
    if (!text.ok()) return text.status();
    absl::StatusOr<fabric_model::ParsedSubnet> parsed = fabric_model::ParseIbnetdiscover(*text);
    if (!parsed.ok()) return parsed.status();
    v1::Inventory fabric;
    fabric_model::AppendToInventory(parsed->topology, fabric);
    options.fabric = std::move(fabric);
  }
  if (absl::GetFlag(FLAGS_fast) && absl::GetFlag(FLAGS_speed) != 0) {
    return absl::InvalidArgumentError("--fast and --speed exclude each other");
  }
  options.speed = absl::GetFlag(FLAGS_speed);
  if (!(options.speed >= 0) || options.speed > 1e6) {
    return absl::InvalidArgumentError("--speed must lie in 0..1000000 (0: as fast as possible)");
  }
  return absl::OkStatus();
}

std::string EvidenceText(const v1::Evidence& evidence) {
  std::string out = absl::StrCat(evidence.series(), "{", absl::StrJoin(evidence.labels(), ","),
                                 "} = ", evidence.value());
  if (evidence.rate_per_second() != 0) {
    absl::StrAppend(&out, ", ", evidence.rate_per_second(), "/s");
  }
  if (!evidence.note().empty()) {
    absl::StrAppend(&out, " (", evidence.note(), ")");
  }
  return out;
}

// SIGINT and SIGTERM while a replay serves /metrics: blocked in every thread (the server's are
// started after) and received by a thread of its own. During the replay they end the process at
// once, as without --listen_metrics; after it they end the wait of WaitUntilStopped().
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    // Detached: it may still wait in sigwait() when the process exits on an error.
    std::thread([this] {
      int signal = 0;
      while (sigwait(&signals_, &signal) != 0) {
      }
      if (!replay_ended_.load()) {
        std::cerr << "fabricmon replay: interrupted\n";
        std::_Exit(128 + signal);
      }
      received_ = signal;
      stopped_.Notify();
    }).detach();
  }
  // Returns the signal that ended the wait.
  int WaitUntilStopped() {
    replay_ended_.store(true);
    stopped_.WaitForNotification();
    return received_;
  }

 private:
  sigset_t signals_;
  std::atomic<bool> replay_ended_{false};
  int received_ = 0;  // written before stopped_ is notified
  absl::Notification stopped_;
};

int Replay(const std::string& path) {
  replay::ReplayOptions options;
  if (absl::Status loaded = LoadReplayOptions(options); !loaded.ok()) {
    std::cerr << "fabricmon replay: " << loaded.message() << "\n";
    return kExitUsage;
  }
  const std::string listen = absl::GetFlag(FLAGS_listen_metrics);
  if (!listen.empty()) {
    if (absl::Status valid = replay::ValidateListenAddress(listen); !valid.ok()) {
      std::cerr << "fabricmon replay: " << valid.message() << "\n";
      return kExitUsage;
    }
  }
  absl::StatusOr<std::unique_ptr<replay::ReplayRun>> run =
      replay::ReplayRun::Create(std::move(options));
  if (!run.ok()) {
    std::cerr << "fabricmon replay: " << run.status().message() << "\n";
    return absl::IsInvalidArgument(run.status()) ? kExitUsage : kExitFailure;
  }
  // Never destroyed: its thread may outlive this function.
  StopSignals* stop_signals = nullptr;
  std::unique_ptr<replay::ReplayMetricsServer> metrics;
  if (!listen.empty()) {
    stop_signals = new StopSignals();
    absl::StatusOr<std::unique_ptr<replay::ReplayMetricsServer>> listening =
        replay::ReplayMetricsServer::Listen(listen, **run);
    if (!listening.ok()) {
      // A malformed address, limits out of range, or one that cannot be bound: all the
      // operator's to fix.
      std::cerr << "fabricmon replay: " << listening.status().message() << "\n";
      return kExitUsage;
    }
    metrics = *std::move(listening);
    std::cerr << "fabricmon replay: serving /metrics on port " << metrics->port() << " (" << listen
              << ")\n";
  }
  const bool json = absl::GetFlag(FLAGS_json);
  google::protobuf::Value events;
  events.mutable_list_value();
  auto on_event = [&](const replay::TimelineEvent& event) {
    if (json) {
      google::protobuf::Value item;
      auto& fields = *item.mutable_struct_value()->mutable_fields();
      fields["at"].set_string_value(Rfc3339(event.at_unix_nanos));
      fields["event"].set_string_value(replay::EventKindName(event.kind));
      std::string finding;
      google::protobuf::util::JsonPrintOptions print;
      print.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(event.finding, &finding, print);
      (void)google::protobuf::util::JsonStringToMessage(finding, &fields["finding"]);
      *events.mutable_list_value()->add_values() = std::move(item);
      return;
    }
    const v1::Finding& f = event.finding;
    std::string severity =
        absl::AsciiStrToLower(absl::StripPrefix(v1::Severity_Name(f.severity()), "SEVERITY_"));
    std::printf("%s %-11s %-8s %s: %s\n", Rfc3339(event.at_unix_nanos).c_str(),
                replay::EventKindName(event.kind), severity.c_str(), f.kind().c_str(),
                f.summary().c_str());
    if (event.kind != replay::EventKind::kCleared) {
      for (const v1::Evidence& evidence : f.evidence()) {
        std::printf("    %s\n", EvidenceText(evidence).c_str());
      }
    }
  };
  absl::StatusOr<replay::ReplaySummary> summary = (*run)->Run(path, on_event);
  if (!summary.ok()) {
    std::cerr << "fabricmon replay: " << summary.status().message() << "\n";
    return absl::IsInvalidArgument(summary.status()) ? kExitUsage : kExitFailure;
  }
  const replay::ReplaySummary& s = *summary;
  if (json) {
    google::protobuf::Value root;
    auto& fields = *root.mutable_struct_value()->mutable_fields();
    fields["events"] = std::move(events);
    auto& sum = *fields["summary"].mutable_struct_value()->mutable_fields();
    sum["records"].set_number_value(static_cast<double>(s.records));
    sum["streams"].set_number_value(static_cast<double>(s.streams));
    sum["batches"].set_number_value(static_cast<double>(s.batches));
    sum["samples"].set_number_value(static_cast<double>(s.samples));
    sum["refused_messages"].set_number_value(static_cast<double>(s.refused_messages));
    sum["ticks"].set_number_value(static_cast<double>(s.ticks));
    sum["from"].set_string_value(s.records > 0 ? Rfc3339(s.first_unix_nanos) : "");
    sum["to"].set_string_value(s.records > 0 ? Rfc3339(s.last_unix_nanos) : "");
    sum["damaged_bytes"].set_number_value(static_cast<double>(s.damage.skipped_bytes));
    LowercaseSeverities(root);
    std::string text;
    AppendSortedJson(root, text);
    std::printf("%s\n", text.c_str());
  } else {
    std::printf(
        "replayed %llu records (%llu streams, %llu batches, %llu samples) from %s to %s; "
        "%llu ticks; %llu messages refused; %llu damaged bytes skipped\n",
        static_cast<unsigned long long>(s.records), static_cast<unsigned long long>(s.streams),
        static_cast<unsigned long long>(s.batches), static_cast<unsigned long long>(s.samples),
        s.records > 0 ? Rfc3339(s.first_unix_nanos).c_str() : "-",
        s.records > 0 ? Rfc3339(s.last_unix_nanos).c_str() : "-",
        static_cast<unsigned long long>(s.ticks),
        static_cast<unsigned long long>(s.refused_messages),
        static_cast<unsigned long long>(s.damage.skipped_bytes));
  }
  if (s.damage.bad_header) {
    std::cerr << "fabricmon replay: " << path << " is not a fabricmon recording (or holds one "
              << "that is not)\n";
    return kExitFailure;
  }
  if (metrics != nullptr) {
    std::fflush(stdout);
    std::cerr << "fabricmon replay: replay ended; serving its /metrics on port " << metrics->port()
              << " until SIGINT or SIGTERM\n";
    const int signal = stop_signals->WaitUntilStopped();
    std::cerr << "fabricmon replay: " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
              << ", stopping\n";
  }
  return kExitOk;
}

}  // namespace
}  // namespace fabricmon::cli

int main(int argc, char** argv) {
  fabricmon::ProgramInfo info;
  info.name = "fabricmon";
  info.summary = "fabricmon command-line client: asks the aggregator about nodes and findings";
  info.usage = {
      "fabricmon [--aggregator=HOST:PORT] [--json] COMMAND [ARGS]",
      "fabricmon --aggregator=HOST:PORT --tls_ca=CA.pem [--tls_cert=CERT.pem --tls_key=KEY.pem] "
      "[--tls_server_name=NAME] COMMAND [ARGS]",
  };
  info.commands = {
      {"nodes", "every node: up, series, last seen, agent"},
      {"node NAME", "one node's inventory (HCAs, ports, netdevs, GPUs) and its findings"},
      {"findings [--all]", "active findings (--all: and recently cleared)"},
      {"diagnose --nodes=a,b,c | --job=NAME | --slurm_job=ID",
       "what in the fabric touches a job's nodes, most severe first, and their traffic side by "
       "side"},
      {"topology", "every cable the detectors know, and from where"},
      {"record export --dir=DIR --from=TIME --to=TIME [--nodes=a,b]",
       "a window of the aggregator's recording as one file, on standard output"},
      {"replay FILE|DIR [--config=FILE] [--fast | --speed=N] [--listen_metrics=HOST:PORT]",
       "rerun the detectors over a recording; print the findings timeline (and serve its "
       "/metrics)"},
      {"job start --name=ID --nodes=a,b,c | --slurm_job=ID [--source=S]",
       "register a job (its nodes are compared as peers: straggler findings)"},
      {"job end --name=ID", "forget a registered job"},
      {"jobs", "registered jobs"},
      {"gate --nodes=a,b,c | --job=NAME | --slurm_job=ID",
       "for Slurm prologs: exit 0 healthy, 1 a warning or critical finding touches the nodes "
       "(one line each), 2 usage error or no answer"},
  };
  info.exit_statuses = {
      {"0", "success"},
      {"1", "the aggregator answered with an error, or could not be reached; gate: unhealthy"},
      {"2",
       "usage error: unknown flag or command, bad value, unreadable TLS file; gate: also "
       "no answer from the aggregator or scontrol"},
  };
  info.value_names = {{"aggregator", "HOST:PORT"},
                      {"nodes", "a,b,c"},
                      {"tls_ca", "FILE"},
                      {"tls_cert", "FILE"},
                      {"tls_key", "FILE"},
                      {"tls_server_name", "NAME"},
                      {"timeout_s", "SECONDS"},
                      {"name", "ID"},
                      {"job", "NAME"},
                      {"slurm_job", "ID"},
                      {"scontrol", "COMMAND"},
                      {"source", "S"},
                      {"dir", "DIR"},
                      {"from", "TIME"},
                      {"to", "TIME"},
                      {"config", "FILE"},
                      {"link_list", "FILE"},
                      {"topology_file", "FILE"},
                      {"speed", "N"},
                      {"listen_metrics", "HOST:PORT"}};
  info.flags_file = __FILE__;
  fabricmon::ParsedCommandLine parsed = fabricmon::ParseCommandLine(argc, argv, info);
  if (parsed.exit_status.has_value()) {
    return *parsed.exit_status;
  }
  std::vector<char*>& args = parsed.positional;
  if (args.size() < 2) {
    std::cerr << "fabricmon: give a command (nodes, node NAME, findings, diagnose, topology, "
                 "job start|end, jobs, gate, record export, replay); see --help\n";
    return fabricmon::kExitUsage;
  }
  // Known commands and how many arguments each takes, checked before any connection.
  const std::string command = args[1];
  const std::map<std::string, size_t> arity = {
      {"nodes", 0}, {"node", 1}, {"findings", 0}, {"diagnose", 0}, {"topology", 0},
      {"job", 1},   {"jobs", 0}, {"gate", 0},     {"record", 1},   {"replay", 1}};
  auto known = arity.find(command);
  if (known == arity.end()) {
    std::cerr << "fabricmon: unknown command '" << command << "'; see --help\n";
    return fabricmon::kExitUsage;
  }
  if (args.size() - 2 != known->second) {
    std::cerr << "fabricmon " << command << ": takes " << known->second
              << (known->second == 1 ? " argument" : " arguments") << "; see --help\n";
    return fabricmon::kExitUsage;
  }
  // Offline commands: they read files, and never connect.
  if (command == "record") {
    if (std::string(args[2]) != "export") {
      std::cerr << "fabricmon record: unknown subcommand '" << args[2]
                << "' (export); see --help\n";
      return fabricmon::kExitUsage;
    }
    return fabricmon::cli::ExportRecording();
  }
  if (command == "replay") {
    return fabricmon::cli::Replay(args[2]);
  }
  if (command == "job" && std::string(args[2]) != "start" && std::string(args[2]) != "end") {
    std::cerr << "fabricmon job: give start or end; see --help\n";
    return fabricmon::kExitUsage;
  }
  fabricmon::v1::TlsConfig tls;
  tls.set_ca_file(absl::GetFlag(FLAGS_tls_ca));
  tls.set_cert_file(absl::GetFlag(FLAGS_tls_cert));
  tls.set_key_file(absl::GetFlag(FLAGS_tls_key));
  absl::StatusOr<fabricmon::TransportSecurity> security =
      fabricmon::LoadTransportSecurity(tls, fabricmon::TlsRole::kCli);
  if (!security.ok()) {
    std::cerr << "fabricmon: " << security.status() << "\n";
    return 2;
  }
  fabricmon::cli::g_transport.tls = !security->plaintext;
  fabricmon::cli::g_transport.client_cert = !absl::GetFlag(FLAGS_tls_cert).empty();
  grpc::ChannelArguments channel_args;
  // A large fabric's topology (tens of thousands of cables) exceeds gRPC's default 4 MiB answer.
  channel_args.SetMaxReceiveMessageSize(64 << 20);
  if (!absl::GetFlag(FLAGS_tls_server_name).empty()) {
    channel_args.SetSslTargetNameOverride(absl::GetFlag(FLAGS_tls_server_name));
  }
  absl::StatusOr<std::vector<std::string>> addresses =
      fabricmon::cli::SplitAggregators(absl::GetFlag(FLAGS_aggregator));
  if (!addresses.ok()) {
    std::cerr << "fabricmon: " << addresses.status().message() << "; see --help\n";
    return fabricmon::kExitUsage;
  }
  fabricmon::cli::Shards shards;
  const std::shared_ptr<grpc::ChannelCredentials> credentials =
      fabricmon::MakeChannelCredentials(*security);
  for (const std::string& address : *addresses) {
    shards.addresses.push_back(address);
    shards.stubs.push_back(fabricmon::v1::Diagnostics::NewStub(
        grpc::CreateCustomChannel(address, credentials, channel_args)));
  }
  fabricmon::cli::g_shards = &shards;
  // node and jobs ask the first shard (every shard holds the jobs the CLI registered).
  fabricmon::v1::Diagnostics::Stub& first = shards.first();
  if (command == "nodes") {
    return fabricmon::cli::ListNodes(shards);
  }
  if (command == "node") {
    return fabricmon::cli::ShowNode(first, args[2]);
  }
  if (command == "findings") {
    return fabricmon::cli::ListFindings(shards);
  }
  if (command == "diagnose") {
    return fabricmon::cli::Diagnose(shards);
  }
  if (command == "job") {
    return std::string(args[2]) == "start" ? fabricmon::cli::StartJob(shards)
                                           : fabricmon::cli::EndJob(shards);
  }
  if (command == "jobs") {
    return fabricmon::cli::ListJobs(first);
  }
  if (command == "gate") {
    return fabricmon::cli::Gate(shards);
  }
  return fabricmon::cli::Topology(shards);
}
