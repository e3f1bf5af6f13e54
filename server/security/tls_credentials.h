// The gRPC server credentials the flags ask for: plaintext (the default, for a local run),
// TLS (--tls_cert, --tls_key) or mutual TLS (--tls_client_ca: client certificates are required
// and verified against that CA bundle). Certificates are read by gRPC's
// FileWatcherCertificateProvider, which re-reads the files every `reload_interval` and uses
// what it read for new connections, so rotated Kubernetes Secrets take effect without a
// restart (connections already open keep their session keys). gRPC reads checked copies of
// the files (tls_file_watcher.h): a key that does not parse or does not match its certificate
// stops the start-up, and a later one is refused (logged) while the last good pair stays.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/security/tls_file_watcher.h"

namespace attnserve::server {

struct TlsFiles {
  std::string cert;       // PEM certificate chain; empty: plaintext
  std::string key;        // PEM private key
  std::string client_ca;  // PEM CA bundle for client certificates; empty: none asked
  absl::Duration reload_interval = absl::Seconds(10);
};

struct ServerCredentials {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::string description;  // for the start-up log: "plaintext", "TLS", "mutual TLS (...)"
  bool mutual = false;
  // With TLS: the watcher gRPC's provider depends on; keep it as long as the server runs.
  std::shared_ptr<TlsFileWatcher> watcher;
};

// INVALID_ARGUMENT for a half configuration (a key without a certificate, a client CA without
// TLS) or files that cannot be read, do not parse or do not match now (so a typo stops the
// start-up, not the first client), naming the flag and the file.
absl::StatusOr<ServerCredentials> MakeServerCredentials(const TlsFiles& files);

}  // namespace attnserve::server
