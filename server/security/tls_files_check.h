// What a TLS configuration's files must hold before gRPC gets them: a PEM certificate chain
// (one certificate at least), a PEM private key that parses (unencrypted) and is the key of the
// chain's first certificate, and, for mutual TLS, a PEM bundle of one CA certificate or more.
// Parsed with OpenSSL 3 (libssl, which gRPC already links). gRPC 1.51's
// FileWatcherCertificateProvider checks none of this: a garbage or mismatched key is taken and
// every handshake then fails, while the server looks healthy.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace attnserve::server {

// The files' contents, read once (each at most kMaxTlsFileBytes).
struct TlsMaterial {
  std::string cert_chain;  // PEM
  std::string private_key;
  std::string client_ca;  // empty without mutual TLS

  bool operator==(const TlsMaterial& o) const {
    return cert_chain == o.cert_chain && private_key == o.private_key && client_ca == o.client_ca;
  }
};

inline constexpr size_t kMaxTlsFileBytes = size_t{1} << 20;

// Reads and checks the files. INVALID_ARGUMENT naming the flag and the file, and what is wrong
// ("--tls_key=/etc/tls.key: not a PEM private key", "... does not match the first certificate
// of --tls_cert=..."). `client_ca_path` may be empty.
absl::StatusOr<TlsMaterial> ReadTlsMaterial(const std::string& cert_path,
                                            const std::string& key_path,
                                            const std::string& client_ca_path);

}  // namespace attnserve::server
