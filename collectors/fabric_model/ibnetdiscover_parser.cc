#include "collectors/fabric_model/ibnetdiscover_parser.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fabricmon::fabric_model {
namespace {

// IB port numbers are 8-bit (IBA NodeInfo.NumPorts); 255 is reserved but accepted.
constexpr uint32_t kMaxPortNumber = 255;
constexpr size_t kMaxIdLength = 256;

absl::Status LineError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", what));
}

// A forward-only cursor over one line.
class Cursor {
 public:
  explicit Cursor(absl::string_view text) : text_(text) {}

  void SkipSpace() {
    while (!text_.empty() && (text_.front() == ' ' || text_.front() == '\t')) {
      text_.remove_prefix(1);
    }
  }
  bool AtEnd() const { return text_.empty(); }
  char Peek() const { return text_.empty() ? '\0' : text_.front(); }
  absl::string_view rest() const { return text_; }
  bool Consume(char c) {
    if (!text_.empty() && text_.front() == c) {
      text_.remove_prefix(1);
      return true;
    }
    return false;
  }
  bool ConsumePrefix(absl::string_view prefix) { return absl::ConsumePrefix(&text_, prefix); }
  // Decimal digits; nullopt if none or above `max`.
  std::optional<uint32_t> Uint(uint32_t max) {
    size_t n = 0;
    while (n < text_.size() && n < 10 &&
           absl::ascii_isdigit(static_cast<unsigned char>(text_[n]))) {
      ++n;
    }
    uint32_t value = 0;
    if (n == 0 || !absl::SimpleAtoi(text_.substr(0, n), &value) || value > max) {
      return std::nullopt;
    }
    text_.remove_prefix(n);
    return value;
  }
  // Hex digits (optional 0x), at most 16; nullopt if none.
  std::optional<uint64_t> Hex() {
    absl::string_view save = text_;
    if (absl::StartsWithIgnoreCase(text_, "0x")) {
      text_.remove_prefix(2);
    }
    size_t n = 0;
    while (n < text_.size() && absl::ascii_isxdigit(static_cast<unsigned char>(text_[n]))) {
      ++n;
    }
    std::optional<uint64_t> value;
    if (n > 0 && n <= 16) {
      value = ParseGuid(text_.substr(0, n));
    }
    if (!value.has_value()) {
      text_ = save;
      return std::nullopt;
    }
    text_.remove_prefix(n);
    return value;
  }
  // "..." (no escapes in ibnetdiscover output); nullopt if unterminated.
  std::optional<absl::string_view> Quoted(char quote = '"') {
    if (!Consume(quote)) {
      return std::nullopt;
    }
    const size_t end = text_.find(quote);
    if (end == absl::string_view::npos) {
      return std::nullopt;
    }
    absl::string_view value = text_.substr(0, end);
    text_.remove_prefix(end + 1);
    return value;
  }
  // Next run of non-blank characters.
  absl::string_view Token() {
    SkipSpace();
    size_t n = 0;
    while (n < text_.size() && text_[n] != ' ' && text_[n] != '\t') {
      ++n;
    }
    absl::string_view token = text_.substr(0, n);
    text_.remove_prefix(n);
    return token;
  }

 private:
  absl::string_view text_;
};

std::optional<NodeType> TypeFromHeaderWord(absl::string_view word) {
  if (absl::EqualsIgnoreCase(word, "Switch")) {
    return NodeType::kSwitch;
  }
  if (absl::EqualsIgnoreCase(word, "Ca") || absl::EqualsIgnoreCase(word, "Hca")) {
    return NodeType::kCa;
  }
  if (absl::EqualsIgnoreCase(word, "Rt") || absl::EqualsIgnoreCase(word, "Router")) {
    return NodeType::kRouter;
  }
  return std::nullopt;
}

std::optional<NodeType> TypeFromReportWord(absl::string_view word) {
  if (word == "SW") {
    return NodeType::kSwitch;
  }
  if (word == "CA") {
    return NodeType::kCa;
  }
  if (word == "RT") {
    return NodeType::kRouter;
  }
  return std::nullopt;
}

