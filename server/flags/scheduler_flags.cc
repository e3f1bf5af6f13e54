// The server's flags: scheduler
// The scheduler: kernel threads, batches and the request queue.
// Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"
#include "server/scheduler/decode_parts.h"

ABSL_FLAG(int, intra_op_threads, 0,
          "Threads the kernels use inside each computation of the scheduler (0: one per core "
          "this process may use: its affinity mask capped by its cgroup CPU quota). All model "
          "work runs on the scheduler's one loop, in batches.");
ABSL_FLAG(bool, adapt_threads_to_load, true,
          "Run the kernels on fewer threads while other processes keep cores busy (sampled "
          "every 100 ms from /proc), so that a thread team never waits at its barriers for a "
          "thread the kernel descheduled; never more than --intra_op_threads.");
ABSL_FLAG(int64_t, decode_split_max_bytes_per_row,
          attnserve::server::scheduler::kDefaultDecodeSplitMaxBytesPerRow,
          "Data-parallel decode: a batched decode step runs as one part per kernel thread, "
          "each a whole step of its own rows on one thread, instead of every product split "
          "across the threads, when the model's decode weights (bytes) divided by a part's rows "
          "are at most this: no barrier inside the step, at the price of each part reading the "
          "weights again. The default splits the built-in models (15 MB) from 8 rows and an "
          "int8 mamba-130m (130 MB) from 64; never a float32 one. 0: never.");
ABSL_FLAG(int64_t, max_batch_sessions, 64,
          "Most sessions decoded in one scheduler iteration (rows of one batched step).");
ABSL_FLAG(int64_t, max_batch_tokens, 256,
          "Most tokens one scheduler iteration computes (decode rows plus prefill chunks): "
          "longer prompts are cut into chunks, so decoding sessions keep getting steps.");
ABSL_FLAG(int64_t, max_queue, 1024,
          "Requests submitted to the scheduler and not finished, over all sessions, before "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_queue_per_session, 64,
          "Requests queued on one session before RESOURCE_EXHAUSTED, so that one client piling "
          "requests onto its session cannot take the whole --max_queue from the others.");
ABSL_FLAG(int64_t, max_queue_per_client, 0,
          "Requests one client (a principal; without authentication, a connection) may have "
          "queued (0: --max_queue). When the queue is full, a client below its fair share "
          "(--max_queue / clients holding requests) is still admitted while another holds more "
          "than its share, so one client cannot fill the queue for all.");
