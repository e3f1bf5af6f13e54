// attnserve_kernel_bench: times one mixer case per invocation and prints one JSON line.
//
//   attnserve_kernel_bench --case mamba_prefill --seq-len 2048 --threads 2 --repeats 5
//   attnserve_kernel_bench --case linear_step --context 32768 --steps 256
//
// Sizes match bench/baselines/seed_baselines.py: attention mixers (standard, linformer,
// linear) have d_model 512 = 8 heads x 64, linformer k = 256 and max_len = seq_len; mamba
// has d_model 256, d_state 16, d_conv 4, expand 2. Batch 1, float32, weights from
// RandomWeights(config, seed). The whole mixer is timed, projections included.
//
// Prefill cases (standard_causal, linformer, linear_causal, mamba_prefill): one Prefill of
// seq_len tokens with no state; `seconds` is the median of --repeats runs after --warmup.
// Core cases (standard_causal_core, linear_causal_core): the attention kernel alone,
// FlashAttentionCpu or CausalLinearAttentionCpu, on q, k, v (1, 8, seq_len, 64) made before.
// Step cases (standard_step, linear_step, mamba_step): Prefill of --context tokens into a
// fresh state, then --steps single Step calls, each timed; `seconds` is the median step.
//
// peak_rss_increase_bytes: VmHWM after the timed work minus VmRSS before it (VmHWM reset
// through /proc/self/clear_refs), so weights, inputs and the step cases' context state are
// excluded. Exit status 0 on success, 1 on a kernel error, 2 on bad arguments.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "kernels/common/blas_kernels.h"
#include "kernels/common/memory_reuse.h"
#include "kernels/common/mixer.h"
#include "kernels/common/status_macros.h"
#include "kernels/linear/causal_linear_attention_cpu.h"
#include "kernels/mamba/selective_scan_cpu.h"
#include "kernels/standard/flash_attention_cpu.h"

namespace attnserve::bench {
namespace {

using kernels::CreateMixer;
using kernels::Mixer;
using kernels::MixerConfig;
using kernels::MixerKind;
using kernels::MixerState;
using kernels::RandomWeights;

constexpr int64_t kHeads = 8;
constexpr int64_t kHeadDim = 64;
constexpr int64_t kLinformerK = 256;
constexpr int64_t kMambaDModel = 256;

struct Options {
  std::string case_name;
  int64_t seq_len = 1024;
  int64_t threads = 2;
  int64_t repeats = 5;
  int64_t warmup = 1;
  int64_t context = 1024;
  int64_t steps = 256;
  int64_t seed = 0;
  // Prefill and core cases: fewer timed runs (at least one) when --repeats runs at the
  // warm-up's pace would take longer than this; 0: no cap.
  int64_t time_cap_s = 0;
};

// What a case times: a whole-sequence Prefill of the mixer, Step calls after a context, or
// the attention core alone (the kernel under the mixer, on precomputed q, k, v).
enum class Scope { kPrefill, kStep, kCore };

struct CaseInfo {
  const char* name;
  MixerKind kind;
  bool causal;
  Scope scope;
};

constexpr CaseInfo kCases[] = {
    {"standard_causal", MixerKind::kStandard, true, Scope::kPrefill},
    {"standard_step", MixerKind::kStandard, true, Scope::kStep},
    {"standard_causal_core", MixerKind::kStandard, true, Scope::kCore},
    {"linformer", MixerKind::kLinformer, false, Scope::kPrefill},
    {"linear_causal", MixerKind::kLinear, true, Scope::kPrefill},
    {"linear_step", MixerKind::kLinear, true, Scope::kStep},
    {"linear_causal_core", MixerKind::kLinear, true, Scope::kCore},
    {"mamba_prefill", MixerKind::kMamba, true, Scope::kPrefill},
    {"mamba_step", MixerKind::kMamba, true, Scope::kStep},
    {"mamba_scan_core", MixerKind::kMamba, true, Scope::kCore},
};

struct Result {
  double seconds = 0;  // median of the timed runs (per Step for step cases)
  std::vector<double> times;
  int64_t peak_rss_increase_bytes = 0;
  bool peak_rss_exact = false;
  double prefill_seconds = 0;  // step cases: the context prefill
  int64_t state_bytes = 0;     // step cases: state after the timed steps
};

const char* kUsage =
    "usage: attnserve_kernel_bench --case NAME [--seq-len L] [--threads T] [--repeats N]\n"
    "         [--warmup W] [--context C] [--steps S] [--seed X]\n"
    "         [--time-cap-s S]\n"
    "cases: standard_causal standard_step standard_causal_core linformer linear_causal\n"
    "       linear_step linear_causal_core mamba_prefill mamba_step mamba_scan_core\n";

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg == "--help" || arg == "-h") {
      return absl::CancelledError(kUsage);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value\n", kUsage));
    }
    if (arg == "--case") {
      o.case_name = value;
      continue;
    }
    int64_t* field = arg == "--seq-len"      ? &o.seq_len
                     : arg == "--threads"    ? &o.threads
                     : arg == "--repeats"    ? &o.repeats
                     : arg == "--warmup"     ? &o.warmup
                     : arg == "--context"    ? &o.context
                     : arg == "--steps"      ? &o.steps
                     : arg == "--seed"       ? &o.seed
                     : arg == "--time-cap-s" ? &o.time_cap_s
                                             : nullptr;
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg, "\n", kUsage));
    }
    if (!absl::SimpleAtoi(value, field) || *field < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(arg, " wants a non-negative integer, got '", value, "'"));
    }
  }
  if (o.case_name.empty())
    return absl::InvalidArgumentError(absl::StrCat("--case is required\n", kUsage));
  if (o.seq_len < 1 || o.threads < 1 || o.repeats < 1 || o.context < 1 || o.steps < 1) {
    return absl::InvalidArgumentError(
        "--seq-len, --threads, --repeats, --context and --steps must be >= 1");
  }
  return o;
}