// ibnetdiscover names nodes "S-<guid>", "H-<guid>", "R-<guid>" (16 hex digits).
std::pair<NodeType, uint64_t> InfoFromNodeId(absl::string_view id) {
  if (id.size() == 18 && id[1] == '-') {
    std::optional<uint64_t> guid = ParseGuid(id.substr(2));
    if (guid.has_value()) {
      switch (id[0]) {
        case 'S':
          return {NodeType::kSwitch, *guid};
        case 'H':
          return {NodeType::kCa, *guid};
        case 'R':
          return {NodeType::kRouter, *guid};
        default:
          break;
      }
    }
  }
  return {NodeType::kUnknown, 0};
}

// "4xQDR" → (4, QDR). Speed may be unknown ("4x???").
bool ParseWidthSpeed(absl::string_view token, uint32_t* lanes, LinkSpeed* speed) {
  const size_t x = token.find_first_of("xX");
  if (x == 0 || x == absl::string_view::npos) {
    return false;
  }
  uint32_t value = 0;
  if (!absl::SimpleAtoi(token.substr(0, x), &value) || value > 32) {
    return false;
  }
  *lanes = value;
  *speed = ParseLinkSpeed(token.substr(x + 1)).value_or(LinkSpeed::kUnknown);
  return true;
}

// What a port line's trailing comment says: `# "desc" lid 16 4xQDR` (switch ports) or
// `# lid 17 lmc 0 "desc" lid 7 4xQDR` (CA ports).
struct PortComment {
  std::optional<std::string> remote_description;
  uint32_t local_lid = 0;
  uint32_t remote_lid = 0;
  uint32_t lanes = 0;
  LinkSpeed speed = LinkSpeed::kUnknown;
};

PortComment ParsePortComment(absl::string_view comment) {
  PortComment out;
  Cursor cursor(comment);
  bool after_quote = false;
  while (true) {
    cursor.SkipSpace();
    if (cursor.AtEnd()) {
      break;
    }
    if (cursor.Peek() == '"') {
      std::optional<absl::string_view> quoted = cursor.Quoted();
      if (!quoted.has_value()) {
        break;
      }
      out.remote_description = CleanDescription(*quoted);
      after_quote = true;
      continue;
    }
    absl::string_view token = cursor.Token();
    if (token == "lid") {
      absl::string_view value = cursor.Token();
      uint32_t lid = 0;
      if (absl::SimpleAtoi(value, &lid) && lid <= 0xffff) {
        (after_quote ? out.remote_lid : out.local_lid) = lid;
      }
      continue;
    }
    uint32_t lanes = 0;
    LinkSpeed speed = LinkSpeed::kUnknown;
    if (ParseWidthSpeed(token, &lanes, &speed)) {
      out.lanes = lanes;
      out.speed = speed;
    }
  }
  return out;
}

// Collects nodes and ports while lines arrive; checks that the cabling is consistent.
class Builder {
 public:
  // The node known as `key`, created as a placeholder if new.
  size_t NodeFor(const std::string& key) {
    auto [it, inserted] = by_key_.emplace(key, nodes_.size());
    if (inserted) {
      nodes_.emplace_back();
      ports_.emplace_back();
      defined_.push_back(false);
    }
    return it->second;
  }
  Node& node(size_t index) { return nodes_[index]; }
  bool defined(size_t index) const { return defined_[index]; }
  void set_defined(size_t index) { defined_[index] = true; }
  Port& PortOf(size_t node, uint32_t number) {
    Port& port = ports_[node][number];
    port.number = number;
    return port;
  }
  // Highest port number mentioned so far for `node` (0 if none).
  uint32_t MaxPort(size_t node) const {
    return ports_[node].empty() ? 0 : ports_[node].rbegin()->first;
  }

  // Records that (a, ap) is cabled to (b, bp), from the a end's line. Both ends must agree with
  // what earlier lines said.
  absl::Status Connect(size_t a, uint32_t ap, size_t b, uint32_t bp, int line) {
    if (a == b && ap == bp) {
      return LineError(line, "a port cabled to itself");
    }
    Port& local = PortOf(a, ap);
    if (local.remote_node.has_value() && (*local.remote_node != b || local.remote_port != bp)) {
      return LineError(
          line, absl::StrCat("port ", ap, " of \"", Describe(a), "\" is already cabled to port ",
                             local.remote_port, " of \"", Describe(*local.remote_node), "\""));
    }
    Port& remote = PortOf(b, bp);
    if (remote.remote_node.has_value() && (*remote.remote_node != a || remote.remote_port != ap)) {
      return LineError(
          line, absl::StrCat("port ", bp, " of \"", Describe(b), "\" is already cabled to port ",
                             remote.remote_port, " of \"", Describe(*remote.remote_node), "\""));
    }
    // std::map references stay valid across the insertion above.
    local.remote_node = b;
    local.remote_port = bp;
    remote.remote_node = a;
    remote.remote_port = ap;
    return absl::OkStatus();
  }

