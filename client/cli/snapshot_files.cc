#include "client/cli/snapshot_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace attnserve::cli {
namespace {

// "cannot VERB FILE: reason" for the errno of a failed system call.
std::string FileProblem(const std::string& verb, const std::string& path) {
  return absl::StrCat("cannot ", verb, " ", path, ": ", std::strerror(errno));
}

}  // namespace

bool ReadWholeFile(const std::string& path, std::string* data, std::string* problem) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *problem = FileProblem("read", path);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    *problem = absl::StrCat("cannot read ", path, ": it is a directory");
    return false;
  }
  if (st.st_size > 0) data->reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *problem = FileProblem("read", path);
      close(fd);
      return false;
    }
    if (n == 0) break;
    data->append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

bool AtomicFile::Open(std::string* problem) {
  fd_ = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  // An existing PATH.tmp keeps its mode through O_TRUNC: make it the owner's alone.
  if (fd_ < 0 || fchmod(fd_, 0600) != 0) {
    *problem = FileProblem("write", tmp_);
    Discard();
    return false;
  }
  return true;
}

bool AtomicFile::Write(const std::string& data, std::string* problem) {
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = write(fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *problem = FileProblem("write", tmp_);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

bool AtomicFile::Commit(std::string* problem) {
  if (fsync(fd_) != 0) {
    *problem = FileProblem("write", tmp_);
    return false;
  }
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) {
    *problem = FileProblem("write", tmp_);
    unlink(tmp_.c_str());
    return false;
  }
  if (rename(tmp_.c_str(), path_.c_str()) != 0) {
    *problem = absl::StrCat("cannot rename ", tmp_, " to ", path_, ": ", std::strerror(errno));
    unlink(tmp_.c_str());
    return false;
  }
  const size_t slash = path_.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : path_.substr(0, std::max<size_t>(slash, 1));
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);  // best effort: the file itself is complete either way
    close(dir_fd);
  }
  return true;
}

void AtomicFile::Discard() {
  if (fd_ < 0) return;
  close(fd_);
  fd_ = -1;
  unlink(tmp_.c_str());
}

}  // namespace attnserve::cli