absl::StatusOr<CaseInfo> FindCase(const std::string& name) {
  for (const CaseInfo& c : kCases) {
    if (name == c.name) return c;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown case '", name, "'\n", kUsage));
}

MixerConfig ConfigFor(const CaseInfo& c, const Options& o) {
  MixerConfig config;
  config.kind = c.kind;
  config.causal = c.causal;
  if (c.kind == MixerKind::kMamba) {
    config.d_model = kMambaDModel;
    config.d_state = 16;
    config.d_conv = 4;
    config.expand = 2;
  } else {
    config.d_model = kHeads * kHeadDim;
    config.num_heads = kHeads;
    config.linformer_k = kLinformerK;
    config.max_len = o.seq_len;
  }
  return config;
}

// One field of /proc/self/status in bytes (the file gives kB); -1 if absent.
int64_t ProcStatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream fields(line.substr(field.size() + 1));
      int64_t kib = -1;
      fields >> kib;
      return kib * 1024;
    }
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0); false where that is not allowed.
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Times `run_once`: --warmup untimed calls, then --repeats timed ones.
absl::StatusOr<Result> TimeRepeated(const Options& o,
                                    const std::function<absl::Status()>& run_once) {
  Result r;
  r.peak_rss_exact = ResetPeakRss();
  const int64_t base = ProcStatusBytes("VmRSS");
  const double warm_start = Now();
  for (int64_t i = 0; i < o.warmup; ++i) RETURN_IF_ERROR(run_once());
  int64_t repeats = o.repeats;
  if (o.time_cap_s > 0 && o.warmup > 0) {
    const double per_run = (Now() - warm_start) / static_cast<double>(o.warmup);
    const auto fit = static_cast<int64_t>(static_cast<double>(o.time_cap_s) / per_run);
    repeats = std::max<int64_t>(1, std::min(repeats, fit));
  }
  for (int64_t i = 0; i < repeats; ++i) {
    const double t0 = Now();
    absl::Status status = run_once();
    r.times.push_back(Now() - t0);
    RETURN_IF_ERROR(status);
  }
  r.peak_rss_increase_bytes = std::max<int64_t>(0, ProcStatusBytes("VmHWM") - base);
  r.seconds = Median(r.times);
  return r;
}

