// The server's flags: memory
// Freed memory: kept for speed while busy, given back when idle.
// Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"

ABSL_FLAG(int, idle_memory_trim_s, 5,
          "Seconds of an idle scheduler after which freed heap memory goes back to the kernel "
          "(kept while busy, for speed: the next burst page-faults it in again); 0: never.");
ABSL_FLAG(int64_t, max_free_heap_bytes, int64_t{1} << 30,
          "Free heap memory above which it goes back to the kernel even while busy (at most "
          "every 10 s); 0: no bound.");
ABSL_FLAG(int64_t, kv_buffer_pool_bytes, int64_t{256} << 20,
          "Freed KV-cache buffers of 2 MiB or more kept mapped, up to this many bytes, for the "
          "next KV cache or prefix-cache hit of a similar size to reuse instead of mapping and "
          "faulting in fresh memory (which cost 12-56 ms for 8 MB when the kernel compacted "
          "memory for huge pages). Emptied with the idle trim; 0: none kept.");
