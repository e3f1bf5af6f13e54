// The batched decode kernels against float64 references on random, ragged shapes:
// decode_attention_cpu.h (rows with KV caches of their own lengths and capacities) and
// linear_decode_cpu.h (rows' S, z updated in place).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/linear/linear_decode_cpu.h"
#include "kernels/standard/decode_attention_cpu.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using testing::MaxRelativeError;
using testing::RandomTensor;

TEST(DecodeAttentionTest, RaggedRowsMatchFloat64) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t batch = 1 + rng() % 7, heads = 1 + rng() % 4;
    const int64_t d = std::vector<int64_t>{8, 17, 32, 64}[rng() % 4];
    at::Tensor q = RandomTensor({batch, heads, d}, 10 + trial);
    std::vector<at::Tensor> keys, values;
    std::vector<DecodeAttentionRow> rows;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t length = 1 + rng() % 300, capacity = length + rng() % 50;
      keys.push_back(RandomTensor({heads, capacity, d}, 100 * trial + 2 * b));
      values.push_back(RandomTensor({heads, capacity, d}, 100 * trial + 2 * b + 1));
      rows.push_back(
          {keys.back().data_ptr<float>(), values.back().data_ptr<float>(), length, capacity});
    }
    at::Tensor out = at::full({batch, heads, d}, std::nanf(""));
    DecodeAttentionCpu(q.data_ptr<float>(), rows.data(), batch, heads, d, out.data_ptr<float>());
    for (int64_t b = 0; b < batch; ++b) {
      const at::Tensor k = keys[b].narrow(1, 0, rows[b].length).to(at::kDouble);
      const at::Tensor v = values[b].narrow(1, 0, rows[b].length).to(at::kDouble);
      const at::Tensor scores =
          at::matmul(q[b].to(at::kDouble).unsqueeze(1), k.transpose(1, 2)) / std::sqrt(d * 1.0);
      const at::Tensor want = at::matmul(at::softmax(scores, -1), v).squeeze(1);
      EXPECT_LE(MaxRelativeError(out[b], want), 1e-5) << "trial " << trial << " row " << b;
    }
  }
}

// A row whose first positions are in shared spans (a KV cache sharing its prefix: kv_cache.h)
// gives the same bits as the same keys in one cache.
TEST(DecodeAttentionTest, SharedSpansGiveTheSameBitsAsOneCache) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t heads = 1 + rng() % 4, d = std::vector<int64_t>{8, 17, 64}[rng() % 3];
    const int64_t length = 3 + rng() % 300;
    const at::Tensor q = RandomTensor({1, heads, d}, 50 + trial);
    const at::Tensor k = RandomTensor({heads, length, d}, 60 + trial);
    const at::Tensor v = RandomTensor({heads, length, d}, 70 + trial);
    const int64_t cut1 = 1 + rng() % (length - 2), cut2 = cut1 + 1 + rng() % (length - cut1 - 1);
    // Three pieces, each in a buffer of its own with spare room.
    std::vector<at::Tensor> keep;
    std::vector<DecodeAttentionRow> spans;
    auto piece = [&](int64_t from, int64_t n) {
      const int64_t capacity = n + 3;
      at::Tensor kp = at::zeros({heads, capacity, d}), vp = at::zeros({heads, capacity, d});
      kp.narrow(1, 0, n).copy_(k.narrow(1, from, n));
      vp.narrow(1, 0, n).copy_(v.narrow(1, from, n));
      keep.push_back(kp);
      keep.push_back(vp);
      return DecodeAttentionRow{kp.data_ptr<float>(), vp.data_ptr<float>(), n, capacity};
    };
    spans.push_back(piece(0, cut1));
    spans.push_back(piece(cut1, cut2 - cut1));
    DecodeAttentionRow split = piece(cut2, length - cut2);
    split.shared = spans.data();
    split.shared_count = 2;
    const DecodeAttentionRow whole{k.data_ptr<float>(), v.data_ptr<float>(), length, length};
    at::Tensor a = at::empty({1, heads, d}), b = at::empty({1, heads, d});
    DecodeAttentionCpu(q.data_ptr<float>(), &whole, 1, heads, d, a.data_ptr<float>());
    DecodeAttentionCpu(q.data_ptr<float>(), &split, 1, heads, d, b.data_ptr<float>());
    EXPECT_TRUE(at::equal(a, b)) << "trial " << trial;
  }
}