absl::StatusOr<Result> RunPrefill(const Mixer& mixer, const Options& o) {
  const at::Tensor x = at::randn({1, o.seq_len, mixer.config().d_model});
  return TimeRepeated(o, [&] { return mixer.Prefill(x, nullptr).status(); });
}

// The fused selective scan under the mamba mixer (discretisation, state update, read-out, D
// skip, silu(z) gate) on precomputed u, delta, z (1, L, d_inner) and B, C (1, L, d_state),
// as the baseline's mamba_loop_core times the seed's scan loop with the same skip and gate.
absl::StatusOr<Result> RunMambaScanCore(const MixerConfig& config, const Options& o) {
  const int64_t len = o.seq_len, dim = config.d_inner(), n = config.d_state;
  const at::Tensor u = at::randn({1, len, dim});
  const at::Tensor delta = at::softplus(at::randn({1, len, dim}));
  const at::Tensor z = at::randn({1, len, dim});
  const at::Tensor bc = at::randn({1, len, 2 * n});  // B then C, as slices of x_proj's output
  const at::Tensor a_t =
      -at::arange(1, n + 1, at::kFloat).unsqueeze(1).expand({n, dim}).contiguous();
  const at::Tensor d_skip = at::ones({dim});
  return TimeRepeated(o, [&] {
    at::Tensor out = at::empty({1, len, dim});
    at::Tensor state = at::zeros({1, dim, n});
    kernels::mamba::SelectiveScanParams p;
    p.batch = 1;
    p.seqlen = len;
    p.dim = dim;
    p.dstate = n;
    p.u = u.data_ptr<float>();
    p.delta = delta.data_ptr<float>();
    p.z = z.data_ptr<float>();
    p.B = bc.data_ptr<float>();
    p.C = bc.data_ptr<float>() + n;
    p.A_t = a_t.data_ptr<float>();
    p.D = d_skip.data_ptr<float>();
    p.out = out.data_ptr<float>();
    p.state = state.data_ptr<float>();
    p.u_batch_stride = p.delta_batch_stride = p.z_batch_stride = len * dim;
    p.u_seq_stride = p.delta_seq_stride = p.z_seq_stride = dim;
    p.bc_batch_stride = len * 2 * n;
    p.bc_seq_stride = 2 * n;
    kernels::mamba::SelectiveScanCpu(p);
    return absl::OkStatus();
  });
}

// The attention core under the standard or linear mixer on q, k, v (1, H, L, d), as the
// baselines' *_core cases time the seeds' attention without projections; for mamba, the scan.
absl::StatusOr<Result> RunCore(const CaseInfo& c, const Options& o) {
  if (c.kind == MixerKind::kMamba) return RunMambaScanCore(ConfigFor(c, o), o);
  const at::Tensor q = at::randn({1, kHeads, o.seq_len, kHeadDim});
  const at::Tensor k = at::randn({1, kHeads, o.seq_len, kHeadDim});
  const at::Tensor v = at::randn({1, kHeads, o.seq_len, kHeadDim});
  if (c.kind == MixerKind::kStandard) {
    return TimeRepeated(o, [&] { return kernels::FlashAttentionCpu(q, k, v, c.causal).status(); });
  }
  const at::Tensor s = at::zeros({1, kHeads, kHeadDim, kHeadDim});
  const at::Tensor z = at::zeros({1, kHeads, kHeadDim});
  return TimeRepeated(o, [&] { return kernels::CausalLinearAttentionCpu(q, k, v, s, z).status(); });
}

absl::StatusOr<Result> RunStep(const Mixer& mixer, const Options& o) {
  Result r;
  const int64_t d_model = mixer.config().d_model;
  ASSIGN_OR_RETURN(MixerState state, mixer.InitialState(1));
  {
    at::Tensor context = at::randn({1, o.context, d_model});
    const double t0 = Now();
    RETURN_IF_ERROR(mixer.Prefill(context, &state).status());
    r.prefill_seconds = Now() - t0;
  }
  at::Tensor tokens = at::randn({o.warmup + o.steps, 1, d_model});
  r.peak_rss_exact = ResetPeakRss();
  const int64_t base = ProcStatusBytes("VmRSS");
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    at::Tensor x_t = tokens[i];  // (1, d_model)
    const double t0 = Now();
    absl::StatusOr<at::Tensor> y = mixer.Step(x_t, &state);
    const double dt = Now() - t0;
    RETURN_IF_ERROR(y.status());
    if (i >= o.warmup) r.times.push_back(dt);
  }
  r.peak_rss_increase_bytes = std::max<int64_t>(0, ProcStatusBytes("VmHWM") - base);
  r.seconds = Median(r.times);
  r.state_bytes = state.Bytes();
  return r;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string JsonDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

