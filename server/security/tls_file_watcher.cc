#include "server/security/tls_file_watcher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"

namespace attnserve::server {
namespace {

absl::Status WriteFile(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace

TlsFileWatcher::TlsFileWatcher(std::string cert, std::string key, std::string ca,
                               absl::Duration interval, std::string dir)
    : cert_path_(std::move(cert)),
      key_path_(std::move(key)),
      client_ca_path_(std::move(ca)),
      interval_(interval),
      dir_(std::move(dir)) {}

absl::StatusOr<std::unique_ptr<TlsFileWatcher>> TlsFileWatcher::Start(
    const std::string& cert_path, const std::string& key_path, const std::string& client_ca_path,
    absl::Duration reload_interval) {
  absl::StatusOr<TlsMaterial> material = ReadTlsMaterial(cert_path, key_path, client_ca_path);
  if (!material.ok()) return material.status();
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/attnserve-tls-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) {  // mode 0700
    return absl::InternalError(
        absl::StrCat("cannot make the TLS staging folder ", pattern, ": ", strerror(errno)));
  }
  std::unique_ptr<TlsFileWatcher> watcher(
      new TlsFileWatcher(cert_path, key_path, client_ca_path, reload_interval, pattern));
  if (absl::Status s = watcher->Stage(*material); !s.ok()) return s;
  watcher->thread_ = std::thread([w = watcher.get()] {
    NameThisThread("tls-watcher");
    w->Watch();
  });
  return watcher;
}

TlsFileWatcher::~TlsFileWatcher() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

absl::Status TlsFileWatcher::Stage(const TlsMaterial& m) {
  const int next = generation_.load() + 1;
  const std::string name = absl::StrCat("gen-", next);
  const std::string folder = absl::StrCat(dir_, "/", name);
  std::error_code ignored;
  std::filesystem::remove_all(folder, ignored);
  if (::mkdir(folder.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat("cannot make ", folder, ": ", strerror(errno)));
  }
  if (absl::Status s = WriteFile(folder + "/tls.crt", m.cert_chain); !s.ok()) return s;
  if (absl::Status s = WriteFile(folder + "/tls.key", m.private_key); !s.ok()) return s;
  if (!m.client_ca.empty()) {
    if (absl::Status s = WriteFile(folder + "/ca.crt", m.client_ca); !s.ok()) return s;
  }
  const std::string link = dir_ + "/current.new";
  ::unlink(link.c_str());
  if (::symlink(name.c_str(), link.c_str()) != 0 ||
      ::rename(link.c_str(), (dir_ + "/current").c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot point ", dir_, "/current at ", name, ": ", strerror(errno)));
  }
  // The generation before the previous one: no reader can still be in it.
  if (next > 2) std::filesystem::remove_all(absl::StrCat(dir_, "/gen-", next - 2), ignored);
  staged_ = m;
  generation_.store(next);
  return absl::OkStatus();
}

void TlsFileWatcher::Watch() {
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    absl::StatusOr<TlsMaterial> m = ReadTlsMaterial(cert_path_, key_path_, client_ca_path_);
    if (!m.ok()) {
      const std::string reason(m.status().message());
      if (reason != rejected_) {
        std::cerr << "attnserve-server: keeping the last good TLS files: " << reason << std::endl;
        rejected_ = reason;
      }
      continue;
    }
    rejected_.clear();
    if (*m == staged_) continue;
    if (absl::Status s = Stage(*m); !s.ok()) {
      std::cerr << "attnserve-server: keeping the last good TLS files: " << s.message()
                << std::endl;
      continue;
    }
    std::cout << "attnserve-server: TLS files changed and checked; new connections get them"
              << std::endl;
  }
}

}  // namespace attnserve::server
