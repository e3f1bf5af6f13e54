// attnserve_cpu_peaks: what this CPU can do at most, measured here, for the bounds the decode
// figures are read against (bench/batched_decode.py prints each figure as a fraction of them):
//
//   fp32 FMA     multiply-adds on the widest vectors the CPU has (AVX-512, else AVX2 + FMA): the
//                float32 products, and the bfloat16-weight ones (widened to float32 first)
//   bf16 dot     vdpbf16ps (AVX512_BF16): --activation_precision=bf16's products
//   int8 dot     vpdpbusd on AVX512_VNNI, else on AVX-VNNI, else AVX2's vpmaddubsw + vpmaddwd +
//                vpaddd (what --weight_precision=int8's products run on, int8_gemm.h)
//   read         GB/s of summing a buffer far larger than the caches
//
// each on one thread and on --threads threads at once (one per core). Operations count a
// multiply and an add as two (a vpdpbusd lane's four byte products and their sum as eight).
// The arithmetic loops keep 12 independent accumulators, more than any of these instructions'
// latency times its throughput on current x86 cores, and touch no memory.
//
//   attnserve_cpu_peaks [--threads=2] [--seconds=0.2] [--read_mib=1024] [--json=FILE]
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTNSERVE_PEAKS_X86 1
#else
#define ATTNSERVE_PEAKS_X86 0
#endif

namespace {

constexpr int kAccumulators = 12;
constexpr int64_t kInnerIterations = 1 << 16;

// One measured loop: `ops` operations per call of `body(iterations)`, and whether the CPU has it.
struct Peak {
  std::string name, isa;
  double ops_per_iteration = 0;
  std::function<double(int64_t)> body;  // returns a value that depends on the work
};

#if ATTNSERVE_PEAKS_X86
// The sum of every lane of `acc`, so that the loops' work is used.
template <typename Vector>
double SumLanes(const Vector (&acc)[kAccumulators]) {
  using Lane = std::conditional_t<std::is_floating_point_v<decltype(acc[0][0])>, float, int32_t>;
  Lane lanes[sizeof(Vector) / sizeof(Lane)];
  double s = 0;
  for (int i = 0; i < kAccumulators; ++i) {
    std::memcpy(lanes, &acc[i], sizeof(lanes));
    for (Lane v : lanes) s += v;
  }
  return s;
}

// Name(iterations): kAccumulators vectors, each advanced `iterations` times by Step (an
// expression of acc[i], so that each step waits for the last: nothing is hoisted or folded).
#define ATTNSERVE_PEAK_LOOP(Name, Target, Vector, Zero, Step)                         \
  __attribute__((target(Target))) double Name(int64_t iterations) {                   \
    Vector acc[kAccumulators];                                                        \
    for (int i = 0; i < kAccumulators; ++i) acc[i] = Zero;                            \
    for (int64_t it = 0; it < iterations; ++it) {                                     \
      _Pragma("GCC unroll 12") for (int i = 0; i < kAccumulators; ++i) acc[i] = Step; \
    }                                                                                 \
    return SumLanes(acc);                                                             \
  }

ATTNSERVE_PEAK_LOOP(Fma512, "avx512f", __m512, _mm512_setzero_ps(),
                    _mm512_fmadd_ps(acc[i], _mm512_set1_ps(0.999f), _mm512_set1_ps(1e-4f)))
ATTNSERVE_PEAK_LOOP(Fma256, "avx2,fma", __m256, _mm256_setzero_ps(),
                    _mm256_fmadd_ps(acc[i], _mm256_set1_ps(0.999f), _mm256_set1_ps(1e-4f)))
ATTNSERVE_PEAK_LOOP(Bf16Dot512, "avx512f,avx512bf16", __m512, _mm512_setzero_ps(),
                    _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi16(0x3f80),
                                     (__m512bh)_mm512_set1_epi16(0x3000)))
ATTNSERVE_PEAK_LOOP(Vnni512, "avx512f,avx512vnni", __m512i, _mm512_setzero_si512(),
                    _mm512_dpbusd_epi32(acc[i], _mm512_set1_epi8(1), _mm512_set1_epi8(2)))
ATTNSERVE_PEAK_LOOP(AvxVnni256, "avx2,avxvnni", __m256i, _mm256_setzero_si256(),
                    _mm256_dpbusd_avx_epi32(acc[i], _mm256_set1_epi8(1), _mm256_set1_epi8(2)))
// int8_gemm.h's AVX2 step: 32 byte products summed in pairs to int16, in fours to int32 (the
// accumulator's bytes as one operand, so that the products are not hoisted).
ATTNSERVE_PEAK_LOOP(
    Avx2Int8, "avx2", __m256i, _mm256_setzero_si256(),
    _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), acc[i]),
                                               _mm256_set1_epi16(1))))
#endif  // ATTNSERVE_PEAKS_X86

