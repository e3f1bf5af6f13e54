#include "server/sessions/redis_session_store.h"

// hiredis 0.14's sds.h has no C++ guard of its own, and hiredis.h includes it outside its
// guard: declared C here first.
extern "C" {
#include <hiredis/sds.h>
}
#include <hiredis/hiredis.h>

// The read-buffer sizing below uses hiredis 0.14's redisReader fields and sds functions.
static_assert(HIREDIS_MAJOR == 0 && HIREDIS_MINOR == 14,
              "check RedisSessionStore::Get's read-buffer sizing against this hiredis");

#include <cstdarg>
#include <memory>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/client_text.h"

namespace attnserve::server {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

constexpr absl::Duration kReconnectInterval = absl::Seconds(1);

// The error for a reply to `what` on session `id` that is not the kind asked for: DATA_LOSS
// when the key holds another type (WRONGTYPE: no snapshot will ever be there), else
// UNAVAILABLE (LOADING, MASTERDOWN and the like pass).
absl::Status UnexpectedReply(const char* what, const std::string& id, const redisReply& reply) {
  if (reply.type == REDIS_REPLY_ERROR && absl::StartsWith(reply.str, "WRONGTYPE")) {
    return absl::DataLossError(absl::StrCat("the snapshot of session ", id,
                                            " is a redis key of another type than a string (", what,
                                            " answered ", reply.str, ")"));
  }
  return absl::UnavailableError(absl::StrCat(
      "redis ", what, " answered ", reply.type == REDIS_REPLY_ERROR ? reply.str : "a wrong type"));
}

}  // namespace

RedisSessionStore::RedisSessionStore(std::string host, int port, absl::Duration timeout,
                                     int64_t max_snapshot_bytes)
    : host_(std::move(host)),
      port_(port),
      timeout_(timeout),
      max_snapshot_bytes_(max_snapshot_bytes) {}

RedisSessionStore::~RedisSessionStore() {
  absl::MutexLock lock(&mu_);
  if (context_ != nullptr) redisFree(context_);
}

absl::StatusOr<std::unique_ptr<RedisSessionStore>> RedisSessionStore::Open(
    const std::string& address, absl::Duration timeout, int64_t max_snapshot_bytes) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("redis session store address must be HOST:PORT, got ", ClientText(address)));
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--session_store_timeout_ms must be > 0");
  }
  if (max_snapshot_bytes <= 0) {
    return absl::InvalidArgumentError("--max_snapshot_bytes must be > 0");
  }
  std::unique_ptr<RedisSessionStore> store(
      new RedisSessionStore(address.substr(0, colon), port, timeout, max_snapshot_bytes));
  {
    absl::MutexLock lock(&store->mu_);
    store->ConnectLocked().IgnoreError();  // a first connection if Redis is up; else later
  }
  return store;
}

absl::Status RedisSessionStore::ConnectLocked() {
  if (context_ != nullptr) return absl::OkStatus();
  const absl::Time now = absl::Now();
  if (now - last_failed_connect_ < kReconnectInterval) {
    return absl::UnavailableError(
        absl::StrCat("redis ", host_, ":", port_, " is unreachable (retrying once a second)"));
  }
  const struct timeval tv = absl::ToTimeval(timeout_);
  redisContext* c = redisConnectWithTimeout(host_.c_str(), port_, tv);
  if (c == nullptr || c->err != 0) {
    const std::string reason = c != nullptr ? c->errstr : "out of memory";
    if (c != nullptr) redisFree(c);
    last_failed_connect_ = now;
    return absl::UnavailableError(
        absl::StrCat("cannot connect to redis ", host_, ":", port_, ": ", reason));
  }
  if (redisSetTimeout(c, tv) != REDIS_OK) {
    redisFree(c);
    last_failed_connect_ = now;
    return absl::UnavailableError("cannot set the redis command timeout");
  }
  context_ = c;
  return absl::OkStatus();
}

absl::Status RedisSessionStore::FailLocked(const char* what) {
  const std::string reason =
      context_ != nullptr && context_->err != 0 ? context_->errstr : "no reply";
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
  last_failed_connect_ = absl::Now();
  return absl::UnavailableError(
      absl::StrCat("redis ", host_, ":", port_, " ", what, " failed: ", reason));
}

absl::Status RedisSessionStore::CommandLocked(const char* what, const char* format, ...) {
  va_list args;
  va_start(args, format);
  Reply reply(static_cast<redisReply*>(redisvCommand(context_, format, args)));
  va_end(args);
  if (reply == nullptr) return FailLocked(what);
  if (reply->type == REDIS_REPLY_ERROR) {
    // Redis answered (e.g. OOM under maxmemory, or a value above 512 MB): the connection is
    // fine.
    return absl::ResourceExhaustedError(absl::StrCat("redis refused ", what, ": ", reply->str));
  }
  return absl::OkStatus();
}

