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
#include "server/sessions/redis_lease_scripts.h"

namespace attnserve::server {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

constexpr absl::Duration kReconnectInterval = absl::Seconds(1);
// How long the last-holder key outlives its last lease: longer than any session lives
// (--max_session_ttl_s is at most a day by default), tiny (one token).
constexpr long long kHolderMs = 7LL * 24 * 3600 * 1000;

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
                                     int64_t max_snapshot_bytes, absl::Duration lease_duration,
                                     std::string lease_token)
    : host_(std::move(host)),
      port_(port),
      timeout_(timeout),
      max_snapshot_bytes_(max_snapshot_bytes),
      lease_duration_(lease_duration),
      lease_token_(std::move(lease_token)) {}

RedisSessionStore::~RedisSessionStore() {
  absl::MutexLock lock(&mu_);
  if (context_ != nullptr) redisFree(context_);
}

absl::StatusOr<std::unique_ptr<RedisSessionStore>> RedisSessionStore::Open(
    const std::string& address, absl::Duration timeout, int64_t max_snapshot_bytes,
    absl::Duration lease_duration, std::string lease_token) {
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
  if (lease_duration < absl::ZeroDuration() ||
      (lease_duration > absl::ZeroDuration() && lease_duration < absl::Milliseconds(100))) {
    return absl::InvalidArgumentError("--session_lease_ms must be 0 (no leases) or >= 100");
  }
  if (lease_duration > absl::ZeroDuration() && lease_token.empty()) {
    return absl::InvalidArgumentError("a redis session store with leases needs a lease token");
  }
  std::unique_ptr<RedisSessionStore> store(
      new RedisSessionStore(address.substr(0, colon), port, timeout, max_snapshot_bytes,
                            lease_duration, std::move(lease_token)));
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
  const bool fenced = leases() != nullptr;
  const std::vector<std::string> fence_keys = {key, LeaseKeyOf(id), HolderKeyOf(id)};
  const std::string ms_text = std::to_string(ms);
  if (snapshot.size() <= kPieceBytes) {
    if (!fenced) {
      return CommandLocked("SET", "SET %b %b PX %lld", key.data(), key.size(), snapshot.data(),
                           snapshot.size(), ms);
    }
    absl::StatusOr<ScriptReply> reply =
        EvalLocked("fenced SET", redis_lease::kFencedSet, fence_keys, {snapshot, ms_text});
    if (!reply.ok()) return reply.status();
    return FenceResult(id, *reply);
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
  if (status.ok() && !fenced) {
    status = CommandLocked("RENAME", "RENAME %b %b", temporary.data(), temporary.size(), key.data(),
                           key.size());
  } else if (status.ok()) {  // the rename, fenced (a refused piece is deleted by the script)
    std::vector<std::string> keys = fence_keys;
    keys.push_back(temporary);
    absl::StatusOr<ScriptReply> reply =
        EvalLocked("fenced RENAME", redis_lease::kFencedRename, keys);
    status = reply.ok() ? FenceResult(id, *reply) : reply.status();
    if (IsLeaseLost(status)) return status;
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
  if (leases() != nullptr) {
    absl::StatusOr<ScriptReply> fenced = EvalLocked("fenced DEL", redis_lease::kFencedDelete,
                                                    {key, LeaseKeyOf(id), HolderKeyOf(id)});
    if (!fenced.ok()) return fenced.status();
    if (absl::Status fence = FenceResult(id, *fenced); !fence.ok()) return fence;
    if (fenced->code == 2) return absl::NotFoundError(absl::StrCat("no snapshot of session ", id));
    return absl::OkStatus();
  }
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
                      absl::ToInt64Milliseconds(timeout_), " ms, ",
                      lease_duration_ > absl::ZeroDuration()
                          ? absl::StrCat("leases of ", absl::ToInt64Milliseconds(lease_duration_),
                                         " ms as ", lease_token_)
                          : std::string("no leases"),
                      ")");
}

absl::StatusOr<RedisSessionStore::ScriptReply> RedisSessionStore::EvalLocked(
    const char* what, const char* script, const std::vector<std::string>& keys,
    const std::vector<std::string_view>& args) {
  const std::string key_count = std::to_string(keys.size());
  const std::string lease_ms = std::to_string(absl::ToInt64Milliseconds(lease_duration_));
  const std::string holder_ms = std::to_string(kHolderMs);
  std::vector<std::string_view> argv = {"EVAL", script, key_count};
  for (const std::string& k : keys) argv.push_back(k);
  argv.push_back(lease_token_);
  argv.push_back(lease_ms);
  argv.push_back(holder_ms);
  for (std::string_view a : args) argv.push_back(a);
  std::vector<const char*> pointers;
  std::vector<size_t> lengths;
  for (std::string_view a : argv) {
    pointers.push_back(a.data());
    lengths.push_back(a.size());
  }
  Reply reply(static_cast<redisReply*>(
      redisCommandArgv(context_, static_cast<int>(argv.size()), pointers.data(), lengths.data())));
  if (reply == nullptr) return FailLocked(what);
  if (reply->type == REDIS_REPLY_ERROR) {
    return absl::UnavailableError(absl::StrCat("redis ", what, " answered ", reply->str));
  }
  if (reply->type != REDIS_REPLY_ARRAY) {
    return absl::UnavailableError(absl::StrCat("redis ", what, " answered a wrong type"));
  }
  ScriptReply parsed;
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply* e = reply->element[i];
    if (e->type == REDIS_REPLY_INTEGER) {
      parsed.integers.push_back(e->integer);
      if (i == 0) parsed.code = e->integer;
    } else if (e->type == REDIS_REPLY_STRING && i == 1) {
      parsed.token.assign(e->str, e->len);
    }
  }
  return parsed;
}

