#include "daemon/aggregator/metrics_server.h"

#include <zlib.h>

#include <cstring>
#include <exception>
#include <utility>

#include "CivetServer.h"  // CivetCallbacks, what prometheus::Exposer takes
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "civetweb.h"
#include "daemon/exposition/text_exposition.h"

namespace fabricmon::aggregator {
namespace {

// civetweb hands begin_request only the connection (the server's user data is prometheus-cpp's
// CivetServer), so servers are found by their listening port.
absl::Mutex registry_mu(absl::kConstInit);
absl::flat_hash_map<int, MetricsServer*>& Registry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* registry = new absl::flat_hash_map<int, MetricsServer*>();
  return *registry;
}

// gzip (RFC 1952) of the concatenated `pieces` at the fastest level: prometheus-cpp's default
// level costs several times as much, while level 1 still shrinks the exposition about
// twentyfold. False on a zlib error (the caller sends the text uncompressed).
bool Gzip(const std::vector<std::string>& pieces, size_t size, std::string* out) {
  z_stream stream{};
  if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, /*gzip wrapper*/ 15 + 16, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    return false;
  }
  out->resize(deflateBound(&stream, size) + 64);
  stream.next_out = reinterpret_cast<Bytef*>(out->data());
  stream.avail_out = static_cast<uInt>(out->size());
  int result = Z_OK;
  for (const std::string& piece : pieces) {
    if (piece.empty()) {
      continue;  // deflate() without input or flush answers Z_BUF_ERROR
    }
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(piece.data()));
    stream.avail_in = static_cast<uInt>(piece.size());
    result = deflate(&stream, Z_NO_FLUSH);
    if (result != Z_OK) {
      break;
    }
  }
  if (result == Z_OK) {
    result = deflate(&stream, Z_FINISH);
  }
  out->resize(stream.total_out);
  deflateEnd(&stream);
  return result == Z_STREAM_END;
}

bool AcceptsGzip(mg_connection* connection) {
  const char* accept = mg_get_header(connection, "Accept-Encoding");
  return accept != nullptr && absl::StrContains(accept, "gzip");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Listen(const std::string& address,
                                                                     MetricsServerOptions options) {
  CivetCallbacks callbacks;  // all null
  callbacks.begin_request = &MetricsServer::BeginRequest;
  absl::StatusOr<std::unique_ptr<prometheus::Exposer>> started =
      exposition::StartExposer(address, options.http, &callbacks);
  if (!started.ok()) {
    return started.status();
  }
  std::unique_ptr<prometheus::Exposer> exposer = *std::move(started);
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": no port bound"));
  }
  std::unique_ptr<MetricsServer> server(
      new MetricsServer(std::move(exposer), ports.front(), options));
  absl::MutexLock lock(&registry_mu);
  for (int port : ports) {
    Registry()[port] = server.get();
  }
  return server;
}

MetricsServer::MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port,
                             MetricsServerOptions options)
    : exposer_(std::move(exposer)), port_(port), options_(options) {}

MetricsServer::~MetricsServer() {
  {
    absl::MutexLock lock(&registry_mu);
    for (auto it = Registry().begin(); it != Registry().end();) {
      if (it->second == this) {
        Registry().erase(it++);
      } else {
        ++it;
      }
    }
  }
  // Stops civetweb and joins its workers: a request in Handle() finishes first.
  exposer_.reset();
}

void MetricsServer::Serve(std::shared_ptr<MetricsExporter> exporter,
                          std::vector<std::shared_ptr<prometheus::Collectable>> others) {
  absl::MutexLock lock(&mu_);
  UnregisterLocked();
  exporter_ = std::move(exporter);
  others_ = std::move(others);
  if (exporter_ != nullptr) {
    exposer_->RegisterCollectable(exporter_);
  }
  for (const auto& other : others_) {
    exposer_->RegisterCollectable(other);
  }
}

void MetricsServer::Clear() {
  absl::MutexLock lock(&mu_);
  UnregisterLocked();
}

void MetricsServer::UnregisterLocked() {
  if (exporter_ != nullptr) {
    exposer_->RemoveCollectable(exporter_);
  }
  for (const auto& other : others_) {
    exposer_->RemoveCollectable(other);
  }
  exporter_.reset();
  others_.clear();
}

int MetricsServer::BeginRequest(mg_connection* connection) {
  mg_server_port ports[4];
  const int count = mg_get_server_ports(mg_get_context(connection), 4, ports);
  MetricsServer* server = nullptr;
  {
    absl::MutexLock lock(&registry_mu);
    for (int i = 0; i < count && server == nullptr; ++i) {
      auto it = Registry().find(ports[i].port);
      if (it != Registry().end()) {
        server = it->second;
      }
    }
  }
  return server == nullptr ? 0 : server->Handle(connection);
}

int MetricsServer::Handle(mg_connection* connection) {
  const mg_request_info* request = mg_get_request_info(connection);
  if (request == nullptr || request->request_method == nullptr || request->local_uri == nullptr ||
      std::strcmp(request->request_method, "GET") != 0 ||
      std::strcmp(request->local_uri, "/metrics") != 0) {
    return 0;  // the Exposer answers (404 for unknown URIs)
  }
  std::shared_ptr<MetricsExporter> exporter;
  std::vector<std::shared_ptr<prometheus::Collectable>> others;
  {
    absl::MutexLock lock(&mu_);
    exporter = exporter_;
    others = others_;
  }
  if (exporter == nullptr) {
    return 0;
  }
  // The text stays in the pieces it was written in: at a million series one more copy of it
  // (about 90 MB of fresh pages) is a good part of the scrape.
  std::vector<std::string> pieces = exporter->TextPieces();
  for (const auto& other : others) {
    std::string text;
    exposition::AppendText(other->Collect(), &text);
    pieces.push_back(std::move(text));
  }
  size_t size = 0;
  for (const std::string& piece : pieces) {
    size += piece.size();
  }
  std::string compressed;
  const bool gzip =
      size <= options_.gzip_max_bytes && AcceptsGzip(connection) && Gzip(pieces, size, &compressed);
  mg_printf(connection,
            "HTTP/1.1 200 OK\r\n"
            "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "%s"
            "Content-Length: %zu\r\n\r\n",
            gzip ? "Content-Encoding: gzip\r\n" : "", gzip ? compressed.size() : size);
  if (gzip) {
    mg_write(connection, compressed.data(), compressed.size());
  } else {
    for (const std::string& piece : pieces) {
      if (!piece.empty() && mg_write(connection, piece.data(), piece.size()) <= 0) {
        break;  // the scraper went away
      }
    }
  }
  fast_scrapes_.fetch_add(1, std::memory_order_relaxed);
  return 200;
}

}  // namespace fabricmon::aggregator