// bfloat16 caches (--kv_cache_precision=bf16): the kernel widens each element exactly, so it
// matches float64 attention over the bfloat16 values; with shared spans (d 16-aligned and not,
// head dims the kernel inlines and others) too. And a float32 cache holding the same
// (bfloat16-exact) values gives the same results up to how the compiler contracts the products
// of each loop (the loads differ).
TEST(DecodeAttentionTest, Bfloat16CachesMatchFloat64OverTheirValues) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t heads = 1 + rng() % 4, d = std::vector<int64_t>{8, 17, 40, 64, 128}[rng() % 5];
    const int64_t length = 3 + rng() % 400, capacity = length + rng() % 20;
    const at::Tensor q = RandomTensor({1, heads, d}, 80 + trial);
    const at::Tensor k16 = RandomTensor({heads, capacity, d}, 90 + trial).to(at::kBFloat16);
    const at::Tensor v16 = RandomTensor({heads, capacity, d}, 95 + trial).to(at::kBFloat16);
    const int64_t cut = 1 + rng() % (length - 1);
    // The first `cut` positions in a span of their own (a shared prefix), the rest after it.
    const at::Tensor k_span = k16.narrow(1, 0, cut).contiguous();
    const at::Tensor v_span = v16.narrow(1, 0, cut).contiguous();
    const at::Tensor k_own = k16.narrow(1, cut, capacity - cut).contiguous();
    const at::Tensor v_own = v16.narrow(1, cut, capacity - cut).contiguous();
    auto bits = [](const at::Tensor& t) {
      return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
    };
    DecodeAttentionRow span;
    span.k_bf16 = bits(k_span);
    span.v_bf16 = bits(v_span);
    span.length = span.capacity = cut;
    DecodeAttentionRow row;
    row.k_bf16 = bits(k_own);
    row.v_bf16 = bits(v_own);
    row.length = length - cut;
    row.capacity = capacity - cut;
    row.shared = &span;
    row.shared_count = 1;
    at::Tensor out = at::full({1, heads, d}, std::nanf(""));
    DecodeAttentionCpu(q.data_ptr<float>(), &row, 1, heads, d, out.data_ptr<float>());
    const at::Tensor k = k16.narrow(1, 0, length).to(at::kDouble);
    const at::Tensor v = v16.narrow(1, 0, length).to(at::kDouble);
    const at::Tensor scores =
        at::matmul(q[0].to(at::kDouble).unsqueeze(1), k.transpose(1, 2)) / std::sqrt(d * 1.0);
    const at::Tensor want = at::matmul(at::softmax(scores, -1), v).squeeze(1);
    EXPECT_LE(MaxRelativeError(out[0], want), 1e-5) << "trial " << trial << " d " << d;

    const at::Tensor k32 = k16.to(at::kFloat), v32 = v16.to(at::kFloat);
    DecodeAttentionRow span32{k32.data_ptr<float>(), v32.data_ptr<float>(), cut, capacity};
    const at::Tensor k32_own = k32.narrow(1, cut, capacity - cut).contiguous();
    const at::Tensor v32_own = v32.narrow(1, cut, capacity - cut).contiguous();
    DecodeAttentionRow row32{k32_own.data_ptr<float>(), v32_own.data_ptr<float>(), length - cut,
                             capacity - cut};
    row32.shared = &span32;
    row32.shared_count = 1;
    at::Tensor out32 = at::empty({1, heads, d});
    DecodeAttentionCpu(q.data_ptr<float>(), &row32, 1, heads, d, out32.data_ptr<float>());
    EXPECT_LE(MaxRelativeError(out, out32), 1e-6) << "trial " << trial << " d " << d;
  }
}

TEST(LinearDecodeTest, RowsUpdatedInPlaceMatchFloat64) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t batch = 1 + rng() % 6, heads = 1 + rng() % 4;
    const int64_t d = std::vector<int64_t>{8, 17, 32, 64}[rng() % 4];
    const at::Tensor q = RandomTensor({batch, heads, d}, 20 + trial);
    const at::Tensor k = RandomTensor({batch, heads, d}, 30 + trial);
    const at::Tensor v = RandomTensor({batch, heads, d}, 40 + trial);
    std::vector<at::Tensor> s, z, s0, z0;
    std::vector<LinearDecodeRow> rows;
    for (int64_t b = 0; b < batch; ++b) {
      s.push_back(RandomTensor({heads, d, d}, 200 + b).abs());  // a state some tokens built
      z.push_back(RandomTensor({heads, d}, 300 + b).abs() + 1);
      s0.push_back(s.back().to(at::kDouble));
      z0.push_back(z.back().to(at::kDouble));
      rows.push_back({s.back().data_ptr<float>(), z.back().data_ptr<float>()});
    }
    at::Tensor out = at::full({batch, heads, d}, std::nanf(""));
    LinearAttentionDecodeCpu(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                             rows.data(), batch, heads, d, out.data_ptr<float>());
    for (int64_t b = 0; b < batch; ++b) {
      const at::Tensor fq = at::elu(q[b].to(at::kDouble)) + 1;
      const at::Tensor fk = at::elu(k[b].to(at::kDouble)) + 1;
      const at::Tensor s1 = s0[b] + fk.unsqueeze(-1) * v[b].to(at::kDouble).unsqueeze(-2);
      const at::Tensor z1 = z0[b] + fk;
      const at::Tensor want =
          at::matmul(fq.unsqueeze(1), s1).squeeze(1) / ((fq * z1).sum(-1, true) + 1e-6);
      EXPECT_LE(MaxRelativeError(out[b], want), 1e-5) << "trial " << trial << " row " << b;
      EXPECT_LE(MaxRelativeError(s[b], s1), 1e-6);
      EXPECT_LE(MaxRelativeError(z[b], z1), 1e-6);
    }
  }
}

}  // namespace
}  // namespace attnserve::kernels