  std::string Describe(size_t index) const {
    const Node& n = nodes_[index];
    if (!n.node_id.empty()) {
      return n.node_id;
    }
    return n.guid != 0 ? FormatGuid(n.guid) : n.description;
  }

  absl::StatusOr<Subnet> Finish() {
    Subnet topology;
    topology.nodes = std::move(nodes_);
    for (size_t i = 0; i < topology.nodes.size(); ++i) {
      Node& node = topology.nodes[i];
      for (auto& [number, port] : ports_[i]) {
        node.ports.push_back(port);
        if (number > node.num_ports) {
          node.num_ports = number;  // placeholders and -p reports have no header count
        }
      }
      if (node.type == NodeType::kUnknown) {
        node.type = NodeType::kCa;  // referenced only by an ibsim id: ibsim's default
      }
      if (node.lid == 0 && node.type != NodeType::kSwitch) {
        for (const Port& port : node.ports) {
          if (port.lid != 0) {
            node.lid = port.lid;
            break;
          }
        }
      }
    }
    return topology;
  }

  size_t size() const { return nodes_.size(); }

 private:
  std::map<std::string, size_t> by_key_;
  std::vector<Node> nodes_;
  std::vector<std::map<uint32_t, Port>> ports_;
  std::vector<bool> defined_;
};

// The default topology format and ibsim's net format.
class TopologyParser {
 public:
  absl::StatusOr<ParsedSubnet> Parse(const std::vector<absl::string_view>& lines) {
    for (size_t i = 0; i < lines.size(); ++i) {
      const int line = static_cast<int>(i + 1);
      absl::string_view text = absl::StripAsciiWhitespace(lines[i]);
      if (text.empty() || text.front() == '#') {
        if (text.empty()) {
          current_.reset();  // a blank line ends a node record
        }
        continue;
      }
      absl::Status status = ParseLine(text, line);
      if (!status.ok()) {
        return status;
      }
    }
    if (builder_.size() == 0) {
      return absl::InvalidArgumentError("no nodes in topology");
    }
    for (size_t i = 0; i < builder_.size(); ++i) {
      if (!builder_.defined(i) && !saw_guid_) {
        // ibsim files must define every node they reference.
        return absl::InvalidArgumentError(
            absl::StrCat("node \"", builder_.Describe(i), "\" is referenced but never defined"));
      }
    }
    ParsedSubnet result;
    absl::StatusOr<Subnet> topology = builder_.Finish();
    if (!topology.ok()) {
      return topology.status();
    }
    result.topology = *std::move(topology);
    result.format = saw_guid_ ? TopologyFormat::kTopology : TopologyFormat::kIbsimNet;
    result.skipped_lines = skipped_;
    return result;
  }

 private:
  struct Pending {  // vendid=, devid=, ... lines before a header
    std::optional<uint64_t> guid;
    std::optional<uint64_t> sys_image_guid;
    std::optional<uint32_t> vendor_id;
    std::optional<uint32_t> device_id;
    std::optional<NodeType> type;
  };

  absl::Status ParseLine(absl::string_view text, int line) {
    if (text.front() == '[') {
      return ParsePortLine(text, line);
    }
    // key=value lines of the node record that follows.
    if (const size_t eq = text.find('=');
        eq != absl::string_view::npos && text.find_first_of(" \t\"") > eq) {
      return ParseAssignment(text.substr(0, eq), text.substr(eq + 1), line);
    }
    Cursor cursor(text);
    absl::string_view word = cursor.Token();
    if (word == "do") {
      ++skipped_;  // ibsim: a console command run while loading; no topology content
      return absl::OkStatus();
    }
    if (word == "include") {
      return LineError(line, "ibsim 'include' is not supported (pass the included file's text)");
    }
    if (word == "Chassis" || word == "Non-Chassis" || word == "Spine" || word == "Line") {
      ++skipped_;  // ibnetdiscover -g grouping headings
      return absl::OkStatus();
    }
    std::optional<NodeType> type = TypeFromHeaderWord(word);
    if (!type.has_value()) {
      return LineError(line, absl::StrCat("expected a node header (Switch/Ca/Hca/Rt), a port "
                                          "line ([n] ...) or key=value, got \"",
                                          absl::CEscape(word.substr(0, 40)), "\""));
    }
    return ParseHeader(*type, cursor, line);
  }