std::vector<Peak> PeaksThisCpuHas() {
  std::vector<Peak> peaks;
#if ATTNSERVE_PEAKS_X86
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    peaks.push_back({"fp32 FMA", "avx512f", 2.0 * 16 * kAccumulators, Fma512});
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    peaks.push_back({"fp32 FMA", "avx2+fma", 2.0 * 8 * kAccumulators, Fma256});
  }
  if (avx512 && __builtin_cpu_supports("avx512bf16")) {
    peaks.push_back({"bf16 dot", "avx512-bf16", 4.0 * 16 * kAccumulators, Bf16Dot512});
  }
  if (avx512 && __builtin_cpu_supports("avx512vnni")) {
    peaks.push_back({"int8 dot", "avx512-vnni", 8.0 * 16 * kAccumulators, Vnni512});
  } else if (__builtin_cpu_supports("avxvnni")) {
    peaks.push_back({"int8 dot", "avx-vnni", 8.0 * 8 * kAccumulators, AvxVnni256});
  } else if (__builtin_cpu_supports("avx2")) {
    peaks.push_back({"int8 dot", "avx2", 8.0 * 8 * kAccumulators, Avx2Int8});
  }
#endif
  return peaks;
}

std::atomic<double> g_sink{0};

// Operations a second of `body` on `threads` threads at once, each running for `seconds`.
double OpsPerSecond(const Peak& peak, int threads, double seconds) {
  std::vector<double> rates(threads, 0);
  std::atomic<int> ready{0};
  auto work = [&](int t) {
    ready.fetch_add(1);
    while (ready.load() < threads) {
    }
    peak.body(kInnerIterations / 16);  // warm: clocks up, code in cache
    int64_t done = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    while (elapsed < seconds) {
      g_sink = g_sink + peak.body(kInnerIterations);
      done += kInnerIterations;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    rates[t] = peak.ops_per_iteration * static_cast<double>(done) / elapsed;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  double total = 0;
  for (double r : rates) total += r;
  return total;
}

// GB/s of summing `bytes` of float32 on `threads` threads, each its own share; best of 3.
double ReadGBs(const std::vector<float>& buffer, int threads) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> sums(threads, 0);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    const size_t share = buffer.size() / threads;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const float* p = buffer.data() + t * share;
        float s[16] = {};
        for (size_t i = 0; i + 16 <= share; i += 16) {
          for (int l = 0; l < 16; ++l) s[l] += p[i + l];
        }
        for (float v : s) sums[t] += v;
      });
    }
    for (auto& th : pool) th.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (double s : sums) g_sink = g_sink + s;
    best = std::max(best, static_cast<double>(share * threads * sizeof(float)) / seconds / 1e9);
  }
  return best;
}

constexpr char kUsage[] =
    "usage: attnserve_cpu_peaks [--threads=2] [--seconds=0.2] [--read_mib=1024] [--json=FILE]\n"
    "  This CPU's float32 FMA, bf16 and int8 dot-product peaks (GOP/s) and read bandwidth (GB/s),\n"
    "  on one thread and on --threads at once; --json writes them for bench/batched_decode.py.\n";

bool Flag(const char* arg, const char* name, std::string* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *value = arg + n + 1;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  double seconds = 0.2;
  int64_t read_mib = 1024;
  std::string json, value;
  for (int i = 1; i < argc; ++i) {
    if (Flag(argv[i], "--threads", &value)) {
      threads = std::atoi(value.c_str());
    } else if (Flag(argv[i], "--seconds", &value)) {
      seconds = std::atof(value.c_str());
    } else if (Flag(argv[i], "--read_mib", &value)) {
      read_mib = std::atoll(value.c_str());
    } else if (Flag(argv[i], "--json", &value)) {
      json = value;
    } else if (std::strcmp(argv[i], "--help") == 0) {
      std::printf("%s", kUsage);
      return 0;
    } else {
      std::fprintf(stderr, "unknown flag %s\n%s", argv[i], kUsage);
      return 2;
    }
  }
  if (threads < 1 || seconds <= 0 || read_mib < 1) {
    std::fprintf(stderr, "--threads, --seconds and --read_mib must be positive\n");
    return 2;
  }
  std::string out = "{";
  std::printf("%-10s %-12s %14s %14s\n", "peak", "instructions", "1 thread",
              (std::to_string(threads) + " threads").c_str());
  bool first = true;
  for (const Peak& peak : PeaksThisCpuHas()) {
    const double one = OpsPerSecond(peak, 1, seconds) / 1e9;
    const double all = OpsPerSecond(peak, threads, seconds) / 1e9;
    std::printf("%-10s %-12s %9.1f GOP/s %9.1f GOP/s\n", peak.name.c_str(), peak.isa.c_str(), one,
                all);
    char entry[256];
    std::snprintf(entry, sizeof(entry),
                  "%s\"%s\": {\"isa\": \"%s\", \"gops_1\": %.2f, \"gops_all\": %.2f}",
                  first ? "" : ", ", peak.name.c_str(), peak.isa.c_str(), one, all);
    out += entry;
    first = false;
  }
  std::vector<float> buffer(static_cast<size_t>(read_mib) << 18, 1.0f);
  const double read_one = ReadGBs(buffer, 1), read_all = ReadGBs(buffer, threads);
  std::printf("%-10s %-12s %10.1f GB/s %10.1f GB/s\n", "read", "-", read_one, read_all);
  char entry[256];
  std::snprintf(entry, sizeof(entry),
                "%s\"read\": {\"gbs_1\": %.2f, \"gbs_all\": %.2f}, \"threads\": %d}",
                first ? "" : ", ", read_one, read_all, threads);
  out += entry;
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(f, "%s\n", out.c_str());
    std::fclose(f);
  }
  return g_sink.load() == 12345.678 ? 3 : 0;
}
