// The server's Prometheus metrics: one registry that every stage records into, served by
// prometheus-cpp's Exposer on --metrics_port at /metrics. Labels never carry a session or
// client id (cardinality): only protocol, rpc, variant (model name), code, phase, rule and
// reason.
//
//   attnserve_requests_total{protocol, rpc, variant, code}  counter (protocol: attnserve, the
//       attnserve.v1.AttnServe API; oip, the Open Inference Protocol)
//   attnserve_request_duration_seconds{protocol, rpc, variant}  histogram, 100 µs to 60 s
//   attnserve_queue_duration_seconds{variant}               histogram: from a request's arrival
//       at the scheduler to its first computation (waiting for its session and for a batch)
//   attnserve_batch_sessions{variant}                       histogram: jobs in an iteration's batch
//   attnserve_batch_tokens{variant}                         histogram: tokens an iteration computed
//   attnserve_iteration_duration_seconds{variant}           histogram: one scheduler iteration
//   attnserve_batch_wait_seconds{variant}                   histogram: how long a ready job (the
//       head of its session's queue) waited for the batch it then joined
//   attnserve_tokens_total{variant, phase}                  counter; phase = prefill (tokens of
//       a request or append with more than one), decode (single tokens fed to a session,
//       including generated tokens fed back), generate (tokens sampled)
//   attnserve_policy_decisions_total{variant, rule}         counter; rule = 1-based rule index,
//       "named" (model given by name) or "session" (a session's model)
//   attnserve_sessions{variant}, attnserve_session_state_bytes{variant}   gauges
//   attnserve_session_evictions_total{reason}               counter; reason = ttl, capacity
//       (dropped for memory), spilled (written to the session store for memory), closed
//   attnserve_session_store_operations_total{op, result}    counter; op = put, get, delete;
//       result = ok, not_found, error, dropped (a write the full queue could not take)
//   attnserve_session_store_duration_seconds{op}            histogram: one store operation
//   attnserve_session_store_queued_bytes                    gauge: snapshots waiting to be written
//   attnserve_prefix_cache_lookups_total{variant, result}   counter; result = hit, miss
//   attnserve_prefix_cache_hit_tokens_total{variant}        counter: prefill tokens a hit saved
//   attnserve_prefix_cache_bytes, attnserve_prefix_cache_entries  gauges;
//   attnserve_prefix_cache_evictions_total                   counter (server/prefix_cache/)
//   attnserve_prefix_cache_prefaulted_bytes             gauge: memory paged in for next entries
//   attnserve_prefix_cache_unprefaulted_entries_total   counter: entries paged in on the scheduler
//   attnserve_kv_buffer_pool_bytes                      gauge: freed KV buffers kept for reuse
//   attnserve_kv_buffer_pool_reuses_total               counter: buffers served from them
//       (kernels/common/huge_page_buffer.h)
//   attnserve_inflight_requests, attnserve_queue_depth      gauges (queue: requests submitted to
//       the scheduler that have not computed yet: waiting for their session or a batch)
//   attnserve_request_work_queued                      gauge: large requests waiting for the
//       request work pool (their text to be tokenized; server/rpc/request_work_pool.h)
//   attnserve_request_work_total                       counter: large requests it ran
//   attnserve_load_queued_requests, attnserve_load_running_sessions, attnserve_load_state_bytes,
//   attnserve_load_state_budget_bytes, attnserve_load_state_usage_ratio   gauges, one per
//       replica: the load signals for routers and endpoint pickers (README: Load signals)
//   attnserve_model_load_seconds{model}, attnserve_build_info{version, cuda, torch}  gauges
//   process_cpu_seconds_total, process_resident_memory_bytes, process_start_time_seconds
// Thread-safe.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/prefix_cache/prefix_cache.h"
#include "server/sessions/session_table.h"

namespace attnserve::server {

class ServerMetrics {
 public:
  // Gauges read at scrape time.
  struct Sources {
    const SessionTable* sessions = nullptr;
    std::vector<std::string> variants;  // reported at 0 when they hold no session
    std::function<int64_t()> inflight;
    std::function<int64_t()> queue_depth;
    std::function<int64_t()> request_work_queued;  // request_work_pool.h
    std::function<int64_t()> request_work_ran;
    const PrefixCache* prefix_cache = nullptr;
  };

  ServerMetrics();

  // The registry and the scrape-time collector, to register with an Exposer.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  std::shared_ptr<prometheus::Collectable> collector() const;
  void SetSources(Sources sources);

  // `protocol`: the door the request came through ("attnserve", "oip").
  void RecordRequest(const std::string& protocol, const std::string& rpc,
                     const std::string& variant, const std::string& code, double seconds);
  // Creates at 0 every attnserve_requests_total series known at start-up (each rpc with each
  // served variant, or "none" for the session and listing rpcs, and each code the server
  // answers), so that rate() and ratios work before the first error (Prometheus' guidance on
  // missing series).
  void InitializeRequestSeries(const std::vector<std::string>& variants);
  void RecordQueue(const std::string& variant, double seconds);
  void AddTokens(const std::string& variant, const std::string& phase, int64_t count);
  // One scheduler iteration of `variant`: its jobs computed `tokens` tokens in total; `waits`
  // holds how long each of them waited for this batch (seconds), one entry a job.
  void RecordIteration(const std::string& variant, int64_t tokens, double seconds,
                       const std::vector<double>& waits);
  void RecordPolicyDecision(const std::string& variant, const std::string& rule);
  // A prefix-cache lookup of `variant`: a hit of `hit_tokens` tokens, or a miss (0).
  void RecordPrefixLookup(const std::string& variant, int64_t hit_tokens);
  void RecordEviction(EvictionReason reason);
  // One session-store operation (op: put, get, delete; result: ok, not_found, error, dropped).
  void RecordStoreOperation(const std::string& op, const std::string& result, double seconds);
  void SetStoreQueuedBytes(int64_t bytes);
  void SetModelLoadSeconds(const std::string& model, double seconds);
  void SetBuildInfo(const std::string& version, const std::string& cuda, const std::string& torch);

  // The histogram buckets of the durations: 100 µs to 60 s in a 1-2.5-5 series.
  static prometheus::Histogram::BucketBoundaries DurationBuckets();

 private:
  class Collector;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<Collector> collector_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& queue_duration_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Family<prometheus::Histogram>& batch_sessions_;
  prometheus::Family<prometheus::Histogram>& batch_tokens_;
  prometheus::Family<prometheus::Histogram>& iteration_duration_;
  prometheus::Family<prometheus::Histogram>& batch_wait_;
  prometheus::Family<prometheus::Counter>& policy_decisions_;
  prometheus::Family<prometheus::Counter>& prefix_lookups_;
  prometheus::Family<prometheus::Counter>& prefix_hit_tokens_;
  prometheus::Family<prometheus::Counter>& evictions_;
  prometheus::Family<prometheus::Counter>& store_operations_;
  prometheus::Family<prometheus::Histogram>& store_duration_;
  prometheus::Gauge& store_queued_bytes_;
  prometheus::Family<prometheus::Gauge>& model_load_seconds_;
  prometheus::Family<prometheus::Gauge>& build_info_;
};

}  // namespace attnserve::server
