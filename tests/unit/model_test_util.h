// Checks a Model's streaming paths against its whole-sequence pass (server/model/model.h).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "server/model/model.h"
#include "tests/unit/test_util.h"

namespace attnserve::model {

// Three sequences of `length` tokens: each prefilled in two chunks (`first` tokens, then up to
// `steps` before the end) = the whole pass; then the steps batched = the whole pass, and
// row `alone` stepped by itself = its batched row, bit for bit.
inline void ExpectChunksStepsAndBatchedRowsEqualWholePass(const Model& m, int64_t vocab,
                                                          int64_t length, int64_t first,
                                                          int64_t steps, int64_t alone) {
  const at::Tensor tokens = at::randint(0, vocab, {3, length}, at::kLong);
  const at::Tensor whole = *m.Forward(tokens, nullptr, OutputKind::kAllLogits);
  const int64_t prefilled = length - steps;
  std::vector<ModelState> states;
  for (int64_t b = 0; b < 3; ++b) {
    states.push_back(*m.NewState());
    auto a =
        m.Forward(tokens.narrow(0, b, 1).narrow(1, 0, first), &states[b], OutputKind::kAllLogits);
    ASSERT_TRUE(a.ok()) << a.status();
    auto rest = m.Forward(tokens.narrow(0, b, 1).narrow(1, first, prefilled - first), &states[b],
                          OutputKind::kAllLogits);
    ASSERT_TRUE(rest.ok());
    EXPECT_LE(testing::MaxRelativeError(at::cat({*a, *rest}, 1),
                                        whole.narrow(0, b, 1).narrow(1, 0, prefilled)),
              1e-5);
  }
  for (int64_t t = prefilled; t < length; ++t) {
    ModelState single_state = states[alone].Clone();
    std::vector<int64_t> ids;
    std::vector<ModelState*> ptrs;
    for (int64_t b = 0; b < 3; ++b) {
      ids.push_back(tokens[b][t].item<int64_t>());
      ptrs.push_back(&states[b]);
    }
    auto batch = m.StepBatch(ids, ptrs);
    ASSERT_TRUE(batch.ok()) << batch.status();
    auto single = m.StepBatch({ids[alone]}, {&single_state});
    ASSERT_TRUE(single.ok());
    EXPECT_TRUE(at::equal(*single, batch->narrow(0, alone, 1))) << t;
    EXPECT_LE(testing::MaxRelativeError(*batch, whole.select(1, t)), 1e-5) << "step " << t;
  }
}

}  // namespace attnserve::model
