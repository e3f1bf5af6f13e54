// Who is calling: the principal of a call, from a bearer token or a client certificate, and
// whether that principal may see a session.
//
// Credentials, when any are configured (otherwise every call is the anonymous principal ""):
//   * --auth_tokens_file: one "principal: token-hash" a line (token-hash: the SHA-256 of the
//     token in lowercase hex, `printf %s "$TOKEN" | sha256sum`; '#' starts a comment). A call
//     presents "authorization: Bearer TOKEN"; its SHA-256 is compared with every entry in
//     constant time (OpenSSL's CRYPTO_memcmp, no early exit), so timing says nothing about
//     which entry or how much of it matched. The file is re-read when its modification time or
//     size changes (checked at most once a second), so a revoked token stops working within a
//     second or two without a restart; a file that fails to parse keeps the last good one.
//   * mutual TLS (--tls_client_ca) without a tokens file: the client certificate's subject
//     (gRPC's verified "x509_subject" property, e.g. "CN=alice,O=team") is the principal.
//     With a tokens file too, every call needs its token: the certificate admits the machine,
//     the token names the principal (and revoking a token cuts a client off, which a
//     certificate without a revocation list cannot).
// A call without valid credentials is UNAUTHENTICATED; the message does not say which part
// was wrong.
//
// Sessions belong to the principal that opened them. Caller::CanAccess: the owner, or a
// principal named in --admin_principals, compared exactly (whole strings: "CN=admin,O=team" is
// one principal, and neither "CN=admin" nor "O=team" is it). Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grpc {
class ServerContextBase;
}

namespace attnserve::server {

struct Caller {
  std::string principal;  // "" without authentication
  bool admin = false;     // may see and close every session
  // Whom the scheduler's queue is shared between (scheduler/queue_shares.h): "principal:" and
  // the principal with authentication, else "peer:" and the connection's peer address (its
  // port included: one connection). Set by the service.
  std::string client;

  // Whether this caller may use a session opened by `owner`.
  bool CanAccess(const std::string& owner) const { return admin || owner == principal; }
};

struct AuthOptions {
  std::string tokens_file;                    // empty: no tokens
  bool client_certificates = false;           // mutual TLS: the certificate subject is a principal
  std::vector<std::string> admin_principals;  // whole principals, compared exactly
};

// The principals of --admin_principals: separated by ';' (a certificate subject holds commas,
// "CN=admin,O=team", but never a bare ';': RFC 4514, which gRPC's x509_subject follows,
// escapes it as "\;"). A backslash escapes the next character (kept as written, so "\;" stays
// in the name as a subject shows it); whitespace around each name is dropped, empty names are
// skipped. INVALID_ARGUMENT for a trailing lone backslash.
absl::StatusOr<std::vector<std::string>> ParsePrincipalList(absl::string_view text);

class Authenticator {
 public:
  // Reads the tokens file (an error when it cannot be read or parsed: start-up stops).
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(AuthOptions options);

  // Whether calls need credentials (a tokens file or client certificates is configured).
  bool enabled() const { return !options_.tokens_file.empty() || options_.client_certificates; }

  // What a call presents: its "authorization" metadata value and its verified client
  // certificate's subject (each empty when absent).
  struct Credentials {
    std::string authorization;
    std::string certificate_subject;
  };
  static Credentials CredentialsOf(const grpc::ServerContextBase& context);

  // The caller of `context`'s call, or UNAUTHENTICATED.
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& context);
  // The same from the parts (a stream checks its credentials again at every message, so a
  // revoked token stops an open stream too).
  absl::StatusOr<Caller> Authenticate(const Credentials& credentials) {
    return Authenticate(credentials.authorization, credentials.certificate_subject);
  }
  absl::StatusOr<Caller> Authenticate(absl::string_view authorization,
                                      const std::string& certificate_subject);

  // Principals with a token now (after the last reload).
  int token_count();

  // The SHA-256 of `token`, lowercase hex: what the tokens file holds.
  static std::string TokenHash(absl::string_view token);

 private:
  using Digest = std::array<unsigned char, 32>;
  struct Entry {
    std::string principal;
    Digest digest;
  };
  explicit Authenticator(AuthOptions options);
  // Re-reads the tokens file when it changed (at most once a second).
  void MaybeReload();
  static absl::StatusOr<std::vector<Entry>> ReadTokens(const std::string& path);
  Caller Named(std::string principal) const;

  const AuthOptions options_;
  const absl::flat_hash_set<std::string> admins_;
  absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::Time last_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t file_mtime_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t file_size_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace attnserve::server