  absl::Status ParseAssignment(absl::string_view key, absl::string_view value, int line) {
    key = absl::StripAsciiWhitespace(key);
    value = absl::StripAsciiWhitespace(value);
    // switchguid=0x8f10500200b50(8f10500200b50): node GUID, then port 0's in parentheses.
    const size_t paren = value.find('(');
    absl::string_view number = paren == absl::string_view::npos ? value : value.substr(0, paren);
    std::optional<uint64_t> parsed = ParseGuid(number);
    if (!parsed.has_value()) {
      return LineError(line, absl::StrCat("bad value for ", key, ": \"",
                                          absl::CEscape(value.substr(0, 40)), "\""));
    }
    if (key == "vendid") {
      pending_.vendor_id = static_cast<uint32_t>(*parsed & 0xffffff);
    } else if (key == "devid") {
      pending_.device_id = static_cast<uint32_t>(*parsed & 0xffff);
    } else if (key == "sysimgguid") {
      pending_.sys_image_guid = *parsed;
    } else if (key == "switchguid") {
      pending_.guid = *parsed;
      pending_.type = NodeType::kSwitch;
    } else if (key == "caguid") {
      pending_.guid = *parsed;
      pending_.type = NodeType::kCa;
    } else if (key == "routerguid") {
      pending_.guid = *parsed;
      pending_.type = NodeType::kRouter;
    } else {
      return LineError(line,
                       absl::StrCat("unknown key \"", absl::CEscape(key.substr(0, 40)), "\""));
    }
    return absl::OkStatus();
  }

  absl::Status ParseHeader(NodeType type, Cursor& cursor, int line) {
    cursor.SkipSpace();
    std::optional<uint32_t> num_ports = cursor.Uint(kMaxPortNumber);
    if (!num_ports.has_value()) {
      return LineError(line, "expected the port count (1-255) after the node type");
    }
    cursor.SkipSpace();
    std::optional<absl::string_view> id = cursor.Quoted();
    if (!id.has_value() || id->empty() || id->size() > kMaxIdLength) {
      return LineError(line, "expected the quoted node id");
    }
    cursor.SkipSpace();
    std::optional<std::string> description;
    uint32_t lid = 0;
    if (cursor.Consume('#')) {
      PortComment comment = ParsePortComment(cursor.rest());
      description = comment.remote_description;  // the only quoted string: this node's own
      lid = comment.remote_lid != 0 ? comment.remote_lid : comment.local_lid;
    } else if (!cursor.AtEnd()) {
      return LineError(line, absl::StrCat("unexpected text after the node id: \"",
                                          absl::CEscape(cursor.rest().substr(0, 40)), "\""));
    }

    auto [id_type, id_guid] = InfoFromNodeId(*id);
    uint64_t guid = pending_.guid.value_or(id_guid);
    if (guid != 0) {
      saw_guid_ = true;
    }
    if (pending_.type.has_value() && *pending_.type != type) {
      return LineError(line, "node type disagrees with the preceding *guid= line");
    }
    const size_t index = builder_.NodeFor(std::string(*id));
    if (builder_.defined(index)) {
      return LineError(line, absl::StrCat("node \"", *id, "\" is defined twice"));
    }
    builder_.set_defined(index);
    Node& node = builder_.node(index);
    node.node_id = std::string(*id);
    node.guid = guid;
    node.type = type;
    node.num_ports = *num_ports;
    node.description = description.has_value() ? *description : CleanDescription(*id);
    if (lid != 0) {
      node.lid = lid;
    }
    node.sys_image_guid = pending_.sys_image_guid.value_or(0);
    node.vendor_id = pending_.vendor_id.value_or(0);
    node.device_id = pending_.device_id.value_or(0);
    pending_ = Pending();
    current_ = index;
    (void)id_type;  // the header word is authoritative; the id prefix only types placeholders
    // Ports that earlier lines named as far ends must fit this node.
    if (builder_.MaxPort(index) > *num_ports) {
      return LineError(line, absl::StrCat("\"", *id, "\" has ", *num_ports,
                                          " ports, but an earlier line cables its port ",
                                          builder_.MaxPort(index)));
    }
    return absl::OkStatus();
  }

