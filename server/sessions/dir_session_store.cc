#include "server/sessions/dir_session_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "server/client_text.h"

namespace attnserve::server {
namespace {

constexpr char kSuffix[] = ".snapshot";
constexpr char kTemporaryMarker[] = ".tmp.";  // after kSuffix, then a decimal counter

// The files this store writes: "<id>.snapshot" and its temporaries "<id>.snapshot.tmp.<n>".
enum class FileKind { kOther, kSnapshot, kTemporary };

// Which of them `name` is, and (not kOther) its session id.
FileKind Classify(const std::string& name, std::string* id) {
  const size_t end_of_id = name.find('.');
  if (end_of_id == std::string::npos) return FileKind::kOther;
  *id = name.substr(0, end_of_id);
  if (!ValidateSessionId(*id).ok()) return FileKind::kOther;
  absl::string_view rest = absl::string_view(name).substr(end_of_id);
  if (!absl::ConsumePrefix(&rest, kSuffix)) return FileKind::kOther;
  if (rest.empty()) return FileKind::kSnapshot;
  if (!absl::ConsumePrefix(&rest, kTemporaryMarker) || rest.empty()) return FileKind::kOther;
  for (char c : rest) {
    if (!absl::ascii_isdigit(c)) return FileKind::kOther;
  }
  return FileKind::kTemporary;
}

absl::Status Errno(const std::string& what, const std::string& path) {
  const int e = errno;
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::UnavailableError(message);
}

// Closes a descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

absl::Time ModificationTime(const struct stat& st) { return absl::TimeFromTimespec(st.st_mtim); }

const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "a file of another kind";
}

// What is under a session's name can never be its snapshot.
absl::Status NotASnapshot(const std::string& id, const std::string& path, const char* what) {
  return absl::DataLossError(absl::StrCat("the snapshot of session ", id, " (", path, ") is ", what,
                                          ", not a regular file"));
}

}  // namespace

DirSessionStore::DirSessionStore(std::string folder, int64_t max_bytes, int64_t max_snapshot_bytes)
    : folder_(std::move(folder)), max_bytes_(max_bytes), max_snapshot_bytes_(max_snapshot_bytes) {}

absl::StatusOr<std::unique_ptr<DirSessionStore>> DirSessionStore::Open(const std::string& folder,
                                                                       int64_t max_bytes,
                                                                       int64_t max_snapshot_bytes) {
  if (folder.empty()) return absl::InvalidArgumentError("dir: session store needs a folder");
  if (max_bytes <= 0 || max_snapshot_bytes <= 0) {
    return absl::InvalidArgumentError(
        "--session_store_max_bytes and --max_snapshot_bytes must be > 0");
  }
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create session store folder ", folder, ": ", error.message()));
  }
  if (::access(folder.c_str(), R_OK | W_OK | X_OK) != 0) {
    return Errno("session store folder is not readable and writable:", folder);
  }
  std::unique_ptr<DirSessionStore> store(
      new DirSessionStore(folder, max_bytes, max_snapshot_bytes));
  store->Sweep(absl::Now(), /*temporaries=*/true);
  return store;
}

std::string DirSessionStore::PathOf(const std::string& id) const {
  return absl::StrCat(folder_, "/", id, kSuffix);
}

int64_t DirSessionStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return total_bytes_;
}

void DirSessionStore::Forget(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sizes_.find(id);
  if (it == sizes_.end()) return;
  total_bytes_ -= it->second;
  sizes_.erase(it);
}

