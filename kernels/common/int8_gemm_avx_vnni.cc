// The int8 products on AVX-VNNI's vpdpbusd on 256-bit vectors: int8_gemm_ymm.inc, compiled for that
// instruction set alone.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/common/int8_gemm_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define ATTNSERVE_YMM_TARGET __attribute__((target("avx2,fma,avxvnni")))
#define ATTNSERVE_YMM_VNNI 1
#define ATTNSERVE_YMM_PANELS AvxVnniPanels
#include "kernels/common/int8_gemm_ymm.inc"

#endif
