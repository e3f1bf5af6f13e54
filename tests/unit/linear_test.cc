// kernels/common/linear.h and skinny_gemm.h: few-row products against float64 references,
// rows alone bit-identical to the same rows in a batch, and the sgemm path for many rows.
#include "kernels/common/linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "kernels/common/skinny_gemm.h"
#include "kernels/common/skinny_tiles.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using testing::Bf16Exact;
using testing::MaxRelativeError;
using testing::RandomTensor;

// x's shape with its last dimension `out`.
std::vector<int64_t> OutputShape(const at::Tensor& x, int64_t out) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out;
  return shape;
}

// y (rows, out) from the float32 kernel, on a poisoned output (every element must be written).
at::Tensor Skinny(const at::Tensor& w, const at::Tensor& x) {
  at::Tensor y = at::full({x.size(0), w.size(0)}, std::nanf(""));
  SkinnyGemmF32(w.data_ptr<float>(), w.size(0), w.size(1), x.data_ptr<float>(), x.stride(0),
                x.size(0), y.data_ptr<float>());
  return y;
}

TEST(SkinnyGemmTest, MatchesFloat64OnRaggedShapes) {
  uint64_t seed = 1;
  // Weight rows around the 4-row tiles, columns around the 16- and 32-element vectors, X rows
  // around the 4-row tiles up to the limit.
  for (int64_t out : {1, 3, 4, 5, 37, 1024}) {
    for (int64_t in : {1, 15, 16, 17, 33, 100, 768}) {
      for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{16}, kSkinnyGemmMaxRows}) {
        SCOPED_TRACE(::testing::Message() << out << " x " << in << ", " << rows << " rows");
        const at::Tensor w = RandomTensor({out, in}, seed++);
        const at::Tensor x = RandomTensor({rows, in}, seed++);
        const at::Tensor y = Skinny(w, x);
        const at::Tensor want = at::mm(x.to(at::kDouble), w.to(at::kDouble).t());
        EXPECT_FALSE(y.isnan().any().item<bool>());
        EXPECT_LE(MaxRelativeError(y, want), 1e-5);
      }
    }
  }
}

TEST(SkinnyGemmTest, EachRowIsBitIdenticalAloneAndInAnyBatch) {
  const at::Tensor w = Bf16Exact({203, 300}, 5);
  const at::Tensor x = RandomTensor({23, 300}, 6);
  const at::Tensor batch = Skinny(w, x);
  const at::Tensor tail = Skinny(w, x.narrow(0, 7, 9).contiguous());
  for (int64_t i = 0; i < x.size(0); ++i) {
    const at::Tensor alone = Skinny(w, x.narrow(0, i, 1).contiguous());
    EXPECT_TRUE(at::equal(alone[0], batch[i])) << "row " << i;
  }
  EXPECT_TRUE(at::equal(tail, batch.narrow(0, 7, 9)));
}

// The skinny products' work split: every tile exactly once, in ranges of at least the grain
// (but the last), whatever the thread count, and nothing for no tiles. A range's lane end (how
// far its caller may prefetch) lies between its end and the tile count.
TEST(SkinnyGemmTest, ParallelTilesVisitsEveryTileOnce) {
  const int threads = at::get_num_threads();
  for (int t : {1, 2, 3}) {
    at::set_num_threads(t);
    for (int64_t tiles : {0, 1, 7, 64, 1000, 12570}) {
      for (int64_t grain : {1, 5, 22, 5000}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(tiles));
        std::atomic<int> short_ranges{0}, bad_lane_ends{0};
        ParallelTileLanes(tiles, grain, [&](int64_t begin, int64_t end, int64_t lane_end) {
          if (end - begin < grain && end != tiles) ++short_ranges;
          if (lane_end < end || lane_end > tiles) ++bad_lane_ends;
          for (int64_t i = begin; i < end; ++i) ++seen[i];
        });
        for (int64_t i = 0; i < tiles; ++i) {
          ASSERT_EQ(seen[i].load(), 1) << t << " threads, " << tiles << " tiles, grain " << grain;
        }
        EXPECT_EQ(short_ranges.load(), 0);
        EXPECT_EQ(bad_lane_ends.load(), 0);
        ParallelTiles(tiles, grain, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) ++seen[i];
        });
        for (int64_t i = 0; i < tiles; ++i) ASSERT_EQ(seen[i].load(), 2) << "ParallelTiles";
      }
    }
  }
  at::set_num_threads(threads);
}

TEST(LinearTest, FewRowsEqualTheMatrixProductOnTheSameWeights) {
  const at::Tensor w = Bf16Exact({300, 200}, 7);
  for (int64_t rows : {int64_t{1}, int64_t{5}, kSkinnyGemmMaxRows, kSkinnyGemmMaxRows + 1}) {
    const at::Tensor x = RandomTensor({rows, 1, 200}, 8);
    for (bool bf16_copy : {false, true}) {
      SCOPED_TRACE(::testing::Message() << rows << " rows, bf16 copy " << bf16_copy);
      const LinearWeight linear(w, bf16_copy);
      const at::Tensor y = linear(x);
      ASSERT_EQ(y.sizes(), at::IntArrayRef({rows, 1, 300}));
      EXPECT_LE(MaxRelativeError(y, at::linear(x, w)), 1e-5);
      // A strided input (a narrowed view) gives the same rows.
      const at::Tensor wide = RandomTensor({rows, 400}, 9);
      EXPECT_LE(MaxRelativeError(linear(wide.narrow(1, 100, 200)),
                                 at::linear(wide.narrow(1, 100, 200), w)),
                1e-5);
    }
    EXPECT_LE(MaxRelativeError(Linear(x, w), at::linear(x, w)), 1e-5);
  }
}

