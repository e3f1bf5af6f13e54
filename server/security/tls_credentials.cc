#include "server/security/tls_credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace attnserve::server {

absl::StatusOr<ServerCredentials> MakeServerCredentials(const TlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (files.cert.empty()) {
    if (!files.client_ca.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
    }
    return ServerCredentials{grpc::InsecureServerCredentials(), "plaintext", false, nullptr};
  }
  const unsigned interval =
      static_cast<unsigned>(std::max<int64_t>(1, absl::ToInt64Seconds(files.reload_interval)));
  absl::StatusOr<std::unique_ptr<TlsFileWatcher>> watcher =
      TlsFileWatcher::Start(files.cert, files.key, files.client_ca, absl::Seconds(interval));
  if (!watcher.ok()) return watcher.status();
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      (*watcher)->staged_key(), (*watcher)->staged_cert(), (*watcher)->staged_client_ca(),
      interval);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  ServerCredentials out;
  out.watcher = *std::move(watcher);
  if (files.client_ca.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    out.description = absl::StrCat("TLS (", files.cert, ", re-read every ", interval, " s)");
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    out.description = absl::StrCat("mutual TLS (", files.cert, ", client certificates from ",
                                   files.client_ca, ", re-read every ", interval, " s)");
    out.mutual = true;
  }
  out.credentials = grpc::experimental::TlsServerCredentials(options);
  if (out.credentials == nullptr) {
    return absl::InvalidArgumentError("gRPC refused the TLS configuration");
  }
  return out;
}

}  // namespace attnserve::server
