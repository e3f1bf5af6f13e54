// The server's flags: sessions
// The session table: how many, how much state, how long.
// Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"

ABSL_FLAG(int64_t, max_sessions, 10000, "Most sessions held at once.");
ABSL_FLAG(int64_t, state_budget_bytes, int64_t{8} << 30,
          "Most bytes of session state (recurrent states and KV caches) held at once.");
ABSL_FLAG(bool, evict_idle_when_full, false,
          "When the session count or state budget is full, evict the least recently used idle "
          "session instead of refusing with RESOURCE_EXHAUSTED (with --session_store, idle "
          "sessions spill to the store instead, whatever this flag says).");
ABSL_FLAG(int, session_ttl_s, 600, "Idle time after which a session expires (default TTL).");
ABSL_FLAG(int, max_session_ttl_s, 86400, "Longest TTL a client may ask for.");
