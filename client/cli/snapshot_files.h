// Session snapshot files for `sessions --export` and `--import`: read whole, or written
// atomically (PATH.tmp, fsynced, renamed) so that a failed export never leaves half a file.
#ifndef ATTNSERVE_CLIENT_CLI_SNAPSHOT_FILES_H_
#define ATTNSERVE_CLIENT_CLI_SNAPSHOT_FILES_H_

#include <string>
#include <utility>

namespace attnserve::cli {

// The whole of `path` into `data`; false (with `problem` set) when it cannot be read.
bool ReadWholeFile(const std::string& path, std::string* data, std::string* problem);

// A file written atomically: the bytes go to PATH.tmp (mode 0600), which Commit fsyncs and
// renames to PATH; without a Commit (an error, a failed call) PATH.tmp is removed and PATH is
// left as it was.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {}
  ~AtomicFile() { Discard(); }

  // False (with `problem` set) when PATH.tmp cannot be created.
  bool Open(std::string* problem);
  // Appends `data`; false (with `problem` set) on a failed write.
  bool Write(const std::string& data, std::string* problem);
  // fsync, close, rename to PATH (and fsync its directory, so that the rename lasts too).
  bool Commit(std::string* problem);

 private:
  void Discard();

  const std::string path_;
  const std::string tmp_;
  int fd_ = -1;
};

}  // namespace attnserve::cli

#endif  // ATTNSERVE_CLIENT_CLI_SNAPSHOT_FILES_H_
