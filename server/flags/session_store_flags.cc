// The server's flags: session store
// Where sessions go when they leave memory (README: Sessions that outlive the process).
// Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"

ABSL_FLAG(std::string, session_store, "",
          "Where sessions go when they leave memory, so that they outlive the process: "
          "dir:PATH (a local folder, one file per session) or redis://HOST:PORT (shared by "
          "replicas: any of them resumes any session). Sessions spill there when the table is "
          "full, are saved there at drain and every --checkpoint_every_appends appends, and are "
          "restored from there on their next use. Empty: memory only.");
ABSL_FLAG(int64_t, session_store_max_bytes, int64_t{8} << 30,
          "dir: store: most bytes of snapshots the folder holds.");
ABSL_FLAG(int, session_store_timeout_ms, 1000,
          "redis: store: connect and command timeout in milliseconds.");
ABSL_FLAG(int64_t, session_store_queue_bytes, int64_t{1} << 30,
          "Most bytes of session snapshots waiting to be written to the store; a spill or "
          "checkpoint beyond is dropped (counted; a spill then leaves the session in memory).");
ABSL_FLAG(int, checkpoint_every_appends, 0,
          "Write a session to the store every N appends applied to it (0: only when it spills "
          "and at drain). After a crash a session resumes at its last checkpoint.");
ABSL_FLAG(int, drain_save_deadline_s, 10,
          "Seconds the drain gives to writing every changed session to the store, after the "
          "calls in flight have finished (--drain_deadline_s).");
ABSL_FLAG(int, session_lease_ms, 5000,
          "redis: store: the lease by which a replica holds each session it has in memory "
          "(renewed every third of it; 0: no leases). A session leased by another replica is "
          "UNAVAILABLE here, naming that replica in the trailing metadata "
          "x-attnserve-session-owner; after a crash another replica takes a session over from "
          "its last stored copy once the lease has expired, so this bounds the failover time. "
          "Every write of a session to the store is fenced by the lease.");