int Main(int argc, char** argv) {
  // As the server does (server/main.cc): the timings are the server's.
  kernels::KeepFreedMemoryForReuse();
  absl::StatusOr<Options> options = ParseArgs(argc, argv);
  if (!options.ok()) {
    std::fputs(std::string(options.status().message()).c_str(), stderr);
    return absl::IsCancelled(options.status()) ? 0 : 2;
  }
  const Options& o = *options;
  absl::StatusOr<CaseInfo> info = FindCase(o.case_name);
  if (!info.ok()) {
    std::fputs(std::string(info.status().message()).c_str(), stderr);
    return 2;
  }
  at::set_num_threads(static_cast<int>(o.threads));

  std::string head = absl::StrCat("{\"impl\":\"attnserve\",\"case\":", JsonString(info->name),
                                  ",\"threads\":", o.threads);
  const bool step = info->scope == Scope::kStep;
  if (step) {
    absl::StrAppend(&head, ",\"context\":", o.context, ",\"steps\":", o.steps);
  } else {
    absl::StrAppend(&head, ",\"seq_len\":", o.seq_len);
  }

  const MixerConfig config = ConfigFor(*info, o);
  absl::StatusOr<Result> result = [&]() -> absl::StatusOr<Result> {
    ASSIGN_OR_RETURN(std::unique_ptr<Mixer> mixer,
                     CreateMixer(config, RandomWeights(config, static_cast<uint64_t>(o.seed))));
    at::manual_seed(static_cast<uint64_t>(o.seed) + 1);
    switch (info->scope) {
      case Scope::kStep:
        return RunStep(*mixer, o);
      case Scope::kCore:
        return RunCore(*info, o);
      case Scope::kPrefill:
        break;
    }
    return RunPrefill(*mixer, o);
  }();
  if (!result.ok()) {
    std::printf("%s,\"status\":\"error\",\"reason\":%s}\n", head.c_str(),
                JsonString(result.status().ToString()).c_str());
    return 1;
  }

  const Result& r = *result;
  const double tokens = step ? 1.0 : static_cast<double>(o.seq_len);
  std::string times;
  for (double t : r.times) absl::StrAppend(&times, times.empty() ? "" : ",", JsonDouble(t));
  const double fastest = *std::min_element(r.times.begin(), r.times.end());
  std::string line = absl::StrCat(head, ",\"status\":\"ok\",\"seconds\":", JsonDouble(r.seconds),
                                  ",\"min_seconds\":", JsonDouble(fastest),
                                  ",\"tokens_per_s\":", JsonDouble(tokens / r.seconds),
                                  ",\"peak_rss_increase_bytes\":", r.peak_rss_increase_bytes,
                                  ",\"peak_rss_exact\":", r.peak_rss_exact ? "true" : "false");
  if (step) {
    absl::StrAppend(&line, ",\"prefill_seconds\":", JsonDouble(r.prefill_seconds),
                    ",\"state_bytes\":", r.state_bytes);
  }
  // Per-step times are many; the summary is enough for step cases.
  if (!step) {
    absl::StrAppend(&line, ",\"repeats\":", r.times.size(), ",\"times\":[", times, "]");
  }
  std::printf("%s}\n", line.c_str());
  return 0;
}

}  // namespace
}  // namespace attnserve::bench

int main(int argc, char** argv) {
  // Before anything: the CPU's own OpenBLAS kernels (may re-execute; see blas_kernels.h).
  std::printf("%s\n", attnserve::kernels::UseTheCpusBlasKernels(argv).c_str());
  return attnserve::bench::Main(argc, argv);
}
