#include "client/cli/flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, target, "localhost:50051", "Server address, host:port.");
ABSL_FLAG(double, timeout, 30,
          "Deadline of the call in seconds (a whole stream, for stream and generate); 0: none.");
ABSL_FLAG(bool, json, false,
          "Machine-readable output: one JSON object per line (protobuf JSON mapping with the "
          "proto field names; 64-bit integers are strings). Errors too, as {\"error\": ...}.");
ABSL_FLAG(bool, route_sessions, false,
          "Several server instances: resolve --target (dns:///name:port: every address of the "
          "name, e.g. a headless Service; host:port; or a comma list of them) to every "
          "instance, open new sessions round-robin, and send a session's calls to the instance "
          "that holds it (found by asking every instance). Always on for a comma list.");

ABSL_FLAG(std::string, model, "auto", "Model name, or 'auto' to let the server's policy choose.");
ABSL_FLAG(std::string, tokens, "",
          "Token ids, separated by commas or spaces. Without it (and without --random_tokens), "
          "the ids are read from --tokens_file.");
ABSL_FLAG(std::string, tokens_file, "-",
          "File of token ids separated by whitespace or commas; '-' is stdin.");
ABSL_FLAG(int64_t, random_tokens, 0, "Send this many random token ids (below the model's vocab).");
ABSL_FLAG(std::string, text, "",
          "A prompt as UTF-8 text instead of token ids (the model's tokenizer turns it into ids).");
ABSL_FLAG(std::string, text_file, "",
          "A prompt as UTF-8 text read from this file (- for stdin); stream appends it line by "
          "line.");
ABSL_FLAG(
    bool, no_special_tokens, false,
    "With text: do not add the tokenizer's template tokens (e.g. a BOS); tokenize: the same.");
ABSL_FLAG(bool, skip_special_tokens, false, "detokenize: leave special tokens out of the text.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of --random_tokens, and of sampling in generate.");
ABSL_FLAG(std::string, session, "",
          "Session id: continue it (infer) or resume it (stream, generate).");
ABSL_FLAG(std::string, output, "top_k",
          "What to return: last_logits, all_logits, hidden, top_k or none.");
ABSL_FLAG(int32_t, top_k, 5, "Candidates returned with --output=top_k (1 to 100).");

ABSL_FLAG(int64_t, chunk, 64, "Tokens per append message.");
ABSL_FLAG(int64_t, expected_length, 0,
          "Expected total length of a new session, for the policy (0: unknown).");
ABSL_FLAG(int32_t, ttl, 0, "Idle time-to-live of a new session, seconds (0: server default).");
ABSL_FLAG(bool, keep_session, false,
          "End the stream without closing the new session it opened, so that it can be resumed "
          "with --session. A resumed session (--session) stays open anyway.");
ABSL_FLAG(std::string, fork_from, "",
          "Open a new session that starts from a copy of this session's state (a fork: the "
          "source is untouched). Closed at the end unless --keep_session, as a new session.");
ABSL_FLAG(bool, close_session, false,
          "Close the resumed session (--session) at the end of the stream (it stays open "
          "otherwise).");

ABSL_FLAG(int32_t, max_new_tokens, 16, "Tokens to generate.");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "Stop strings, comma-separated, C escapes allowed (--stop='\\n\\n,###'): generation "
          "ends where its text first holds one (it is not printed).");
ABSL_FLAG(std::string, stop_token_ids, "",
          "Token ids that end generation, comma-separated (default: the model's end-of-text).");
ABSL_FLAG(bool, ignore_eos, false, "Generate past the model's end-of-text.");
ABSL_FLAG(double, temperature, 0, "0: greedy; otherwise sample from softmax(logits/T).");
ABSL_FLAG(int32_t, sample_top_k, 0, "Sample among the k most likely tokens (0: all).");
ABSL_FLAG(int32_t, stream_interval, 0,
          "Generated tokens per streamed message (0 or 1: each as it comes; N: in groups of N, "
          "which costs the server and the client less per token).");

ABSL_FLAG(std::string, name, "", "Show this model only (GetModel).");
ABSL_FLAG(std::string, id, "", "Show this session only (GetSession).");
ABSL_FLAG(std::string, close, "", "Close this session (CloseSession).");
ABSL_FLAG(std::string, export, "",
          "With --id: write that session's snapshot to this file (ExportSession), atomically "
          "(FILE.tmp, then renamed) and readable by its owner only.");
ABSL_FLAG(std::string, import, "",
          "Make the session in this snapshot file (from --export, here or on another instance) "
          "a session of the server (ImportSession; with --route_sessions, of the next "
          "instance).");
ABSL_FLAG(int32_t, limit, 0, "List at most this many sessions (0: the server's default).");
ABSL_FLAG(std::string, service, "", "Service name to check ('': the whole server).");