absl::Status RedisSessionStore::Put(const std::string& id, std::string_view snapshot,
                                    absl::Duration ttl) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  if (absl::Status fits = CheckSnapshotSize(id, static_cast<int64_t>(snapshot.size()),
                                            max_snapshot_bytes_, /*writing=*/true);
      !fits.ok()) {
    return fits;
  }
  const std::string key = KeyOf(id);
  const long long ms = std::max<long long>(1, absl::ToInt64Milliseconds(ttl));
  absl::MutexLock lock(&mu_);
  if (absl::Status connected = ConnectLocked(); !connected.ok()) return connected;
  if (snapshot.size() <= kPieceBytes) {
    return CommandLocked("SET", "SET %b %b PX %lld", key.data(), key.size(), snapshot.data(),
                         snapshot.size(), ms);
  }
  // hiredis 0.14 sends a command from one buffer that it shifts after every partial write,
  // which is quadratic in the value's size (302 MB: 1.8 s). A large snapshot goes in pieces to
  // a temporary key that expires on its own if this never finishes, then replaces the session's
  // key at once (RENAME keeps the expiry), so a reader sees the old snapshot or the new one.
  // The temporary string is made at its full size first (SETRANGE at its last byte) and
  // filled in place: APPEND would make Redis reallocate and copy the growing string every time.
  // The temporary key is this writer's own (another replica may write the same session) and
  // has its expiry from its first command, so nothing is left behind if this never finishes.
  const std::string temporary =
      absl::StrCat(key, ":writing:", absl::Hex(absl::Uniform<uint64_t>(bitgen_)));
  absl::Status status = CommandLocked("SET", "SET %b %b PX %lld", temporary.data(),
                                      temporary.size(), snapshot.data(), size_t{1}, ms);
  if (status.ok()) {  // the whole length at once (SETRANGE keeps the expiry)
    status = CommandLocked("SETRANGE", "SETRANGE %b %lld %b", temporary.data(), temporary.size(),
                           static_cast<long long>(snapshot.size() - 1),
                           snapshot.data() + snapshot.size() - 1, size_t{1});
  }
  for (size_t offset = 1; status.ok() && offset + 1 < snapshot.size(); offset += kPieceBytes) {
    const size_t n = std::min(kPieceBytes, snapshot.size() - 1 - offset);
    status = CommandLocked("SETRANGE", "SETRANGE %b %lld %b", temporary.data(), temporary.size(),
                           static_cast<long long>(offset), snapshot.data() + offset, n);
  }
  if (status.ok()) {
    status = CommandLocked("RENAME", "RENAME %b %b", temporary.data(), temporary.size(), key.data(),
                           key.size());
  }
  if (!status.ok() && context_ != nullptr) {
    CommandLocked("DEL", "DEL %b", temporary.data(), temporary.size()).IgnoreError();
  }
  return status;
}

absl::StatusOr<std::string> RedisSessionStore::Get(const std::string& id) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  const std::string key = KeyOf(id);
  absl::MutexLock lock(&mu_);
  if (absl::Status connected = ConnectLocked(); !connected.ok()) return connected;
  // The reply's size first, so that hiredis's read buffer is made that large once: growing it
  // 1 MB at a time reallocates and copies it hundreds of times for a large snapshot.
  Reply length(
      static_cast<redisReply*>(redisCommand(context_, "STRLEN %b", key.data(), key.size())));
  if (length == nullptr) return FailLocked("STRLEN");
  if (length->type != REDIS_REPLY_INTEGER) return UnexpectedReply("STRLEN", id, *length);
  if (absl::Status fits = CheckSnapshotSize(id, length->integer, max_snapshot_bytes_,
                                            /*writing=*/false);
      !fits.ok()) {
    return fits;
  }
  redisReader* reader = context_->reader;
  const bool large = length->integer > (1 << 20);
  if (large) {
    // maxbuf 0: hiredis would otherwise free an empty buffer above 16 KiB on the next read.
    sds grown = sdsMakeRoomFor(reader->buf, static_cast<size_t>(length->integer) + 64);
    if (grown != nullptr) {  // else hiredis grows it as it reads, slower but the same
      reader->buf = grown;
      reader->maxbuf = 0;
    }
  }
  Reply reply(static_cast<redisReply*>(redisCommand(context_, "GET %b", key.data(), key.size())));
  if (context_ != nullptr && large) {  // give the large buffer back
    sdsfree(context_->reader->buf);
    context_->reader->buf = sdsempty();
    context_->reader->pos = 0;
    context_->reader->len = 0;
    context_->reader->maxbuf = REDIS_READER_MAX_BUF;
  }
  if (reply == nullptr) return FailLocked("GET");
  if (reply->type == REDIS_REPLY_NIL) {
    return absl::NotFoundError(absl::StrCat("no snapshot of session ", id));
  }
  if (reply->type != REDIS_REPLY_STRING) return UnexpectedReply("GET", id, *reply);
  return std::string(reply->str, reply->len);
}

absl::Status RedisSessionStore::Delete(const std::string& id) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  const std::string key = KeyOf(id);
  absl::MutexLock lock(&mu_);
  if (absl::Status connected = ConnectLocked(); !connected.ok()) return connected;
  Reply reply(static_cast<redisReply*>(redisCommand(context_, "DEL %b", key.data(), key.size())));
  if (reply == nullptr) return FailLocked("DEL");
  if (reply->type != REDIS_REPLY_INTEGER) {
    return absl::UnavailableError(absl::StrCat(
        "redis DEL answered ", reply->type == REDIS_REPLY_ERROR ? reply->str : "a non-integer"));
  }
  if (reply->integer == 0) return absl::NotFoundError(absl::StrCat("no snapshot of session ", id));
  return absl::OkStatus();
}

std::string RedisSessionStore::Describe() const {
  return absl::StrCat("redis://", host_, ":", port_, " (timeout ",
                      absl::ToInt64Milliseconds(timeout_), " ms)");
}

}  // namespace attnserve::server
