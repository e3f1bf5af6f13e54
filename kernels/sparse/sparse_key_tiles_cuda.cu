// sparse_key_tiles.h compiled as device code: this build has no CUDA sparse attention kernel
// (CUDA tensors take the ATen path of sparse_attention_cpu.cc, untested on a GPU), but the tile
// plan and the per-score masks that one would use are host-and-device functions; this kernel,
// which plans every block's key range and counts its visible scores, keeps them compiling
// under nvcc on every build that finds it. Launched by nothing yet (tests/gpu could compare it
// with the CPU plan).
#include "kernels/sparse/sparse_key_tiles.h"

namespace attnserve::kernels::sparse {

// One thread per block of `rows` query rows of `part`: its planned range and the visible
// (row, column) pairs in it.
__global__ void SparseKeyPlanKernel(SparseGeometry g, int32_t part, int64_t query_rows,
                                    int64_t rows, KeyRange* ranges, int64_t* visible) {
  const int64_t block = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t first = block * rows;
  if (first >= query_rows) return;
  const int64_t last = first + rows - 1 < query_rows ? first + rows - 1 : query_rows - 1;
  const KeyRange range = PlanSparseKeys(g, part, first, last);
  int64_t count = 0;
  for (int64_t row = first; row <= last; ++row) {
    for (int64_t col = range.begin; col < range.end; ++col) {
      count += SparseKeyHidden(g, part, row, col) ? 0 : 1;
    }
  }
  ranges[block] = range;
  visible[block] = count;
}

}  // namespace attnserve::kernels::sparse