  // `[1](portguid)  "remote id"[15](remoteportguid)  # comment` or ibsim's `[1] "Hca1"[1] w=4`.
  absl::Status ParsePortLine(absl::string_view text, int line) {
    if (!current_.has_value()) {
      return LineError(line, "port line outside a node record");
    }
    const size_t local = *current_;
    Cursor cursor(text);
    cursor.Consume('[');
    std::optional<uint32_t> local_port = cursor.Uint(kMaxPortNumber);
    if (!local_port.has_value() || !cursor.Consume(']')) {
      return LineError(line, "expected [port]");
    }
    std::optional<uint64_t> local_guid;
    if (cursor.Consume('(')) {
      local_guid = cursor.Hex();
      if (!local_guid.has_value() || !cursor.Consume(')')) {
        return LineError(line, "expected (port guid) after [port]");
      }
    }
    SkipExt(cursor);
    cursor.SkipSpace();
    std::optional<absl::string_view> remote_id = cursor.Quoted();
    if (!remote_id.has_value() || remote_id->empty() || remote_id->size() > kMaxIdLength) {
      return LineError(line, "expected the quoted id of the remote node");
    }
    std::optional<uint32_t> remote_port;
    if (cursor.Consume('[')) {
      remote_port = cursor.Uint(kMaxPortNumber);
      if (!remote_port.has_value() || !cursor.Consume(']')) {
        return LineError(line, "expected [port] after the remote node id");
      }
    } else {
      return LineError(line, "expected [port] after the remote node id");
    }
    std::optional<uint64_t> remote_guid;
    if (cursor.Consume('(')) {
      remote_guid = cursor.Hex();
      if (!remote_guid.has_value() || !cursor.Consume(')')) {
        return LineError(line, "expected (port guid) after the remote [port]");
      }
    }
    SkipExt(cursor);

    // Trailer: ibsim options (w=4) and/or a comment.
    PortComment comment;
    uint32_t ibsim_lanes = 0;
    while (true) {
      cursor.SkipSpace();
      if (cursor.AtEnd()) {
        break;
      }
      if (cursor.Consume('#')) {
        comment = ParsePortComment(cursor.rest());
        break;
      }
      absl::string_view option = cursor.Token();
      const size_t eq = option.find('=');
      if (eq == absl::string_view::npos || eq == 0) {
        return LineError(
            line, absl::StrCat("unexpected text \"", absl::CEscape(option.substr(0, 40)), "\""));
      }
      if (option.substr(0, eq) == "w") {
        if (!absl::SimpleAtoi(option.substr(eq + 1), &ibsim_lanes) || ibsim_lanes > 32) {
          return LineError(line, "bad w= (link width in lanes)");
        }
      }
      // Other ibsim options (s= speed, e= errors) carry no cabling information.
    }

    const Node& owner = builder_.node(local);
    if (*local_port > owner.num_ports || *local_port == 0) {
      return LineError(line, absl::StrCat("port ", *local_port, " is outside 1..", owner.num_ports,
                                          " of \"", owner.node_id, "\""));
    }
    const size_t remote = builder_.NodeFor(std::string(*remote_id));
    Node& remote_node = builder_.node(remote);
    if (!builder_.defined(remote)) {
      // A placeholder until (and unless) its own record arrives.
      remote_node.node_id = std::string(*remote_id);
      auto [id_type, id_guid] = InfoFromNodeId(*remote_id);
      remote_node.type = id_type;
      if (remote_node.guid == 0) {
        remote_node.guid = id_guid;
      }
      if (remote_node.description.empty()) {
        remote_node.description = comment.remote_description.has_value()
                                      ? *comment.remote_description
                                      : CleanDescription(*remote_id);
      }
    } else if (*remote_port > remote_node.num_ports) {
      return LineError(line, absl::StrCat("port ", *remote_port, " is outside 1..",
                                          remote_node.num_ports, " of \"", *remote_id, "\""));
    }
    absl::Status status = builder_.Connect(local, *local_port, remote, *remote_port, line);
    if (!status.ok()) {
      return status;
    }
    Port& port = builder_.PortOf(local, *local_port);
    if (local_guid.has_value()) {
      port.guid = *local_guid;
    }
    if (comment.local_lid != 0) {
      port.lid = comment.local_lid;
    }
    const uint32_t lanes = comment.lanes != 0 ? comment.lanes : ibsim_lanes;
    if (lanes != 0) {
      port.width = lanes;
    }
    if (comment.speed != LinkSpeed::kUnknown) {
      port.speed = comment.speed;
    }
    Port& far = builder_.PortOf(remote, *remote_port);
    if (remote_guid.has_value()) {
      far.guid = *remote_guid;
    }
    if (far.width == 0) {
      far.width = port.width;
    }
    if (far.speed == LinkSpeed::kUnknown) {
      far.speed = port.speed;
    }
    if (comment.remote_lid != 0) {
      Node& far_node = builder_.node(remote);
      if (far_node.type == NodeType::kSwitch) {
        if (far_node.lid == 0) {
          far_node.lid = comment.remote_lid;
        }
      } else if (far.lid == 0) {
        far.lid = comment.remote_lid;
      }
    }
    return absl::OkStatus();
  }