absl::Status RedisSessionStore::FenceResult(const std::string& id, const ScriptReply& reply) {
  if (reply.code > 0) return absl::OkStatus();
  return LeaseLost(id, LeaseTokenAddress(reply.token));
}

absl::StatusOr<SessionLeases::Acquired> RedisSessionStore::Acquire(const std::string& id) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  if (leases() == nullptr) return absl::FailedPreconditionError("this store has no leases");
  absl::MutexLock lock(&mu_);
  if (absl::Status connected = ConnectLocked(); !connected.ok()) return connected;
  absl::StatusOr<ScriptReply> reply =
      EvalLocked("lease acquire", redis_lease::kAcquire, {LeaseKeyOf(id), HolderKeyOf(id)});
  if (!reply.ok()) return reply.status();
  switch (reply->code) {
    case 0:
      return LeaseHeldElsewhere(id, LeaseTokenAddress(reply->token));
    case 1:
      return Acquired::kOwn;
    case 2:
      return Acquired::kResumed;
    default:
      return Acquired::kTaken;
  }
}

absl::StatusOr<std::vector<bool>> RedisSessionStore::Renew(const std::vector<std::string>& ids) {
  if (leases() == nullptr) return absl::FailedPreconditionError("this store has no leases");
  std::vector<bool> lost(ids.size(), false);
  if (ids.empty()) return lost;
  std::vector<std::string> keys;
  keys.reserve(2 * ids.size());
  for (const std::string& id : ids) {
    if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
    keys.push_back(LeaseKeyOf(id));
    keys.push_back(HolderKeyOf(id));
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status connected = ConnectLocked(); !connected.ok()) return connected;
  absl::StatusOr<ScriptReply> reply = EvalLocked("lease renew", redis_lease::kRenew, keys);
  if (!reply.ok()) return reply.status();
  for (long long index : reply->integers) {
    if (index >= 1 && index <= static_cast<long long>(ids.size())) lost[index - 1] = true;
  }
  return lost;
}

absl::Status RedisSessionStore::Release(const std::string& id) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  if (leases() == nullptr) return absl::FailedPreconditionError("this store has no leases");
  absl::MutexLock lock(&mu_);
  if (absl::Status connected = ConnectLocked(); !connected.ok()) return connected;
  Reply reply(static_cast<redisReply*>(
      redisCommand(context_, "EVAL %s 1 %b %b", redis_lease::kRelease, LeaseKeyOf(id).data(),
                   LeaseKeyOf(id).size(), lease_token_.data(), lease_token_.size())));
  if (reply == nullptr) return FailLocked("lease release");
  if (reply->type != REDIS_REPLY_INTEGER) return UnexpectedReply("lease release", id, *reply);
  return absl::OkStatus();
}

absl::StatusOr<std::string> RedisSessionStore::Holder(const std::string& id) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  if (leases() == nullptr) return absl::FailedPreconditionError("this store has no leases");
  absl::MutexLock lock(&mu_);
  if (absl::Status connected = ConnectLocked(); !connected.ok()) return connected;
  const std::string key = LeaseKeyOf(id);
  Reply reply(static_cast<redisReply*>(redisCommand(context_, "GET %b", key.data(), key.size())));
  if (reply == nullptr) return FailLocked("lease holder");
  if (reply->type == REDIS_REPLY_NIL) return std::string();
  if (reply->type != REDIS_REPLY_STRING) return UnexpectedReply("lease holder", id, *reply);
  return std::string(reply->str, reply->len);
}

}  // namespace attnserve::server
