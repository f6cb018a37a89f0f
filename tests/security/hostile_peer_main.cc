// fabricmon_hostile_peer: drives the aggregator's trust boundary by hand. It speaks the wire
// protocol as an agent that does not play by the rules (tests/security/hostile_peer.h), or holds
// slow HTTP clients open against a /metrics port.
//
//   fabricmon_hostile_peer --aggregator=127.0.0.1:7470 [--ca=CA --cert=CERT --key=KEY]
//       [--server_name=NAME] [--inventory=INVENTORY.textproto] --script=FILE|-
//   fabricmon_hostile_peer --slow_http_port=9470 --connections=200 --interval_s=5 --duration_s=60
//
// A script is one step per line (see RunScript in hostile_peer.h), for example:
//   hello node-a boot-1 7
//   send declarations { series { id: 1 name: "fabricmon_x_total" type: METRIC_TYPE_COUNTER
//        width_bits: 16 help: "forged\nfabricmon_node_up{node=\"victim\"} 1" } }
//   send layouts { layouts { id: 1 series_ids: 1 } }
//   batch 1 3600 1 70000
//   read
// Prints what was sent, every answer (Reject reason and message, acks) and the final status.
// Exit code: 0 when the stream ended without a Reject, 3 when the aggregator rejected something,
// 1 when the stream could not run, 2 for bad flags or a bad script.

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/clock.h"
#include "google/protobuf/text_format.h"
#include "tests/security/hostile_peer.h"

ABSL_FLAG(std::string, aggregator, "127.0.0.1:7470", "HOST:PORT of the aggregator's gRPC port.");
ABSL_FLAG(std::string, ca, "", "PEM CA to verify the aggregator with (TLS). Empty: plaintext.");
ABSL_FLAG(std::string, cert, "", "PEM client certificate (mutual TLS).");
ABSL_FLAG(std::string, key, "", "PEM private key of --cert.");
ABSL_FLAG(std::string, server_name, "", "TLS name to expect on the aggregator's certificate.");
ABSL_FLAG(std::string, inventory, "",
          "fabricmon.v1.Inventory in text format sent with `hello` steps (fabric_links, "
          "fabric_nodes, other nodes' GUIDs...).");
ABSL_FLAG(std::string, script, "", "Script file (one step per line), or - for stdin.");
ABSL_FLAG(int, stream_deadline_s, 120, "Deadline of the whole stream.");
ABSL_FLAG(int, slow_http_port, 0, "Instead of a stream: slow HTTP clients on 127.0.0.1:PORT.");
ABSL_FLAG(int, connections, 200, "Slow HTTP clients to hold open.");
ABSL_FLAG(int, interval_s, 5, "Seconds between the bytes each slow client sends.");
ABSL_FLAG(int, duration_s, 60, "How long to hold the slow clients.");

namespace {

int SlowHttp() {
  fabricmon::testing::SlowHttpClients clients(absl::GetFlag(FLAGS_slow_http_port),
                                              absl::GetFlag(FLAGS_connections),
                                              absl::Seconds(absl::GetFlag(FLAGS_interval_s)));
  absl::Status started = clients.Start();
  if (!started.ok()) {
    std::cerr << "fabricmon_hostile_peer: " << started << "\n";
    return 1;
  }
  std::cout << "holding " << clients.opened()
            << " slow connections to 127.0.0.1:" << absl::GetFlag(FLAGS_slow_http_port) << " for "
            << absl::GetFlag(FLAGS_duration_s) << " s" << std::endl;
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_duration_s)));
  std::cout << clients.closed_by_server() << " of " << clients.opened()
            << " were closed by the server" << std::endl;
  return 0;
}

int Stream() {
  std::string script;
  if (absl::GetFlag(FLAGS_script) == "-") {
    script.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(absl::GetFlag(FLAGS_script));
    if (!in) {
      std::cerr << "fabricmon_hostile_peer: cannot read --script " << absl::GetFlag(FLAGS_script)
                << "\n";
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    script = text.str();
  }
  fabricmon::v1::Inventory inventory;
  if (!absl::GetFlag(FLAGS_inventory).empty()) {
    std::ifstream in(absl::GetFlag(FLAGS_inventory));
    std::stringstream text;
    text << in.rdbuf();
    if (!in || !google::protobuf::TextFormat::ParseFromString(text.str(), &inventory)) {
      std::cerr << "fabricmon_hostile_peer: --inventory is not a readable Inventory textproto\n";
      return 2;
    }
  }
  fabricmon::testing::PeerConnection connection;
  connection.target = absl::GetFlag(FLAGS_aggregator);
  connection.ca_file = absl::GetFlag(FLAGS_ca);
  connection.cert_file = absl::GetFlag(FLAGS_cert);
  connection.key_file = absl::GetFlag(FLAGS_key);
  connection.server_name = absl::GetFlag(FLAGS_server_name);
  auto channel = fabricmon::testing::MakePeerChannel(connection);
  if (!channel.ok()) {
    std::cerr << "fabricmon_hostile_peer: " << channel.status() << "\n";
    return 2;
  }
  auto stream = fabricmon::testing::WireStream::Open(
      *channel, absl::Seconds(absl::GetFlag(FLAGS_stream_deadline_s)));
  if (!stream.ok()) {
    std::cerr << "fabricmon_hostile_peer: " << stream.status() << "\n";
    return 1;
  }
  std::string log;
  absl::StatusOr<fabricmon::testing::StreamReport> report =
      fabricmon::testing::RunScript(**stream, script, inventory, &log);
  std::cout << log;
  if (!report.ok()) {
    std::cerr << "fabricmon_hostile_peer: " << report.status() << "\n";
    return 2;
  }
  std::cout << report->Describe();
  if (report->reject().has_value()) {
    return 3;
  }
  return report->finished ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "a hostile peer for the aggregator's trust boundary (tests only).\n"
      "  fabricmon_hostile_peer --aggregator=HOST:PORT [--ca --cert --key] --script=FILE\n"
      "  fabricmon_hostile_peer --slow_http_port=PORT --connections=200 --interval_s=5");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_slow_http_port) > 0) {
    return SlowHttp();
  }
  if (absl::GetFlag(FLAGS_script).empty()) {
    std::cerr << "fabricmon_hostile_peer: --script (or --slow_http_port) is required\n";
    return 2;
  }
  return Stream();
}