  // ibnetdiscover with chassis data may append "[ext 3]" to a port.
  static void SkipExt(Cursor& cursor) {
    if (cursor.ConsumePrefix("[ext ")) {
      (void)cursor.Uint(kMaxPortNumber);
      (void)cursor.Consume(']');
    }
  }

  Builder builder_;
  Pending pending_;
  std::optional<size_t> current_;
  bool saw_guid_ = false;
  int skipped_ = 0;
};

// ibnetdiscover -p: "SW  1719 10 0x7cfe9003009ce5b0 4x EDR - CA   134  1 0x... ( 'a' - 'b' )".
class PortsReportParser {
 public:
  absl::StatusOr<ParsedSubnet> Parse(const std::vector<absl::string_view>& lines) {
    for (size_t i = 0; i < lines.size(); ++i) {
      const int line = static_cast<int>(i + 1);
      absl::string_view text = absl::StripAsciiWhitespace(lines[i]);
      if (text.empty() || text.front() == '#') {
        continue;
      }
      absl::Status status = ParseLine(text, line);
      if (!status.ok()) {
        return status;
      }
    }
    if (builder_.size() == 0) {
      return absl::InvalidArgumentError("no nodes in ports report");
    }
    ParsedSubnet result;
    absl::StatusOr<Subnet> topology = builder_.Finish();
    if (!topology.ok()) {
      return topology.status();
    }
    result.topology = *std::move(topology);
    result.format = TopologyFormat::kPortsReport;
    return result;
  }

 private:
  struct End {
    NodeType type = NodeType::kUnknown;
    uint32_t lid = 0;
    uint32_t port = 0;
    uint64_t guid = 0;
  };

  static absl::Status ParseEnd(Cursor& cursor, End& end, int line) {
    absl::string_view type_word = cursor.Token();
    std::optional<NodeType> type = TypeFromReportWord(type_word);
    if (!type.has_value()) {
      return LineError(line, absl::StrCat("expected CA, SW or RT, got \"",
                                          absl::CEscape(type_word.substr(0, 40)), "\""));
    }
    end.type = *type;
    cursor.SkipSpace();
    std::optional<uint32_t> lid = cursor.Uint(0xffff);
    cursor.SkipSpace();
    std::optional<uint32_t> port = cursor.Uint(kMaxPortNumber);
    cursor.SkipSpace();
    std::optional<uint64_t> guid = cursor.Hex();
    if (!lid.has_value() || !port.has_value() || !guid.has_value()) {
      return LineError(line, "expected <lid> <port> <guid> after the node type");
    }
    end.lid = *lid;
    end.port = *port;
    end.guid = *guid;
    return absl::OkStatus();
  }

