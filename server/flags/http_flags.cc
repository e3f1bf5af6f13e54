// The server's flags: http
// The OpenAI-compatible HTTP door (server/rpc/openai/openai_server.h; README: "OpenAI-compatible
// HTTP"). Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"

ABSL_FLAG(int, http_port, 8000,
          "Port of the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, "
          "/v1/models, /tokenize, /detokenize, /health). 0: pick a free one and print it; "
          "-1: no HTTP door.");
ABSL_FLAG(std::string, http_host, "", "Address the HTTP port listens on (empty: --host).");
ABSL_FLAG(int, http_threads, 64,
          "HTTP worker threads: each holds one connection while it is served (a streamed "
          "completion for its whole length).");
ABSL_FLAG(int, http_max_queued_connections, 256,
          "Connections that may wait for an HTTP worker; past that, accepting waits (the "
          "kernel's backlog holds the rest).");
ABSL_FLAG(int64_t, http_max_body_bytes, int64_t{8} << 20,
          "Largest HTTP request body; larger ones get 413.");
ABSL_FLAG(int64_t, http_max_header_bytes, 16 << 10,
          "Largest HTTP request line and headers together; larger ones get 431 (one header "
          "line is also bounded at 8 KiB by cpp-httplib).");
ABSL_FLAG(int, http_max_requests_per_client, 32,
          "HTTP requests one client (principal, or address without authentication) may have in "
          "flight; more get 429 with retry-after.");
ABSL_FLAG(int, http_max_requests, 512,
          "HTTP requests in flight in all; more get 503 with retry-after.");
ABSL_FLAG(int, http_max_choices, 16, "Largest n (completions per prompt) one request may ask.");
ABSL_FLAG(int, http_read_timeout_s, 30,
          "Seconds an HTTP client may take to send a request's next bytes.");
ABSL_FLAG(int, http_write_timeout_s, 30,
          "Seconds an HTTP client may leave a response unread (a stalled stream is then cut, "
          "its generation cancelled and its sessions freed).");
ABSL_FLAG(int, http_keep_alive_s, 5, "Seconds an idle HTTP keep-alive connection is kept.");