int64_t DirSessionStore::Sweep(absl::Time now, bool temporaries) {
  DIR* dir = ::opendir(folder_.c_str());
  if (dir == nullptr) return 0;
  struct Entry {
    std::string name;
    std::string id;
    bool snapshot;  // else one of this store's temporaries
    bool expired;
    int64_t size;
  };
  std::vector<Entry> entries;
  while (struct dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    std::string id;
    const FileKind kind = Classify(name, &id);
    if (kind == FileKind::kOther || (kind == FileKind::kTemporary && !temporaries)) continue;
    struct stat st;
    if (::fstatat(::dirfd(dir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode)) {
      continue;
    }
    const bool snapshot = kind == FileKind::kSnapshot;
    entries.push_back({name, std::move(id), snapshot, !snapshot || ModificationTime(st) <= now,
                       static_cast<int64_t>(st.st_size)});
  }
  ::closedir(dir);
  int64_t freed = 0;
  absl::MutexLock lock(&mu_);
  // The listing is the truth: what is counted and not there any more is forgotten.
  absl::flat_hash_map<std::string, int64_t> listed;
  for (const Entry& e : entries) {
    if (e.snapshot && !e.expired) listed[e.id] = e.size;
  }
  for (auto it = sizes_.begin(); it != sizes_.end();) {
    if (!listed.contains(it->first)) {
      total_bytes_ -= it->second;
      freed += it->second;
      sizes_.erase(it++);
    } else {
      ++it;
    }
  }
  for (const Entry& e : entries) {
    if (e.expired) {
      ::unlink(absl::StrCat(folder_, "/", e.name).c_str());
    } else if (!sizes_.contains(e.id)) {
      sizes_[e.id] = e.size;
      total_bytes_ += e.size;
    }
  }
  return freed;
}

absl::Status DirSessionStore::Put(const std::string& id, std::string_view snapshot,
                                  absl::Duration ttl) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  const int64_t size = static_cast<int64_t>(snapshot.size());
  if (absl::Status fits = CheckSnapshotSize(id, size, max_snapshot_bytes_, /*writing=*/true);
      !fits.ok()) {
    return fits;
  }
  std::string temporary;
  {
    absl::MutexLock lock(&mu_);
    auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = sizes_.find(id);
      return total_bytes_ - (it == sizes_.end() ? 0 : it->second) + size <= max_bytes_;
    };
    if (!fits()) {
      mu_.Unlock();
      Sweep(absl::Now(), /*temporaries=*/false);
      mu_.Lock();
    }
    if (!fits()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("session store ", folder_, " is full: ", total_bytes_,
                       " bytes of --session_store_max_bytes=", max_bytes_, ", a ", size,
                       "-byte snapshot does not fit"));
    }
    temporary = absl::StrCat(PathOf(id), kTemporaryMarker, next_temporary_++);
  }
  Fd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (fd.get() < 0) return Errno("cannot create", temporary);
  auto fail = [&](const std::string& what) {
    absl::Status status = Errno(what, temporary);
    ::unlink(temporary.c_str());
    return status;
  };
  for (size_t done = 0; done < snapshot.size();) {
    const ssize_t n = ::write(fd.get(), snapshot.data() + done, snapshot.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("cannot write");
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd.get()) != 0) return fail("cannot sync");
  const absl::Time expiry = absl::Now() + std::max(ttl, absl::Seconds(1));
  const struct timespec times[2] = {absl::ToTimespec(absl::Now()), absl::ToTimespec(expiry)};
  if (::futimens(fd.get(), times) != 0) return fail("cannot set the expiry of");
  if (::close(fd.release()) != 0) return fail("cannot close");
  const std::string path = PathOf(id);
  if (::rename(temporary.c_str(), path.c_str()) != 0) return fail("cannot rename");
  Fd dir(::open(folder_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0 || ::fsync(dir.get()) != 0) return Errno("cannot sync folder", folder_);
  absl::MutexLock lock(&mu_);
  int64_t& recorded = sizes_[id];
  total_bytes_ += size - recorded;
  recorded = size;
  return absl::OkStatus();
}

absl::StatusOr<std::string> DirSessionStore::Get(const std::string& id) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  const std::string path = PathOf(id);
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, for ever.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no snapshot of session ", id));
    if (errno == ELOOP) return NotASnapshot(id, path, "a symbolic link");  // O_NOFOLLOW's
    if (errno == ENXIO) return NotASnapshot(id, path, "a socket");
    return Errno("cannot open", path);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot stat", path);
  if (!S_ISREG(st.st_mode)) return NotASnapshot(id, path, FileTypeName(st.st_mode));
  if (ModificationTime(st) <= absl::Now()) {
    // Left for Sweep: unlinking by path here could remove a newer file renamed in meanwhile.
    return absl::NotFoundError(absl::StrCat("the snapshot of session ", id, " expired"));
  }
  if (absl::Status fits = CheckSnapshotSize(id, st.st_size, max_snapshot_bytes_,
                                            /*writing=*/false);
      !fits.ok()) {
    return fits;
  }
  // A regular file: plain blocking reads from here (a read must never answer EAGAIN).
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return Errno("cannot read", path);
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot read", path);
    if (n == 0) {  // shorter than fstat said: hand back what is there; the reader checks it
      bytes.resize(done);
      break;
    }
    done += static_cast<size_t>(n);
  }
  return bytes;
}

absl::Status DirSessionStore::Delete(const std::string& id) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  const std::string path = PathOf(id);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) {
      Forget(id);  // whatever was counted for it is not there
      return absl::NotFoundError(absl::StrCat("no snapshot of session ", id));
    }
    return Errno("cannot remove", path);
  }
  Forget(id);
  return absl::OkStatus();
}

std::string DirSessionStore::Describe() const {
  return absl::StrCat("dir:", folder_, " (at most ", max_bytes_, " bytes)");
}

}  // namespace attnserve::server
