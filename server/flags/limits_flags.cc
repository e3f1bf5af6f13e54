// The server's flags: limits
// Per-connection and per-call limits (README: the limits table).
// Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"
#include "server/sessions/session_table.h"

ABSL_FLAG(int, max_concurrent_streams, 100, "Most concurrent calls on one connection.");
ABSL_FLAG(int, max_metadata_bytes, 16384,
          "Largest metadata (headers) a call may send: beyond, that call alone fails with "
          "RESOURCE_EXHAUSTED (the transport refuses above 4x, at least 64 KiB).");
ABSL_FLAG(int, max_message_bytes, 64 << 20, "Largest gRPC message received or sent.");
ABSL_FLAG(int64_t, max_tokens_per_request, 65536, "Most tokens in one Infer or append.");
ABSL_FLAG(int, max_new_tokens, 1024, "Most tokens one generate may ask for.");
ABSL_FLAG(int64_t, max_stream_buffer_bytes, int64_t{16} << 20,
          "Bytes of responses one stream may have waiting for a client that does not read them; "
          "beyond, the server reads nothing more from that stream until the client catches up.");
ABSL_FLAG(int, retry_window, attnserve::server::Session::kDefaultRetryWindow,
          "Appends whose results each session keeps, so that a retried append (an applied "
          "sequence number, the same tokens, output and generate) is answered again without "
          "being applied twice; older ones are ABORTED.");
ABSL_FLAG(int64_t, max_snapshot_bytes, int64_t{1} << 30,
          "Largest session snapshot ImportSession takes, and the session store writes or "
          "reads (a larger stored file is DATA_LOSS; a larger write is refused and the "
          "session stays in memory).");
