// The server's flags: text
// Text in requests and generation (server/rpc/text_requests.h; README: the limits table).
// Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"

ABSL_FLAG(int64_t, max_text_bytes, int64_t{1} << 20,
          "Largest text in one request (Infer, append, Tokenize), refused with "
          "RESOURCE_EXHAUSTED before it is tokenized.");
ABSL_FLAG(int, max_stop_strings, 16, "Most stop strings one generate may give.");
ABSL_FLAG(int, max_stop_string_bytes, 256, "Longest stop string, in bytes.");
ABSL_FLAG(int, request_work_threads, -1,
          "Threads that tokenize large requests (server/rpc/request_work_pool.h), off the "
          "threads that answer calls, in turn between clients. -1: one for each core the process "
          "may use (its affinity and CPU quota); 0: no pool, "
          "every request's text is tokenized on the gRPC thread that received it.");
ABSL_FLAG(int64_t, request_work_inline_bytes, 4096,
          "A request with at most this many bytes of text (or of ids, 8 an id) is tokenized "
          "at once on the thread that received it (microseconds); a larger one waits for its "
          "client's turn on the request work pool.");
ABSL_FLAG(int64_t, max_request_work_per_client, 16,
          "Most large requests of one client waiting on the request work pool: beyond, "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_request_work_queued, 1024,
          "Most large requests of all clients waiting on the request work pool: beyond, "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, request_work_nice, 10,
          "The request work pool's threads run at this nice value (Linux, 0 to 19; 0: the "
          "server's own priority), so that tokenizing yields the cores to gRPC's threads and "
          "the scheduler's.");