// Linear(x, w) (a float32 tensor without a LinearWeight): steps (B, in) / (B, 1, in) stay on
// the skinny kernels up to kSkinnyGemmMaxRows (each row bit-identical alone), sequences
// (1, L, in) only up to kSkinnyGemmMaxSequenceRows; beyond that both are at::linear itself. A
// float32 LinearWeight gives every row, at every row count, the bits it has alone.
TEST(LinearTest, StepsAndSequencesChangeKernelsAtTheirOwnRowCounts) {
  const at::Tensor w = Bf16Exact({96, 64}, 11);
  const LinearWeight linear(w, /*bf16_copy=*/false);
  auto row_by_row = [&](const at::Tensor& x, bool panels) {
    const at::Tensor flat = x.reshape({-1, 64});
    std::vector<at::Tensor> rows;
    for (int64_t i = 0; i < flat.size(0); ++i) {
      rows.push_back(panels ? linear(flat.narrow(0, i, 1)) : Skinny(w, flat.narrow(0, i, 1)));
    }
    return at::cat(rows).view(OutputShape(x, 96));
  };
  for (int64_t rows : {kSkinnyGemmMaxSequenceRows, kSkinnyGemmMaxSequenceRows + 1,
                       kSkinnyGemmMaxRows, kSkinnyGemmMaxRows + 1, int64_t{200}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows");
    const at::Tensor x = RandomTensor({rows, 64}, 12 + rows);
    // The kernels sum in different orders, so the checks below tell them apart.
    ASSERT_FALSE(at::equal(row_by_row(x, false), at::linear(x, w)));
    ASSERT_FALSE(at::equal(row_by_row(x, true), at::linear(x, w)));
    for (const at::Tensor& step : {x, x.unsqueeze(1)}) {
      const at::Tensor want =
          rows <= kSkinnyGemmMaxRows ? row_by_row(step, false) : at::linear(step, w);
      EXPECT_TRUE(at::equal(Linear(step, w), want)) << "step " << step.sizes();
      EXPECT_TRUE(at::equal(linear(step), row_by_row(step, true))) << "step " << step.sizes();
    }
    const at::Tensor sequence = x.unsqueeze(0);
    const at::Tensor want =
        rows <= kSkinnyGemmMaxSequenceRows ? row_by_row(sequence, false) : at::linear(sequence, w);
    EXPECT_TRUE(at::equal(Linear(sequence, w), want));
    EXPECT_TRUE(at::equal(linear(sequence), row_by_row(sequence, true)));
  }
}

TEST(LinearTest, WrongFeatureCountIsAnErrorNotAWildRead) {
  const LinearWeight linear(Bf16Exact({8, 32}, 3), /*bf16_copy=*/true);
  EXPECT_THROW(linear(at::zeros({1, 31})), c10::Error);
  EXPECT_THROW(linear(at::zeros({4, 31})), c10::Error);
}

// A bfloat16 or int8 LinearWeight keeps only its own matrix and multiplies a long prefill chunk
// through its own kernels (panel_gemm_test.cc, int8_gemm_test.cc; here within float32's
// rounding, and the int8 one within its quantization of x); Float32Weight widens it back.
TEST(LinearTest, NarrowFormatsKeepOneMatrix) {
  const at::Tensor w = Bf16Exact({2500, 64}, 21);  // blocks of 1024 rows: 1024, 1024, 452
  const at::Tensor x = RandomTensor({2, 40, 64}, 22);
  const LinearWeight fp32(w, WeightFormat::kFloat32), bf16(w, WeightFormat::kBfloat16),
      int8(w, WeightFormat::kInt8);
  EXPECT_EQ(fp32.Bytes(), 2528 * 64 * 4);  // float32 panels
  EXPECT_EQ(bf16.Bytes(), 2528 * 64 * 2);  // panels of 32 rows (panel_gemm.h): 79 of them
  // int8 panels of 16 rows (157 of them) and a float32 scale per 32
  EXPECT_EQ(int8.Bytes(), 2512 * 64 + 2512 * 2 * 4);
  EXPECT_TRUE(at::equal(fp32.Float32Weight(), w));  // unpacked from the panels
  EXPECT_TRUE(at::equal(bf16.Float32Weight(), w));  // bfloat16-exact values widen exactly
  EXPECT_LE(MaxRelativeError(int8.Float32Weight(), w), 1e-2);
  for (const LinearWeight* linear : {&fp32, &bf16, &int8}) {
    EXPECT_EQ(linear->out_features(), 2500);
    EXPECT_EQ(linear->in_features(), 64);
    const at::Tensor y = (*linear)(x);
    ASSERT_EQ(y.sizes(), at::IntArrayRef({2, 40, 2500}));
    EXPECT_LE(MaxRelativeError(y, at::linear(x, linear->Float32Weight())),
              linear == &int8 ? 2e-2 : 1e-6);
  }
  EXPECT_THROW(bf16(at::zeros({2, 40, 63})), c10::Error);
  // Rows: an embedding lookup in the kept matrix, exact for float32 and bfloat16.
  const at::Tensor ids = at::tensor({0, 2499, 7, 7}, at::kLong).view({2, 2});
  EXPECT_TRUE(at::equal(fp32.Rows(ids), at::embedding(w, ids)));
  EXPECT_TRUE(at::equal(bf16.Rows(ids), at::embedding(w, ids)));
  EXPECT_THROW(int8.Rows(ids), c10::Error);
}

}  // namespace
}  // namespace attnserve::kernels
