#include "server/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "kernels/common/huge_page_buffer.h"

namespace attnserve::server {
namespace {

prometheus::ClientMetric GaugeValue(double value,
                                    std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type,
                                std::vector<prometheus::ClientMetric> metrics) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  f.metric = std::move(metrics);
  return f;
}

// A family of one unlabelled gauge or counter.
prometheus::MetricFamily OneGauge(std::string name, std::string help, double value) {
  return Family(std::move(name), std::move(help), prometheus::MetricType::Gauge,
                {GaugeValue(value)});
}
prometheus::MetricFamily OneCounter(std::string name, std::string help, double value) {
  prometheus::ClientMetric m;
  m.counter.value = value;
  return Family(std::move(name), std::move(help), prometheus::MetricType::Counter, {m});
}

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

}  // namespace

// Computes the gauges whose truth lives elsewhere (the session table, the scheduler, the
// process) at scrape time, so they can never drift from it.
class ServerMetrics::Collector final : public prometheus::Collectable {
 public:
  void Set(Sources sources) {
    absl::MutexLock lock(&mu_);
    sources_ = std::move(sources);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock lock(&mu_);
    std::vector<prometheus::MetricFamily> out;
    if (sources_.sessions != nullptr) {
      std::vector<prometheus::ClientMetric> count, bytes;
      std::map<std::string, SessionTable::ModelStats> by_model = sources_.sessions->StatsByModel();
      for (const std::string& variant : sources_.variants) by_model[variant];
      for (const auto& [variant, stats] : by_model) {
        count.push_back(GaugeValue(static_cast<double>(stats.sessions), {{"variant", variant}}));
        bytes.push_back(GaugeValue(static_cast<double>(stats.state_bytes), {{"variant", variant}}));
      }
      out.push_back(Family("attnserve_sessions", "Sessions held, by variant.",
                           prometheus::MetricType::Gauge, std::move(count)));
      out.push_back(Family("attnserve_session_state_bytes",
                           "Bytes of session state (recurrent states, KV caches) held, by variant.",
                           prometheus::MetricType::Gauge, std::move(bytes)));
    }
    if (sources_.sessions != nullptr && sources_.queue_depth) {
      // The load signals for routers and endpoint pickers (README: Load signals), one value per
      // replica, as the Gateway API inference extension reads its model servers' queue, running
      // requests and cache use.
      const SessionTable& table = *sources_.sessions;
      const double used = static_cast<double>(table.state_bytes());
      const double budget = static_cast<double>(table.limits().state_budget_bytes);
      const std::pair<const char*, const char*> help[] = {
          {"attnserve_load_queued_requests",
           "Requests waiting at the scheduler (for their session or a batch), not computing yet."},
          {"attnserve_load_running_sessions",
           "Sessions in use now: a request queued or running, or a stream attached."},
          {"attnserve_load_state_bytes", "Bytes of session state held (of the budget)."},
          {"attnserve_load_state_budget_bytes", "The session state budget (--state_budget_bytes)."},
          {"attnserve_load_state_usage_ratio", "attnserve_load_state_bytes / its budget, 0 to 1."}};
      const double values[] = {static_cast<double>(sources_.queue_depth()),
                               static_cast<double>(table.InUse()), used, budget,
                               budget > 0 ? used / budget : 0.0};
      for (size_t i = 0; i < 5; ++i) {
        out.push_back(Family(help[i].first, help[i].second, prometheus::MetricType::Gauge,
                             {GaugeValue(values[i])}));
      }
    }
    if (sources_.inflight) {
      out.push_back(Family("attnserve_inflight_requests", "Calls and streams being served now.",
                           prometheus::MetricType::Gauge,
                           {GaugeValue(static_cast<double>(sources_.inflight()))}));
    }
    if (sources_.queue_depth) {
      out.push_back(Family("attnserve_queue_depth",
                           "Requests submitted to the scheduler that have not computed yet.",
                           prometheus::MetricType::Gauge,
                           {GaugeValue(static_cast<double>(sources_.queue_depth()))}));
    }
    if (sources_.request_work_queued) {
      out.push_back(OneGauge("attnserve_request_work_queued",
                             "Large requests waiting for the request work pool (tokenizing).",
                             static_cast<double>(sources_.request_work_queued())));
    }
    if (sources_.request_work_ran) {
      out.push_back(OneCounter("attnserve_request_work_total",
                               "Large requests the request work pool ran.",
                               static_cast<double>(sources_.request_work_ran())));
    }
    if (const PrefixCache* cache = sources_.prefix_cache; cache != nullptr) {
      out.push_back(OneGauge("attnserve_prefix_cache_bytes",
                             "Bytes of model states the prefix cache holds.",
                             static_cast<double>(cache->bytes())));
      out.push_back(OneGauge("attnserve_prefix_cache_entries", "Prefixes the prefix cache holds.",
                             static_cast<double>(cache->entries())));
      out.push_back(OneCounter("attnserve_prefix_cache_evictions_total",
                               "Prefix-cache entries evicted to stay within --prefix_cache_bytes.",
                               static_cast<double>(cache->evictions())));
      const PrefaultedBlocksStats prefaulted = cache->prefaulted();
      out.push_back(OneGauge("attnserve_prefix_cache_prefaulted_bytes",
                             "Memory paged in ahead for the next prefix-cache entries "
                             "(--prefix_cache_prefault_bytes).",
                             static_cast<double>(prefaulted.ready_bytes)));
      out.push_back(OneCounter("attnserve_prefix_cache_unprefaulted_entries_total",
                               "Prefix-cache entries whose memory was paged in on the "
                               "scheduler's thread (none was ready).",
                               static_cast<double>(prefaulted.served_fresh)));
    }
    {
      const kernels::HugePageBufferPoolStats pool = kernels::HugePageBufferPool();
      out.push_back(OneGauge("attnserve_kv_buffer_pool_bytes",
                             "Bytes of freed KV-cache buffers kept mapped for reuse "
                             "(--kv_buffer_pool_bytes).",
                             static_cast<double>(pool.bytes)));
      out.push_back(
          OneCounter("attnserve_kv_buffer_pool_reuses_total",
                     "KV-cache buffers served from the reuse pool instead of fresh memory.",
                     static_cast<double>(pool.reused)));
    }
    prometheus::ClientMetric cpu;
    cpu.counter.value = ProcessCpuSeconds();
    out.push_back(Family("process_cpu_seconds_total",
                         "Total user and system CPU time spent in seconds.",
                         prometheus::MetricType::Counter, {cpu}));
    out.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                         prometheus::MetricType::Gauge, {GaugeValue(ResidentBytes())}));
    out.push_back(Family("process_start_time_seconds",
                         "Start time of the process since unix epoch in seconds.",
                         prometheus::MetricType::Gauge, {GaugeValue(start_seconds_)}));
    return out;
  }

 private:
  mutable absl::Mutex mu_;
  Sources sources_;
  const double start_seconds_ = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
};

