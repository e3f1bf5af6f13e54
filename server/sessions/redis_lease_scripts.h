// The Lua scripts of RedisSessionStore's leases (session_lease.h says what a lease is). Redis
// runs a script atomically, so each check of a lease and the write it guards are one step: no
// other replica's command runs between them.
//
// Keys: L = "attnserve:lease:<id>" (the holder's token, expiring after the lease's duration),
// H = "attnserve:holder:<id>" (the token that last took L; it outlives L, so that a token whose
// lease lapsed can tell whether anyone took the session since), S = the snapshot's key.
// ARGV[1] is always this process's token.
#pragma once

namespace attnserve::server::redis_lease {

// KEYS: L, H. ARGV: token, lease ms, holder ms. Returns {0, holder} when another token holds
// L; {1, ""} renewed (own); {2, ""} taken again after it lapsed, this token the last holder;
// {3, ""} taken, another token (or none) the last holder.
inline constexpr char kAcquire[] = R"lua(
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, ''}
end
if cur then return {0, cur} end
local last = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
if last == ARGV[1] then return {2, ''} end
return {3, ''}
)lua";

// KEYS: L1, H1, L2, H2, ... ARGV: token, lease ms, holder ms. Renews each lease this token
// holds, takes again one that lapsed when no other token took it since (H absent or this
// token), and returns the 1-based indices of the sessions lost (held or last taken by another
// token).
inline constexpr char kRenew[] = R"lua(
local lost = {}
for i = 1, #KEYS, 2 do
  local cur = redis.call('GET', KEYS[i])
  if cur == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  elseif cur then
    lost[#lost + 1] = (i + 1) / 2
  else
    local last = redis.call('GET', KEYS[i + 1])
    if last == false or last == ARGV[1] then
      redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
      redis.call('SET', KEYS[i + 1], ARGV[1], 'PX', ARGV[3])
    else
      lost[#lost + 1] = (i + 1) / 2
    end
  end
end
return lost
)lua";

// KEYS: L. ARGV: token. Deletes L if this token holds it; returns 1 if it did, else 0.
inline constexpr char kRelease[] = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
)lua";

// The fence shared by the writes below: passes when this token holds L, or L lapsed and no
// other token took it since (then L is taken again). Else returns the token in the way.
#define ATTNSERVE_REDIS_LEASE_FENCE                           \
  "local cur = redis.call('GET', KEYS[2])\n"                  \
  "if cur ~= ARGV[1] then\n"                                  \
  "  if cur then return {0, cur} end\n"                       \
  "  local last = redis.call('GET', KEYS[3])\n"               \
  "  if last and last ~= ARGV[1] then return {0, last} end\n" \
  "  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])\n"    \
  "  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])\n"    \
  "end\n"

// KEYS: S, L, H. ARGV: token, lease ms, holder ms, snapshot, ttl ms. Sets S, fenced.
// Returns {1, ""} written, or {0, token in the way}.
inline constexpr char kFencedSet[] = ATTNSERVE_REDIS_LEASE_FENCE
    "redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])\n"
    "return {1, ''}\n";

// KEYS: S, L, H, T (a snapshot written in pieces). ARGV: token, lease ms, holder ms. Renames T
// over S, fenced; a refused T is deleted. Returns as kFencedSet.
inline constexpr char kFencedRename[] =
    "local cur = redis.call('GET', KEYS[2])\n"
    "local last = redis.call('GET', KEYS[3])\n"
    "if (cur and cur ~= ARGV[1]) or (not cur and last and last ~= ARGV[1]) then\n"
    "  redis.call('DEL', KEYS[4])\n"
    "  return {0, cur or last}\n"
    "end\n" ATTNSERVE_REDIS_LEASE_FENCE
    "redis.call('RENAME', KEYS[4], KEYS[1])\n"
    "return {1, ''}\n";

// KEYS: S, L, H. ARGV: token, lease ms, holder ms. Deletes S, L and H unless another token
// holds L (a session closed or expired here, or never leased). Returns {1, ""} when S was
// there, {2, ""} when it was not, or {0, token in the way}.
inline constexpr char kFencedDelete[] = R"lua(
local cur = redis.call('GET', KEYS[2])
if cur and cur ~= ARGV[1] then return {0, cur} end
redis.call('DEL', KEYS[2], KEYS[3])
if redis.call('DEL', KEYS[1]) == 1 then return {1, ''} end
return {2, ''}
)lua";

#undef ATTNSERVE_REDIS_LEASE_FENCE

}  // namespace attnserve::server::redis_lease
