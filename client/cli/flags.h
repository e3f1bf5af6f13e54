// attnserve-cli's flags. Every flag is global to the binary (Abseil), but each subcommand
// accepts only its own (subcommand_flags.h) and main() rejects the others.
#ifndef ATTNSERVE_CLIENT_CLI_FLAGS_H_
#define ATTNSERVE_CLIENT_CLI_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"

// Every subcommand.
ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(double, timeout);
ABSL_DECLARE_FLAG(bool, json);
// Sessions over several instances.
ABSL_DECLARE_FLAG(bool, route_sessions);
// Inputs.
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, tokens);
ABSL_DECLARE_FLAG(std::string, tokens_file);
ABSL_DECLARE_FLAG(int64_t, random_tokens);
ABSL_DECLARE_FLAG(std::string, text);
ABSL_DECLARE_FLAG(std::string, text_file);
ABSL_DECLARE_FLAG(bool, no_special_tokens);
ABSL_DECLARE_FLAG(bool, skip_special_tokens);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, session);
ABSL_DECLARE_FLAG(std::string, output);
ABSL_DECLARE_FLAG(int32_t, top_k);
// Streams.
ABSL_DECLARE_FLAG(int64_t, chunk);
ABSL_DECLARE_FLAG(int64_t, expected_length);
ABSL_DECLARE_FLAG(int32_t, ttl);
ABSL_DECLARE_FLAG(bool, keep_session);
ABSL_DECLARE_FLAG(bool, close_session);
ABSL_DECLARE_FLAG(std::string, fork_from);
// Generation.
ABSL_DECLARE_FLAG(int32_t, max_new_tokens);
ABSL_DECLARE_FLAG(double, temperature);
ABSL_DECLARE_FLAG(int32_t, sample_top_k);
ABSL_DECLARE_FLAG(std::vector<std::string>, stop);
ABSL_DECLARE_FLAG(std::string, stop_token_ids);
ABSL_DECLARE_FLAG(bool, ignore_eos);
ABSL_DECLARE_FLAG(int32_t, stream_interval);
// models, sessions, health.
ABSL_DECLARE_FLAG(std::string, name);
ABSL_DECLARE_FLAG(std::string, id);
ABSL_DECLARE_FLAG(std::string, close);
ABSL_DECLARE_FLAG(std::string, export);
ABSL_DECLARE_FLAG(std::string, import);
ABSL_DECLARE_FLAG(int32_t, limit);
ABSL_DECLARE_FLAG(std::string, service);

#endif  // ATTNSERVE_CLIENT_CLI_FLAGS_H_
