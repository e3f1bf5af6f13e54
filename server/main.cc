// attnserve-server: serves the models of a repository (or the built-in defaults) over gRPC,
// with health checking and reflection, until SIGTERM or SIGINT; then drains: health goes
// NOT_SERVING, new calls are refused, calls in flight get --drain_deadline_s to finish.
#include <ATen/Parallel.h>
#include <arpa/inet.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/parse_flags.h"
#include "kernels/common/bf16_dot_gemm.h"
#include "kernels/common/blas_kernels.h"
#include "kernels/common/cpu_share.h"
#include "kernels/common/cuda_device.h"
#include "kernels/common/device.h"
#include "kernels/common/huge_page_buffer.h"
#include "kernels/common/int8_gemm.h"
#include "kernels/common/intra_op_threads.h"
#include "kernels/common/memory_reuse.h"
#include "server/flags/server_flags.h"
#include "server/idle_memory_trimmer.h"
#include "server/metrics.h"
#include "server/metrics_endpoint.h"
#include "server/model/model_repository.h"
#include "server/policy.h"
#include "server/rpc/attnserve/service.h"
#include "server/rpc/oip/oip_service.h"
#include "server/rpc/openai/openai_server.h"
#include "server/scheduler/batch_scheduler.h"
#include "server/security/authenticator.h"
#include "server/security/tls_credentials.h"
#include "server/server_identity.h"
#include "server/sessions/session_persistence.h"
#include "server/sessions/session_store.h"
#include "server/sessions/session_table.h"

namespace {
std::atomic<bool> g_stop{false};

// Takes gRPC's reflection plugin out of a ServerBuilder. Linking grpc++_reflection registers
// the plugin for every builder by itself (a static initializer), so leaving out
// InitProtoReflectionServerBuilderPlugin does not turn reflection off; this option does.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(
        std::remove_if(plugins->begin(), plugins->end(),
                       [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                         return dynamic_cast<grpc::reflection::ProtoServerReflectionPlugin*>(
                                    p.get()) != nullptr;
                       }),
        plugins->end());
  }
};
void OnSignal(int) { g_stop.store(true); }