prometheus::Histogram::BucketBoundaries ServerMetrics::DurationBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
}

ServerMetrics::ServerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      collector_(std::make_shared<Collector>()),
      requests_(
          prometheus::BuildCounter()
              .Name("attnserve_requests_total")
              .Help("Requests served, by protocol, rpc, variant and gRPC status code. A stream's "
                    "open, appends and close count one each.")
              .Register(*registry_)),
      request_duration_(prometheus::BuildHistogram()
                            .Name("attnserve_request_duration_seconds")
                            .Help("Time from a request's arrival to its response, by "
                                  "protocol, rpc and variant.")
                            .Register(*registry_)),
      queue_duration_(prometheus::BuildHistogram()
                          .Name("attnserve_queue_duration_seconds")
                          .Help("Time from a request's arrival at the scheduler to its first "
                                "computation, by variant.")
                          .Register(*registry_)),
      tokens_(prometheus::BuildCounter()
                  .Name("attnserve_tokens_total")
                  .Help("Tokens processed, by variant and phase (prefill, decode, generate).")
                  .Register(*registry_)),
      batch_sessions_(prometheus::BuildHistogram()
                          .Name("attnserve_batch_sessions")
                          .Help("Jobs (sessions) in one scheduler iteration's batch, by variant.")
                          .Register(*registry_)),
      batch_tokens_(prometheus::BuildHistogram()
                        .Name("attnserve_batch_tokens")
                        .Help("Tokens one scheduler iteration computed, by variant.")
                        .Register(*registry_)),
      iteration_duration_(prometheus::BuildHistogram()
                              .Name("attnserve_iteration_duration_seconds")
                              .Help("Time of one scheduler iteration, by variant.")
                              .Register(*registry_)),
      batch_wait_(prometheus::BuildHistogram()
                      .Name("attnserve_batch_wait_seconds")
                      .Help("Time a ready job (the head of its session's queue) waited for the "
                            "batch it joined, by variant.")
                      .Register(*registry_)),
      policy_decisions_(prometheus::BuildCounter()
                            .Name("attnserve_policy_decisions_total")
                            .Help("Variant choices, by variant and the rule that chose.")
                            .Register(*registry_)),
      prefix_lookups_(prometheus::BuildCounter()
                          .Name("attnserve_prefix_cache_lookups_total")
                          .Help("Prefix-cache lookups of prompts from position 0, by variant and "
                                "result (hit, miss).")
                          .Register(*registry_)),
      prefix_hit_tokens_(prometheus::BuildCounter()
                             .Name("attnserve_prefix_cache_hit_tokens_total")
                             .Help("Prompt tokens not computed because the prefix cache held "
                                   "their state, by variant.")
                             .Register(*registry_)),
      evictions_(prometheus::BuildCounter()
                     .Name("attnserve_session_evictions_total")
                     .Help("Sessions that left memory, by reason (ttl, capacity: dropped for "
                           "memory, spilled: written to the session store for memory, closed).")
                     .Register(*registry_)),
      store_operations_(prometheus::BuildCounter()
                            .Name("attnserve_session_store_operations_total")
                            .Help("Session store operations (put, get, delete) by result (ok, "
                                  "not_found, error, dropped: the write queue was full).")
                            .Register(*registry_)),
      store_duration_(prometheus::BuildHistogram()
                          .Name("attnserve_session_store_duration_seconds")
                          .Help("Seconds one session store operation took.")
                          .Register(*registry_)),
      store_queued_bytes_(prometheus::BuildGauge()
                              .Name("attnserve_session_store_queued_bytes")
                              .Help("Bytes of session snapshots waiting to be written.")
                              .Register(*registry_)
                              .Add({})),
      model_load_seconds_(prometheus::BuildGauge()
                              .Name("attnserve_model_load_seconds")
                              .Help("Seconds it took to load or build each model.")
                              .Register(*registry_)),
      build_info_(prometheus::BuildGauge()
                      .Name("attnserve_build_info")
                      .Help("Always 1; the labels describe the build.")
                      .Register(*registry_)) {
  for (EvictionReason r : {EvictionReason::kTtl, EvictionReason::kCapacity,
                           EvictionReason::kSpilled, EvictionReason::kClosed}) {
    evictions_.Add({{"reason", EvictionReasonName(r)}});  // present at 0 from the start
  }
  for (const char* op : {"put", "get", "delete"}) {
    for (const char* result : {"ok", "not_found", "error", "dropped"}) {
      store_operations_.Add({{"op", op}, {"result", result}});
    }
  }
}

