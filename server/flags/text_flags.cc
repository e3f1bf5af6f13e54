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