int Fail(const std::string& message) {
  std::cerr << "attnserve-server: " << message << std::endl;
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace attnserve;
  // First: it may re-execute the process (kernels/common/blas_kernels.h).
  const std::string blas = kernels::UseTheCpusBlasKernels(argv);
  absl::SetProgramUsageMessage(
      "attnserve-server [--port=50051] [--model_repository=DIR] [--policy=RULES] ...");
  attnserve::ParseFlags(argc, argv);
  std::cout << blas << std::endl;
  // Before any thread starts: big per-call buffers are reused rather than page-faulted in again.
  kernels::KeepFreedMemoryForReuse();
  // Only the scheduler's thread runs kernels on intra_op_threads (it sets them itself); this
  // thread (which loads the models) and the gRPC threads (which allocate states and copy
  // outputs) keep to one: an OpenMP team of theirs would stay behind, and libgomp, seeing more
  // OpenMP threads than cores, then stops spinning between parallel regions, so the
  // scheduler's threads sleep and wake around every region (~10 ms a mamba-130m step;
  // kernels/common/intra_op_threads.h). Before any other thread starts.
  kernels::KeepOtherThreadsOnOneCore();
  // The metrics endpoint first: it is useful while models load.
  server::ServerMetrics metrics;
  std::unique_ptr<server::MetricsEndpoint> metrics_endpoint;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    const std::string metrics_host = absl::GetFlag(FLAGS_metrics_host).empty()
                                         ? absl::GetFlag(FLAGS_host)
                                         : absl::GetFlag(FLAGS_metrics_host);
    auto endpoint = server::MetricsEndpoint::Start(metrics_host, absl::GetFlag(FLAGS_metrics_port),
                                                   {metrics.registry(), metrics.collector()});
    if (!endpoint.ok()) return Fail(std::string(endpoint.status().message()));
    metrics_endpoint = *std::move(endpoint);
    std::cout << "metrics on " << metrics_host << ":" << metrics_endpoint->port() << "/metrics"
              << std::endl;
  }
  const kernels::CoreCount cores = kernels::UsableCores();
  const int intra_op_threads = absl::GetFlag(FLAGS_intra_op_threads) > 0
                                   ? absl::GetFlag(FLAGS_intra_op_threads)
                                   : cores.cores;
  std::cout << "cpu: " << cores.Describe() << "; kernels on " << intra_op_threads << " threads"
            << (absl::GetFlag(FLAGS_adapt_threads_to_load) ? ", fewer while other processes "
                                                             "keep cores busy"
                                                           : "")
            << std::endl;

  // Transport and authentication before the models: a bad configuration stops at once.
  server::TlsFiles tls_files{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                             absl::GetFlag(FLAGS_tls_client_ca),
                             absl::Seconds(absl::GetFlag(FLAGS_tls_reload_interval_s))};
  absl::StatusOr<server::ServerCredentials> credentials = server::MakeServerCredentials(tls_files);
  if (!credentials.ok()) return Fail(std::string(credentials.status().message()));
  server::AuthOptions auth_options;
  auth_options.tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  auth_options.client_certificates = credentials->mutual;
  absl::StatusOr<std::vector<std::string>> admins =
      server::ParsePrincipalList(absl::GetFlag(FLAGS_admin_principals));
  if (!admins.ok()) return Fail(std::string(admins.status().message()));
  auth_options.admin_principals = *std::move(admins);
  absl::StatusOr<std::unique_ptr<server::Authenticator>> authenticator =
      server::Authenticator::Create(auth_options);
  if (!authenticator.ok()) return Fail(std::string(authenticator.status().message()));
  std::string authentication = "off (every caller is anonymous)";
  if ((*authenticator)->enabled()) {
    std::vector<std::string> by;
    if (!auth_options.tokens_file.empty()) {
      by.push_back(
          absl::StrCat((*authenticator)->token_count(), " tokens from ", auth_options.tokens_file));
    }
    if (credentials->mutual) by.push_back("client certificates");
    authentication = absl::StrCat(absl::StrJoin(by, " and "), "; admin principals: ",
                                  auth_options.admin_principals.empty()
                                      ? "none"
                                      : absl::StrJoin(auth_options.admin_principals, ", ",
                                                      [](std::string* out, const std::string& p) {
                                                        absl::StrAppend(out, "\"", p, "\"");
                                                      }));
  }
  std::cout << "transport " << credentials->description << "; authentication " << authentication
            << "; reflection " << (absl::GetFlag(FLAGS_reflection) ? "on" : "off") << std::endl;
  if (!credentials->mutual && credentials->description == "plaintext" &&
      !auth_options.tokens_file.empty()) {
    std::cout << "attnserve-server: warning: bearer tokens over plaintext can be read on the "
                 "network; add --tls_cert and --tls_key"
              << std::endl;
  }
  absl::StatusOr<kernels::Device> device = kernels::ResolveDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return Fail(std::string(device.status().message()));
  std::cout << "device " << device->description << std::endl;
  model::ModelOptions model_options;
  model_options.exportable = false;  // the server writes no model folder: each matrix kept once
  model_options.device = device->is_cuda()
                             ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device->index))
                             : at::Device(at::kCPU);
  const std::string precision = absl::GetFlag(FLAGS_weight_precision);
  if (precision == "bf16") {
    model_options.precision = model::WeightPrecision::kBfloat16;
  } else if (precision == "int8") {
    if (device->is_cuda()) return Fail("--weight_precision=int8 runs on the CPU only");
    model_options.precision = model::WeightPrecision::kInt8;
    std::cout << "int8 products: " << kernels::Int8IsaName(kernels::Int8IsaInUse()) << std::endl;
  } else if (precision != "fp32") {
    return Fail("--weight_precision=" + precision + ": expected fp32, bf16 or int8");
  }
  const std::string activations = absl::GetFlag(FLAGS_activation_precision);
  if (activations == "bf16") {
    if (precision != "bf16")
      return Fail("--activation_precision=bf16 needs --weight_precision=bf16");
    if (device->is_cuda()) return Fail("--activation_precision=bf16 runs on the CPU only");
    model_options.precision = model::WeightPrecision::kBfloat16Dot;
    std::cout << "bf16 products: " << kernels::Bf16DotIsaName(kernels::Bf16DotIsaInUse())
              << std::endl;
  } else if (activations != "fp32") {
    return Fail("--activation_precision=" + activations + ": expected fp32 or bf16");
  }
  const std::string kv_cache = absl::GetFlag(FLAGS_kv_cache_precision);
  if (kv_cache == "bf16") {
    if (device->is_cuda()) return Fail("--kv_cache_precision=bf16 runs on the CPU only");
    model_options.kv_cache_dtype = at::kBFloat16;
  } else if (kv_cache != "fp32") {
    return Fail("--kv_cache_precision=" + kv_cache + ": expected fp32 or bf16");
  }

  const std::string repo_dir = absl::GetFlag(FLAGS_model_repository);
  absl::StatusOr<std::unique_ptr<model::ModelRepository>> repository =
      repo_dir.empty() ? model::ModelRepository::BuildDefault(model_options)
                       : model::ModelRepository::LoadFolder(repo_dir, model_options);
  if (!repository.ok()) return Fail(std::string(repository.status().message()));
  for (const model::Model* m : (*repository)->models()) {
    std::cout << "model " << m->name() << ": " << m->config().layers_size() << " layers, width "
              << m->config().hidden_size() << ", " << (m->can_stream() ? "streams" : "no streaming")
              << ", loaded in " << (*repository)->load_seconds(m->name()) << " s" << std::endl;
  }
  // The default policy keeps to the variants the repository serves; one given by flag is taken
  // as it is (a missing variant is an error).
  std::vector<std::string> dropped;
  absl::StatusOr<server::Policy> policy =
      absl::GetFlag(FLAGS_policy) == server::Policy::kDefaultSpec
          ? server::Policy::ParseDefault(**repository, &dropped)
          : server::Policy::Parse(absl::GetFlag(FLAGS_policy), **repository);
  if (!policy.ok()) return Fail(std::string(policy.status().message()));
  if (!dropped.empty()) {
    std::cout << "policy: the default's rules for " << absl::StrJoin(dropped, ", ")
              << " left out (not in the repository)" << std::endl;
  }
  std::cout << "policy " << policy->Describe() << std::endl;

  server::SessionLimits limits;
  limits.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  limits.state_budget_bytes = absl::GetFlag(FLAGS_state_budget_bytes);
  limits.evict_when_full = absl::GetFlag(FLAGS_evict_idle_when_full);
  limits.default_ttl = absl::Seconds(absl::GetFlag(FLAGS_session_ttl_s));
  limits.max_ttl = absl::Seconds(absl::GetFlag(FLAGS_max_session_ttl_s));
  if (limits.default_ttl <= absl::ZeroDuration() || limits.max_ttl < limits.default_ttl) {
    return Fail("--session_ttl_s must be > 0 and <= --max_session_ttl_s");
  }
  metrics.SetBuildInfo(ATTNSERVE_VERSION, kernels::BuiltWithCuda() ? "built" : "none",
                       TORCH_VERSION);
  for (const model::Model* m : (*repository)->models()) {
    metrics.SetModelLoadSeconds(m->name(), (*repository)->load_seconds(m->name()));
  }
  std::unique_ptr<server::SessionPersistence> persistence;
  if (const std::string spec = absl::GetFlag(FLAGS_session_store); !spec.empty()) {
    server::SessionStoreOptions store_options;
    store_options.max_bytes = absl::GetFlag(FLAGS_session_store_max_bytes);
    store_options.timeout = absl::Milliseconds(absl::GetFlag(FLAGS_session_store_timeout_ms));
    store_options.max_snapshot_bytes = absl::GetFlag(FLAGS_max_snapshot_bytes);
    store_options.lease_duration = absl::Milliseconds(absl::GetFlag(FLAGS_session_lease_ms));
    // The leases name this replica as clients reach it (else by its instance name).
    absl::StatusOr<v1::ServerIdentity> lease_identity = server::MakeServerIdentity(
        absl::GetFlag(FLAGS_instance_name), absl::GetFlag(FLAGS_advertise_address));
    if (!lease_identity.ok()) return Fail(std::string(lease_identity.status().message()));
    store_options.lease_address = lease_identity->advertise_address().empty()
                                      ? lease_identity->instance_name()
                                      : lease_identity->advertise_address();
    absl::StatusOr<std::unique_ptr<server::SessionStore>> store =
        server::OpenSessionStore(spec, store_options);
    if (!store.ok()) return Fail(std::string(store.status().message()));
    server::PersistenceOptions persistence_options;
    persistence_options.checkpoint_every_appends = absl::GetFlag(FLAGS_checkpoint_every_appends);
    persistence_options.max_queued_bytes = absl::GetFlag(FLAGS_session_store_queue_bytes);
    if (persistence_options.checkpoint_every_appends < 0 ||
        persistence_options.max_queued_bytes <= 0) {
      return Fail("--checkpoint_every_appends must be >= 0 and --session_store_queue_bytes > 0");
    }
    persistence = std::make_unique<server::SessionPersistence>(*std::move(store), **repository,
                                                               persistence_options, &metrics);
    std::cout << "session store " << persistence->Describe() << ", checkpoint every "
              << persistence_options.checkpoint_every_appends << " appends" << std::endl;
  } else {
    std::cout << "session store none: sessions live in this process's memory only" << std::endl;
  }
  server::SessionTable sessions(
      limits,
      [&metrics](const server::Session&, server::EvictionReason reason) {
        metrics.RecordEviction(reason);
      },
      persistence.get());

  server::PrefixCacheOptions cache_options;
  cache_options.max_bytes = absl::GetFlag(FLAGS_prefix_cache_bytes) >= 0
                                ? absl::GetFlag(FLAGS_prefix_cache_bytes)
                                : limits.state_budget_bytes / 8;
  cache_options.interval = absl::GetFlag(FLAGS_prefix_cache_interval) > 0
                               ? absl::GetFlag(FLAGS_prefix_cache_interval)
                               : absl::GetFlag(FLAGS_max_batch_tokens);
  if (absl::GetFlag(FLAGS_prefix_cache_tail) < 0) return Fail("--prefix_cache_tail must be >= 0");
  cache_options.tail = absl::GetFlag(FLAGS_prefix_cache_tail);
  cache_options.prefault_bytes =
      absl::GetFlag(FLAGS_prefix_cache_prefault_bytes) >= 0
          ? absl::GetFlag(FLAGS_prefix_cache_prefault_bytes)
          : std::min<int64_t>(int64_t{64} << 20, cache_options.max_bytes / 16);
  const std::string cache_scope = absl::GetFlag(FLAGS_prefix_cache_scope);
  if (cache_scope != "principal" && cache_scope != "global") {
    return Fail("--prefix_cache_scope=" + cache_scope + ": expected principal or global");
  }
  server::PrefixCache prefix_cache(cache_options);
  std::cout << "prefix cache "
            << (prefix_cache.enabled()
                    ? absl::StrCat(cache_options.max_bytes, " bytes, every ",
                                   cache_options.interval, " tokens and ", cache_options.tail,
                                   " before the end, shared by ", cache_scope, "; ",
                                   cache_options.prefault_bytes, " bytes paged in ahead")
                    : std::string("off"))
            << std::endl;
  server::scheduler::SchedulerOptions scheduler_options;
  scheduler_options.prefix_cache = &prefix_cache;
  scheduler_options.max_batch_sessions = absl::GetFlag(FLAGS_max_batch_sessions);
  scheduler_options.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  scheduler_options.max_queued_jobs = absl::GetFlag(FLAGS_max_queue);
  scheduler_options.max_queued_per_session = absl::GetFlag(FLAGS_max_queue_per_session);
  scheduler_options.max_queued_per_client = absl::GetFlag(FLAGS_max_queue_per_client);
  scheduler_options.intra_op_threads = intra_op_threads;
  scheduler_options.adapt_threads_to_load = absl::GetFlag(FLAGS_adapt_threads_to_load);
  scheduler_options.decode_split_max_bytes_per_row =
      absl::GetFlag(FLAGS_decode_split_max_bytes_per_row);
  scheduler_options.sessions = &sessions;
  scheduler_options.metrics = &metrics;
  if (scheduler_options.max_batch_sessions < 1 || scheduler_options.max_batch_tokens < 1 ||
      scheduler_options.max_queued_jobs < 1 || scheduler_options.max_queued_per_session < 1 ||
      scheduler_options.max_queued_per_client < 0 ||
      scheduler_options.decode_split_max_bytes_per_row < 0) {
    return Fail(
        "--max_batch_sessions, --max_batch_tokens, --max_queue and --max_queue_per_session must "
        "be >= 1, --max_queue_per_client and --decode_split_max_bytes_per_row >= 0");
  }
  server::scheduler::BatchScheduler scheduler(scheduler_options);

  server::ServiceOptions options;
  options.max_tokens_per_request = absl::GetFlag(FLAGS_max_tokens_per_request);
  options.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  options.retry_window = absl::GetFlag(FLAGS_retry_window);
  options.max_snapshot_bytes = absl::GetFlag(FLAGS_max_snapshot_bytes);
  options.max_stream_buffer_bytes = absl::GetFlag(FLAGS_max_stream_buffer_bytes);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_metadata_bytes = absl::GetFlag(FLAGS_max_metadata_bytes);
  if (options.retry_window < 1) return Fail("--retry_window must be >= 1");
  options.text_limits.max_text_bytes = absl::GetFlag(FLAGS_max_text_bytes);
  options.text_limits.max_stop_strings = absl::GetFlag(FLAGS_max_stop_strings);
  options.text_limits.max_stop_string_bytes = absl::GetFlag(FLAGS_max_stop_string_bytes);
  if (options.text_limits.max_text_bytes < 1 || options.text_limits.max_stop_strings < 0 ||
      options.text_limits.max_stop_string_bytes < 1) {
    return Fail(
        "--max_text_bytes and --max_stop_string_bytes must be >= 1, --max_stop_strings >= 0");
  }
  server::RequestWorkOptions work_options;
  work_options.threads = absl::GetFlag(FLAGS_request_work_threads);
  if (work_options.threads < 0) {
    work_options.threads = cores.cores;  // the cores this process may use (cpu_share.h)
  }
  work_options.inline_bytes = absl::GetFlag(FLAGS_request_work_inline_bytes);
  work_options.max_queued_per_client = absl::GetFlag(FLAGS_max_request_work_per_client);
  work_options.max_queued = absl::GetFlag(FLAGS_max_request_work_queued);
  work_options.nice = absl::GetFlag(FLAGS_request_work_nice);
  if (work_options.inline_bytes < 0 || work_options.max_queued_per_client < 1 ||
      work_options.max_queued < 1 || work_options.nice < 0 || work_options.nice > 19) {
    return Fail(
        "--request_work_inline_bytes must be >= 0, --max_request_work_per_client and "
        "--max_request_work_queued >= 1, --request_work_nice 0 to 19");
  }
  // Outlives the gRPC server (declared before it): its queued work finishes calls.
  server::RequestWorkPool work_pool(work_options);
  options.work_pool = &work_pool;
  options.metrics = &metrics;
  options.prefix_cache_global = cache_scope == "global";
  options.prefix_cache = &prefix_cache;
  options.authenticator = authenticator->get();
  absl::StatusOr<v1::ServerIdentity> identity = server::MakeServerIdentity(
      absl::GetFlag(FLAGS_instance_name), absl::GetFlag(FLAGS_advertise_address));
  if (!identity.ok()) return Fail(std::string(identity.status().message()));
  options.identity = *identity;
  server::AttnServeService service(**repository, *policy, sessions, scheduler, options);
  // The Open Inference Protocol on the same port, over the same sessions and scheduler.
  server::oip::OipOptions oip_options;
  oip_options.limits.max_tokens_per_request = options.max_tokens_per_request;
  oip_options.limits.max_new_tokens = options.max_new_tokens;
  oip_options.limits.max_text_bytes = options.text_limits.max_text_bytes;
  oip_options.text_limits = options.text_limits;
  oip_options.max_message_bytes = options.max_message_bytes;
  oip_options.max_metadata_bytes = options.max_metadata_bytes;
  oip_options.prefix_cache_global = options.prefix_cache_global;
  oip_options.server_version = ATTNSERVE_VERSION;
  oip_options.metrics = &metrics;
  oip_options.authenticator = options.authenticator;
  oip_options.work_pool = &work_pool;
  server::oip::OipService oip_service(**repository, *policy, sessions, scheduler, oip_options);
  // The OpenAI-compatible HTTP door, over the same sessions and scheduler.
  std::unique_ptr<server::openai::OpenAiServer> http;
  if (absl::GetFlag(FLAGS_http_port) >= 0) {
    server::openai::HttpOptions http_options;
    http_options.host = absl::GetFlag(FLAGS_http_host).empty() ? absl::GetFlag(FLAGS_host)
                                                               : absl::GetFlag(FLAGS_http_host);
    http_options.port = absl::GetFlag(FLAGS_http_port);
    http_options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
    http_options.tls_key = absl::GetFlag(FLAGS_tls_key);
    http_options.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
    http_options.threads = absl::GetFlag(FLAGS_http_threads);
    http_options.max_queued_connections = absl::GetFlag(FLAGS_http_max_queued_connections);
    http_options.max_body_bytes = absl::GetFlag(FLAGS_http_max_body_bytes);
    http_options.max_header_bytes = absl::GetFlag(FLAGS_http_max_header_bytes);
    http_options.max_requests_per_client = absl::GetFlag(FLAGS_http_max_requests_per_client);
    http_options.max_requests = absl::GetFlag(FLAGS_http_max_requests);
    http_options.read_timeout_s = absl::GetFlag(FLAGS_http_read_timeout_s);
    http_options.write_timeout_s = absl::GetFlag(FLAGS_http_write_timeout_s);
    http_options.keep_alive_s = absl::GetFlag(FLAGS_http_keep_alive_s);
    http_options.max_tokens_per_request = options.max_tokens_per_request;
    http_options.limits.max_new_tokens = options.max_new_tokens;
    http_options.limits.max_choices = absl::GetFlag(FLAGS_http_max_choices);
    http_options.limits.max_stop_strings = options.text_limits.max_stop_strings;
    http_options.runner.text_limits = options.text_limits;
    http_options.runner.prefix_cache_global = options.prefix_cache_global;
    http_options.authenticator = options.authenticator;
    http_options.metrics = &metrics;
    if (http_options.threads < 1 || http_options.max_queued_connections < 1 ||
        http_options.max_body_bytes < 1 || http_options.max_header_bytes < 1 ||
        http_options.max_requests_per_client < 1 || http_options.max_requests < 1 ||
        http_options.limits.max_choices < 1 || http_options.read_timeout_s < 1 ||
        http_options.write_timeout_s < 1 || http_options.keep_alive_s < 0) {
      return Fail("the --http_* limits must be >= 1 (--http_keep_alive_s >= 0)");
    }
    http = std::make_unique<server::openai::OpenAiServer>(**repository, *policy, sessions,
                                                          scheduler, http_options);
  }
  auto inflight = [&service, &oip_service, &http] {
    return service.inflight() + oip_service.inflight() + (http ? http->inflight() : 0);
  };
  server::MemoryTrimOptions trim_options;
  trim_options.idle_after = absl::Seconds(absl::GetFlag(FLAGS_idle_memory_trim_s));
  trim_options.max_free_bytes = absl::GetFlag(FLAGS_max_free_heap_bytes);
  trim_options.release_reserves = [&prefix_cache] { prefix_cache.ReleasePrefaulted(); };
  if (trim_options.idle_after < absl::ZeroDuration() || trim_options.max_free_bytes < 0 ||
      absl::GetFlag(FLAGS_kv_buffer_pool_bytes) < 0) {
    return Fail(
        "--idle_memory_trim_s, --max_free_heap_bytes and --kv_buffer_pool_bytes must be >= 0");
  }
  kernels::SetHugePageBufferPoolBytes(absl::GetFlag(FLAGS_kv_buffer_pool_bytes));
  server::IdleMemoryTrimmer memory_trimmer(
      trim_options, [&scheduler] { return scheduler.queued_jobs() > 0; },
      // Work, and sessions coming and going (the reaper frees expired ones while idle).
      [&scheduler, &sessions] {
        return scheduler.iterations() * 1000003 + sessions.size() * 7919 + sessions.state_bytes();
      });

  server::ServerMetrics::Sources sources;
  sources.sessions = &sessions;
  for (const model::Model* m : (*repository)->models()) sources.variants.push_back(m->name());
  metrics.InitializeRequestSeries(sources.variants);
  sources.inflight = inflight;
  sources.queue_depth = [&scheduler] { return scheduler.waiting_jobs(); };
  sources.request_work_queued = [&work_pool] { return work_pool.queued(); };
  sources.request_work_ran = [&work_pool] { return work_pool.ran_on_pool(); };
  sources.prefix_cache = &prefix_cache;
  metrics.SetSources(std::move(sources));
  // Before the server starts: a SIGTERM from then on drains rather than kills.
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  grpc::EnableDefaultHealthCheckService(true);
  // The plaintext health port: grpc.health.v1 only.
  std::unique_ptr<grpc::Server> health_server;
  // Answers every other method on the health port with UNIMPLEMENTED (and gives gRPC a callback
  // service to poll: the default health service alone is added only once the server starts).
  grpc::CallbackGenericService unimplemented;
  if (absl::GetFlag(FLAGS_health_port) >= 0) {
    const std::string host = absl::GetFlag(FLAGS_health_host).empty()
                                 ? absl::GetFlag(FLAGS_host)
                                 : absl::GetFlag(FLAGS_health_host);
    const std::string health_address = absl::StrCat(host, ":", absl::GetFlag(FLAGS_health_port));
    grpc::ServerBuilder health_builder;
    health_builder.SetOption(std::make_unique<WithoutReflection>());  // health and nothing else
    int health_port = 0;
    health_builder.AddListeningPort(health_address, grpc::InsecureServerCredentials(),
                                    &health_port);
    health_builder.SetMaxReceiveMessageSize(4096);
    health_builder.RegisterCallbackGenericService(&unimplemented);
    health_server = health_builder.BuildAndStart();
    if (!health_server || health_port == 0) return Fail("cannot listen on " + health_address);
    std::cout << "health (plaintext, grpc.health.v1 only) on " << host << ":" << health_port
              << std::endl;
  }
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!absl::GetFlag(FLAGS_reflection)) builder.SetOption(std::make_unique<WithoutReflection>());
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  int bound_port = 0;
  builder.AddListeningPort(address, credentials->credentials, &bound_port);
  builder.SetMaxReceiveMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.SetMaxSendMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             absl::GetFlag(FLAGS_max_concurrent_streams));
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                             server::TransportMetadataLimit(options.max_metadata_bytes));
  builder.RegisterService(&service);
  builder.RegisterService(&oip_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) return Fail("cannot listen on " + address);
  std::cout << "attnserve-server listening on " << absl::GetFlag(FLAGS_host) << ":" << bound_port
            << " (scheduler: " << intra_op_threads << " kernel threads, batches of at most "
            << scheduler_options.max_batch_sessions << " sessions and "
            << scheduler_options.max_batch_tokens << " tokens; " << kernels::DescribeCudaDevices()
            << ")" << std::endl;
  if (http != nullptr) {
    if (absl::Status started = http->Start(); !started.ok()) {
      return Fail(std::string(started.message()));
    }
    std::cout << "OpenAI-compatible HTTP on "
              << (absl::GetFlag(FLAGS_http_host).empty() ? absl::GetFlag(FLAGS_host)
                                                         : absl::GetFlag(FLAGS_http_host))
              << ":" << http->port() << (absl::GetFlag(FLAGS_tls_cert).empty() ? "" : " (TLS)")
              << std::endl;
  }
  std::cout << "instance " << identity->instance_name() << ", advertised as "
            << (identity->advertise_address().empty() ? "(none)" : identity->advertise_address())
            << std::endl;

  while (!g_stop.load()) absl::SleepFor(absl::Milliseconds(100));

  std::cout << "attnserve-server: draining (" << inflight() << " calls in flight)" << std::endl;
  server->GetHealthCheckService()->SetServingStatus(false);
  if (metrics_endpoint != nullptr) metrics_endpoint->SetReady(false);
  if (health_server != nullptr) health_server->GetHealthCheckService()->SetServingStatus(false);
  service.StartDraining();
  oip_service.StartDraining();
  if (http != nullptr) http->StartDraining();
  const absl::Time deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_drain_deadline_s));
  while (inflight() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  if (inflight() > 0) {
    // The deadline passed: what remains ends with UNAVAILABLE at the scheduler's next
    // iteration (one step), and its calls finish; gRPC cancels whatever is left after 1 s.
    std::cout << "attnserve-server: drain deadline passed; cancelling " << inflight() << " calls"
              << std::endl;
    scheduler.Abort(absl::UnavailableError(
        "the server is shutting down and the drain deadline passed; retry on another replica"));
    const absl::Time grace = absl::Now() + absl::Seconds(1);
    while (inflight() > 0 && absl::Now() < grace) absl::SleepFor(absl::Milliseconds(10));
  }
  server->Shutdown(absl::ToChronoTime(absl::Now()));
  if (http != nullptr) http->Stop();
  if (health_server != nullptr) health_server->Shutdown(absl::ToChronoTime(absl::Now()));
  scheduler.Stop();
  if (persistence != nullptr) {
    // No job runs now: every session's state is still.
    const absl::Time save_start = absl::Now();
    const absl::Time save_deadline =
        save_start + absl::Seconds(absl::GetFlag(FLAGS_drain_save_deadline_s));
    const server::DrainSaveCounts saved = sessions.SaveAtDrain(save_deadline);
    std::cout << "attnserve-server: saved " << saved.saved << " of " << saved.changed
              << " changed sessions to " << persistence->Describe() << " in "
              << absl::ToDoubleSeconds(absl::Now() - save_start) << " s";
    if (saved.failed > 0) std::cout << "; " << saved.failed << " failed (the store refused them)";
    if (saved.unwritten > 0) std::cout << "; " << saved.unwritten << " unwritten at the deadline";
    if (persistence->leased()) std::cout << "; released " << saved.leases_released << " leases";
    std::cout << std::endl;
  }
  std::cout << "attnserve-server: stopped" << std::endl;
  return 0;
}
