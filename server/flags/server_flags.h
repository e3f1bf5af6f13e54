// Every flag of attnserve-server, defined by group in server/flags/*_flags.cc (one file a
// group, so that --help lists them grouped as README.md's tables are) and read by main.cc.
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"

// server/flags/serving_flags.cc
ABSL_DECLARE_FLAG(std::string, host);
ABSL_DECLARE_FLAG(int, port);
ABSL_DECLARE_FLAG(std::string, metrics_host);
ABSL_DECLARE_FLAG(int, metrics_port);
ABSL_DECLARE_FLAG(int, health_port);
ABSL_DECLARE_FLAG(std::string, health_host);
ABSL_DECLARE_FLAG(bool, reflection);
ABSL_DECLARE_FLAG(std::string, instance_name);
ABSL_DECLARE_FLAG(std::string, advertise_address);
ABSL_DECLARE_FLAG(int, drain_deadline_s);

// server/flags/http_flags.cc
ABSL_DECLARE_FLAG(int, http_port);
ABSL_DECLARE_FLAG(std::string, http_host);
ABSL_DECLARE_FLAG(int, http_threads);
ABSL_DECLARE_FLAG(int, http_max_queued_connections);
ABSL_DECLARE_FLAG(int64_t, http_max_body_bytes);
ABSL_DECLARE_FLAG(int64_t, http_max_header_bytes);
ABSL_DECLARE_FLAG(int, http_max_requests_per_client);
ABSL_DECLARE_FLAG(int, http_max_requests);
ABSL_DECLARE_FLAG(int, http_max_choices);
ABSL_DECLARE_FLAG(int, http_read_timeout_s);
ABSL_DECLARE_FLAG(int, http_write_timeout_s);
ABSL_DECLARE_FLAG(int, http_keep_alive_s);

// server/flags/text_flags.cc
ABSL_DECLARE_FLAG(int64_t, max_text_bytes);
ABSL_DECLARE_FLAG(int, max_stop_strings);
ABSL_DECLARE_FLAG(int, max_stop_string_bytes);
ABSL_DECLARE_FLAG(int, request_work_threads);
ABSL_DECLARE_FLAG(int64_t, request_work_inline_bytes);
ABSL_DECLARE_FLAG(int64_t, max_request_work_per_client);
ABSL_DECLARE_FLAG(int64_t, max_request_work_queued);
ABSL_DECLARE_FLAG(int, request_work_nice);

// server/flags/security_flags.cc
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_client_ca);
ABSL_DECLARE_FLAG(int, tls_reload_interval_s);
ABSL_DECLARE_FLAG(std::string, auth_tokens_file);
ABSL_DECLARE_FLAG(std::string, admin_principals);

// server/flags/limits_flags.cc
ABSL_DECLARE_FLAG(int, max_concurrent_streams);
ABSL_DECLARE_FLAG(int, max_metadata_bytes);
ABSL_DECLARE_FLAG(int, max_message_bytes);
ABSL_DECLARE_FLAG(int64_t, max_tokens_per_request);
ABSL_DECLARE_FLAG(int, max_new_tokens);
ABSL_DECLARE_FLAG(int64_t, max_stream_buffer_bytes);
ABSL_DECLARE_FLAG(int, retry_window);
ABSL_DECLARE_FLAG(int64_t, max_snapshot_bytes);

// server/flags/models_flags.cc
ABSL_DECLARE_FLAG(std::string, model_repository);
ABSL_DECLARE_FLAG(std::string, policy);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(std::string, weight_precision);
ABSL_DECLARE_FLAG(std::string, activation_precision);
ABSL_DECLARE_FLAG(std::string, kv_cache_precision);

// server/flags/sessions_flags.cc
ABSL_DECLARE_FLAG(int64_t, max_sessions);
ABSL_DECLARE_FLAG(int64_t, state_budget_bytes);
ABSL_DECLARE_FLAG(bool, evict_idle_when_full);
ABSL_DECLARE_FLAG(int, session_ttl_s);
ABSL_DECLARE_FLAG(int, max_session_ttl_s);

// server/flags/scheduler_flags.cc
ABSL_DECLARE_FLAG(int, intra_op_threads);
ABSL_DECLARE_FLAG(bool, adapt_threads_to_load);
ABSL_DECLARE_FLAG(int64_t, max_batch_sessions);
ABSL_DECLARE_FLAG(int64_t, decode_split_max_bytes_per_row);
ABSL_DECLARE_FLAG(int64_t, max_batch_tokens);
ABSL_DECLARE_FLAG(int64_t, max_queue);
ABSL_DECLARE_FLAG(int64_t, max_queue_per_session);
ABSL_DECLARE_FLAG(int64_t, max_queue_per_client);

// server/flags/session_store_flags.cc
ABSL_DECLARE_FLAG(std::string, session_store);
ABSL_DECLARE_FLAG(int64_t, session_store_max_bytes);
ABSL_DECLARE_FLAG(int, session_store_timeout_ms);
ABSL_DECLARE_FLAG(int64_t, session_store_queue_bytes);
ABSL_DECLARE_FLAG(int, checkpoint_every_appends);
ABSL_DECLARE_FLAG(int, drain_save_deadline_s);
ABSL_DECLARE_FLAG(int, session_lease_ms);

// server/flags/memory_flags.cc
ABSL_DECLARE_FLAG(int, idle_memory_trim_s);
ABSL_DECLARE_FLAG(int64_t, max_free_heap_bytes);
ABSL_DECLARE_FLAG(int64_t, kv_buffer_pool_bytes);

// server/flags/prefix_cache_flags.cc
ABSL_DECLARE_FLAG(int64_t, prefix_cache_bytes);
ABSL_DECLARE_FLAG(int64_t, prefix_cache_interval);
ABSL_DECLARE_FLAG(int64_t, prefix_cache_tail);
ABSL_DECLARE_FLAG(int64_t, prefix_cache_prefault_bytes);
ABSL_DECLARE_FLAG(std::string, prefix_cache_scope);