void ServerMetrics::SetSources(Sources sources) { collector_->Set(std::move(sources)); }

std::shared_ptr<prometheus::Collectable> ServerMetrics::collector() const { return collector_; }

void ServerMetrics::RecordRequest(const std::string& protocol, const std::string& rpc,
                                  const std::string& variant, const std::string& code,
                                  double seconds) {
  const std::string v = variant.empty() ? "none" : variant;
  requests_.Add({{"protocol", protocol}, {"rpc", rpc}, {"variant", v}, {"code", code}}).Increment();
  request_duration_.Add({{"protocol", protocol}, {"rpc", rpc}, {"variant", v}}, DurationBuckets())
      .Observe(seconds);
}

void ServerMetrics::InitializeRequestSeries(const std::vector<std::string>& variants) {
  static const char* const kModelRpcs[] = {"Infer",        "StreamOpen",    "StreamAppend",
                                           "StreamClose",  "StreamInvalid", "ExportSession",
                                           "ImportSession"};
  static const char* const kTableRpcs[] = {"GetSession", "CloseSession", "ListSessions",
                                           "ListModels", "StreamEmpty"};
  static const char* const kCodes[] = {
      "OK",          "CANCELLED",          "INVALID_ARGUMENT",    "DEADLINE_EXCEEDED",
      "NOT_FOUND",   "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
      "UNAVAILABLE", "UNAUTHENTICATED",    "ALREADY_EXISTS",      "DATA_LOSS",
      "INTERNAL"};
  // The Open Inference Protocol's (server/rpc/oip/).
  static const char* const kOipModelRpcs[] = {"ModelInfer", "ModelStreamInfer"};
  static const char* const kOipOtherRpcs[] = {"ServerLive",     "ServerReady",   "ModelReady",
                                              "ServerMetadata", "ModelMetadata", "ModelConfig",
                                              "ModelStatistics"};
  std::vector<std::string> with_none = variants;
  with_none.push_back("none");
  auto add = [this](const char* protocol, const char* rpc, const std::string& v, const char* code) {
    requests_.Add({{"protocol", protocol}, {"rpc", rpc}, {"variant", v}, {"code", code}});
  };
  for (const char* code : kCodes) {
    for (const char* rpc : kModelRpcs) {
      for (const std::string& v : with_none) add("attnserve", rpc, v, code);
    }
    for (const char* rpc : kTableRpcs) add("attnserve", rpc, "none", code);
    for (const char* rpc : kOipModelRpcs) {
      for (const std::string& v : with_none) add("oip", rpc, v, code);
    }
    for (const char* rpc : kOipOtherRpcs) add("oip", rpc, "none", code);
  }
}

