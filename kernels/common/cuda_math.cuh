// Device helpers shared by the .cu kernels: element loads and stores as float32 whatever the
// activation type, and the activation functions written so that --use_fast_math keeps them
// accurate to float32 rounding where the kernels need it (see Softplus).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace attnserve::kernels::cuda {

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Four consecutive elements as a float4. float: one 16-byte load (p 16-byte aligned);
// bfloat16: one 8-byte load (p 8-byte aligned).
__device__ __forceinline__ float4 Load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 Load4(const __nv_bfloat16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
  const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  const float2 a = __bfloat1622float2(lo), b = __bfloat1622float2(hi);
  return make_float4(a.x, a.y, b.x, b.y);
}

__device__ __forceinline__ void Store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void Store4(__nv_bfloat16* p, float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 raw;
  raw.x = *reinterpret_cast<const uint32_t*>(&lo);
  raw.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(p) = raw;
}

// softplus(x) = log(1 + e^x), x for x > 20 (as torch). log1pf is not replaced by a fast
// intrinsic under --use_fast_math (logf would be, and __logf(1 + e^x) loses all relative
// accuracy for the small dt that Mamba's dt bias produces, e.g. softplus(-7) ≈ 9e-4).
__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

__device__ __forceinline__ float Silu(float x) { return x / (1.0f + __expf(-x)); }

// elu(x) + 1: x + 1 for x > 0, e^x otherwise; always > 0.
__device__ __forceinline__ float EluPlusOne(float x) { return x > 0.0f ? x + 1.0f : __expf(x); }

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace attnserve::kernels::cuda
