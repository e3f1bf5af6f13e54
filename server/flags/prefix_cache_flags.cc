// The server's flags: prefix cache
// The prefix state cache: model states after exact token prefixes, reused by new sessions'
// first prompts and sessionless Infers (server/prefix_cache/prefix_cache.h).
// Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"

ABSL_FLAG(int64_t, prefix_cache_bytes, -1,
          "Most bytes of model states the prefix cache holds (0: off; -1, the default: an eighth "
          "of --state_budget_bytes, so that the cache costs at most an eighth of what live "
          "sessions may hold; it is counted apart from their budget).");
ABSL_FLAG(int64_t, prefix_cache_interval, 0,
          "Inside a long prompt, cache the state every this many tokens (chunks end there; "
          "0: --max_batch_tokens), besides the state at the prompt's end.");
ABSL_FLAG(int64_t, prefix_cache_tail, 64,
          "Also cache the state this many tokens before the end of each prompt (0: not), so "
          "that a prompt that differs from an earlier one only in its last tokens computes at "
          "most this many more (llama.cpp's server checkpoints 64 tokens before the end). Only "
          "in prompts of at least 8 chunks (--max_batch_tokens): the point costs one more chunk.");
ABSL_FLAG(int64_t, prefix_cache_prefault_bytes, -1,
          "Memory for the next cache entries, paged in ahead by a thread that runs only on idle "
          "cores, so that a growing cache's new entries do not page-fault on the scheduler's "
          "thread (0: none; -1, the default: 64 MiB or a sixteenth of --prefix_cache_bytes, "
          "whichever is less). Counted within --prefix_cache_bytes.");
ABSL_FLAG(std::string, prefix_cache_scope, "principal",
          "Who shares cached prefixes: principal (a principal's requests only; without "
          "authentication every caller is the same principal) or global (every principal: "
          "then one client can tell from its own latency what another's prompts began with).");