  size_t NodeFor(const End& end) {
    const size_t index = builder_.NodeFor(FormatGuid(end.guid));
    Node& node = builder_.node(index);
    node.type = end.type;
    if (end.type == NodeType::kSwitch) {
      node.guid = end.guid;  // switch ports share the switch's GUID
      if (end.lid != 0) {
        node.lid = end.lid;
      }
    } else {
      node.node_id = FormatGuid(end.guid);  // a port GUID: the node GUID is not in -p output
    }
    Port& port = builder_.PortOf(index, end.port);
    if (end.type != NodeType::kSwitch) {
      port.guid = end.guid;
      if (end.lid != 0) {
        port.lid = end.lid;
      }
    }
    return index;
  }

  absl::Status ParseLine(absl::string_view text, int line) {
    Cursor cursor(text);
    End local;
    absl::Status status = ParseEnd(cursor, local, line);
    if (!status.ok()) {
      return status;
    }
    absl::string_view width_token = cursor.Token();
    absl::string_view speed_token = cursor.Token();
    if (width_token.empty() || speed_token.empty()) {
      return LineError(line, "expected width and speed (\"4x EDR\")");
    }
    uint32_t lanes = 0;
    LinkSpeed speed = LinkSpeed::kUnknown;
    (void)ParseWidthSpeed(absl::StrCat(width_token, speed_token), &lanes, &speed);

    const size_t local_index = NodeFor(local);
    {
      Port& port = builder_.PortOf(local_index, local.port);
      port.width = lanes;
      port.speed = speed;
    }
    cursor.SkipSpace();
    if (cursor.Consume('-')) {
      cursor.SkipSpace();
      End remote;
      status = ParseEnd(cursor, remote, line);
      if (!status.ok()) {
        return status;
      }
      cursor.SkipSpace();
      if (!cursor.Consume('(')) {
        return LineError(line, "expected ( 'local desc' - 'remote desc' )");
      }
      cursor.SkipSpace();
      std::optional<absl::string_view> local_desc = cursor.Quoted('\'');
      cursor.SkipSpace();
      const bool dash = cursor.Consume('-');
      cursor.SkipSpace();
      std::optional<absl::string_view> remote_desc = cursor.Quoted('\'');
      cursor.SkipSpace();
      if (!local_desc.has_value() || !dash || !remote_desc.has_value() || !cursor.Consume(')')) {
        return LineError(line, "expected ( 'local desc' - 'remote desc' )");
      }
      const size_t remote_index = NodeFor(remote);
      SetDescription(local_index, *local_desc);
      SetDescription(remote_index, *remote_desc);
      status = builder_.Connect(local_index, local.port, remote_index, remote.port, line);
      if (!status.ok()) {
        return status;
      }
      Port& far = builder_.PortOf(remote_index, remote.port);
      if (far.width == 0) {
        far.width = lanes;
      }
      if (far.speed == LinkSpeed::kUnknown) {
        far.speed = speed;
      }
      return absl::OkStatus();
    }
    // An unconnected port: the rest is this node's description, quoted or not.
    absl::string_view rest = absl::StripAsciiWhitespace(cursor.rest());
    if (rest.size() >= 2 && rest.front() == '\'' && rest.back() == '\'') {
      rest = rest.substr(1, rest.size() - 2);
    }
    SetDescription(local_index, rest);
    return absl::OkStatus();
  }

  void SetDescription(size_t index, absl::string_view text) {
    Node& node = builder_.node(index);
    if (node.description.empty()) {
      node.description = CleanDescription(text);
    }
  }

  Builder builder_;
};

}  // namespace

absl::StatusOr<ParsedSubnet> ParseIbnetdiscover(absl::string_view text) {
  if (text.size() > kMaxTopologyFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology file larger than ", kMaxTopologyFileBytes, " bytes"));
  }
  if (text.find('\0') != absl::string_view::npos) {
    const size_t nul = text.find('\0');
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + nul, '\n'));
    return LineError(line, "NUL byte: not a text file");
  }
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  for (absl::string_view& line : lines) {
    absl::ConsumeSuffix(&line, "\r");
  }
  // The first record decides the format.
  for (absl::string_view raw : lines) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line.front() == '#') {
      continue;
    }
    Cursor cursor(line);
    if (TypeFromReportWord(cursor.Token()).has_value()) {
      cursor.SkipSpace();
      if (absl::ascii_isdigit(static_cast<unsigned char>(cursor.Peek()))) {
        return PortsReportParser().Parse(lines);
      }
    }
    break;
  }
  return TopologyParser().Parse(lines);
}

}  // namespace fabricmon::fabric_model
