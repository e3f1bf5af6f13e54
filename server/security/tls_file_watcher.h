// Keeps gRPC on the last good TLS files. The files the flags name (--tls_cert, --tls_key,
// --tls_client_ca) are read and checked (tls_files_check.h) at start and every
// `reload_interval`; only a set that passes is copied into a private staging folder (mode
// 0700 under $TMPDIR, else /tmp; files 0600), and gRPC's FileWatcherCertificateProvider reads
// the copies. A changed set that fails the check is logged once, with the reason, and gRPC
// keeps the last good one: a half-rotated Secret (the new key next to the old certificate) or
// a garbage key never reaches new connections.
//
// Staging as Kubernetes updates a mounted Secret: each good set goes into a new generation
// folder, then the symbolic link "current" is swapped to it with one rename(2), so a reader
// sees either the old set or the new one. The previous generation stays until the next swap
// (a read in progress may still use it). The folder is removed at destruction.
//
// Thread-safety: Start() and the destructor on one thread; the watch runs on a thread of its
// own ("tls-watcher").
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/security/tls_files_check.h"

namespace attnserve::server {

class TlsFileWatcher {
 public:
  // INVALID_ARGUMENT (naming the flag and the file) when the files fail the check now;
  // INTERNAL when the staging folder cannot be written.
  static absl::StatusOr<std::unique_ptr<TlsFileWatcher>> Start(const std::string& cert_path,
                                                               const std::string& key_path,
                                                               const std::string& client_ca_path,
                                                               absl::Duration reload_interval);
  ~TlsFileWatcher();
  TlsFileWatcher(const TlsFileWatcher&) = delete;
  TlsFileWatcher& operator=(const TlsFileWatcher&) = delete;

  // The checked copies, for gRPC (stable paths through the "current" link).
  std::string staged_cert() const { return dir_ + "/current/tls.crt"; }
  std::string staged_key() const { return dir_ + "/current/tls.key"; }
  std::string staged_client_ca() const {
    return client_ca_path_.empty() ? "" : dir_ + "/current/ca.crt";
  }
  // Sets staged so far (1 after Start).
  int generation() const { return generation_.load(); }

 private:
  TlsFileWatcher(std::string cert, std::string key, std::string ca, absl::Duration interval,
                 std::string dir);
  // Writes `m` as the next generation and points "current" at it.
  absl::Status Stage(const TlsMaterial& m);
  void Watch();

  const std::string cert_path_, key_path_, client_ca_path_;
  const absl::Duration interval_;
  const std::string dir_;
  TlsMaterial staged_;    // watcher thread only (after Start)
  std::string rejected_;  // the last refused reason, logged once
  std::atomic<int> generation_{0};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace attnserve::server
