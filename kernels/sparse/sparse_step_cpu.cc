#include "kernels/sparse/sparse_step_cpu.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "kernels/standard/decode_attention_cpu.h"

namespace attnserve::kernels {

std::vector<int64_t> SparseStepPositions(const SparsePatternConfig& pattern, int64_t p) {
  const int64_t l = pattern.stride;
  std::vector<int64_t> positions;
  int64_t local_begin;
  if (pattern.pattern == sparse::kStrided) {
    local_begin = std::max<int64_t>(0, p - l + 1);
    // p - k·l for k >= 1, oldest first.
    for (int64_t j = p % l; j + l <= p; j += l) positions.push_back(j);
  } else {
    local_begin = p / l * l;
    // The summary columns of every earlier block.
    for (int64_t block = 0; block < p / l; ++block) {
      for (int64_t j = block * l + l - pattern.summary; j < (block + 1) * l; ++j) {
        positions.push_back(j);
      }
    }
  }
  for (int64_t j = local_begin; j <= p; ++j) positions.push_back(j);
  return positions;
}

at::Tensor SparseDecodeHeads(const at::Tensor& q, const std::vector<KvCacheRow>& rows,
                             const SparsePatternConfig& pattern) {
  std::vector<at::Tensor> keep;  // the gathered keys and values, alive until the kernel ran
  std::vector<DecodeAttentionRow> decode_rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    const KvCacheRow& r = rows[i];
    const std::vector<int64_t> positions = SparseStepPositions(pattern, r.length - 1);
    const auto n = static_cast<int64_t>(positions.size());
    const at::Tensor index = at::tensor(positions, at::kLong).to(q.device());
    if (!q.is_cpu()) {
      // (H, n, d) keys and values, the query (H, 1, d): softmax attention in ATen.
      const at::Tensor keys = r.k_cache[r.row].index_select(1, index);
      const at::Tensor scores = at::matmul(q[static_cast<int64_t>(i)], keys.transpose(1, 2)) /
                                std::sqrt(static_cast<double>(q.size(3)));
      keep.push_back(at::matmul(at::softmax(scores, -1), r.v_cache[r.row].index_select(1, index)));
      continue;
    }
    // (H, n, d) each, contiguous.
    keep.push_back(r.k_cache[r.row].index_select(1, index));
    keep.push_back(r.v_cache[r.row].index_select(1, index));
    decode_rows.push_back(
        {keep[keep.size() - 2].data_ptr<float>(), keep.back().data_ptr<float>(), n, n});
  }
  if (!q.is_cpu()) return at::stack(keep);
  return DecodeAttentionHeads(q, decode_rows);
}

}  // namespace attnserve::kernels
