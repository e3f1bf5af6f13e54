// The int8 products on AVX2's vpmaddubsw and vpmaddwd: int8_gemm_ymm.inc, compiled for that
// instruction set alone.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/common/int8_gemm_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define ATTNSERVE_YMM_TARGET __attribute__((target("avx2,fma")))
#define ATTNSERVE_YMM_VNNI 0
#define ATTNSERVE_YMM_PANELS Avx2Panels
#include "kernels/common/int8_gemm_ymm.inc"

#endif