void ServerMetrics::RecordQueue(const std::string& variant, double seconds) {
  queue_duration_.Add({{"variant", variant.empty() ? "none" : variant}}, DurationBuckets())
      .Observe(seconds);
}

void ServerMetrics::RecordPrefixLookup(const std::string& variant, int64_t hit_tokens) {
  prefix_lookups_.Add({{"variant", variant}, {"result", hit_tokens > 0 ? "hit" : "miss"}})
      .Increment();
  if (hit_tokens > 0) {
    prefix_hit_tokens_.Add({{"variant", variant}}).Increment(static_cast<double>(hit_tokens));
  }
}

void ServerMetrics::AddTokens(const std::string& variant, const std::string& phase, int64_t count) {
  if (count > 0) {
    tokens_.Add({{"variant", variant}, {"phase", phase}}).Increment(static_cast<double>(count));
  }
}

void ServerMetrics::RecordIteration(const std::string& variant, int64_t tokens, double seconds,
                                    const std::vector<double>& waits) {
  static const prometheus::Histogram::BucketBoundaries kCounts = {1,  2,   4,   8,   16,   32,
                                                                  64, 128, 256, 512, 1024, 4096};
  const prometheus::Labels labels = {{"variant", variant}};
  batch_sessions_.Add(labels, kCounts).Observe(static_cast<double>(waits.size()));
  batch_tokens_.Add(labels, kCounts).Observe(static_cast<double>(tokens));
  iteration_duration_.Add(labels, DurationBuckets()).Observe(seconds);
  prometheus::Histogram& wait = batch_wait_.Add(labels, DurationBuckets());  // looked up once
  for (double w : waits) wait.Observe(w);
}

void ServerMetrics::RecordPolicyDecision(const std::string& variant, const std::string& rule) {
  policy_decisions_.Add({{"variant", variant}, {"rule", rule}}).Increment();
}

void ServerMetrics::RecordEviction(EvictionReason reason) {
  evictions_.Add({{"reason", EvictionReasonName(reason)}}).Increment();
}

void ServerMetrics::RecordStoreOperation(const std::string& op, const std::string& result,
                                         double seconds) {
  store_operations_.Add({{"op", op}, {"result", result}}).Increment();
  if (result != "dropped") store_duration_.Add({{"op", op}}, DurationBuckets()).Observe(seconds);
}

void ServerMetrics::SetStoreQueuedBytes(int64_t bytes) {
  store_queued_bytes_.Set(static_cast<double>(bytes));
}

void ServerMetrics::SetModelLoadSeconds(const std::string& model, double seconds) {
  model_load_seconds_.Add({{"model", model}}).Set(seconds);
}

void ServerMetrics::SetBuildInfo(const std::string& version, const std::string& cuda,
                                 const std::string& torch) {
  build_info_.Add({{"version", version}, {"cuda", cuda}, {"torch", torch}}).Set(1);
}

}  // namespace attnserve::server
