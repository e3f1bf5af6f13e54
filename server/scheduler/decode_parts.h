// Data-parallel decode: how the scheduler cuts a batched decode step into parts (one per kernel
// thread, each a whole Model::StepBatch of its own rows on one thread). Header-only: the step
// bench (bench/step_bench.cc) applies the same rule.
#pragma once

#include <cstdint>

namespace attnserve::server::scheduler {

// The default of --decode_split_max_bytes_per_row.
inline constexpr int64_t kDefaultDecodeSplitMaxBytesPerRow = int64_t{4} << 20;

// How many parts (Model::StepBatch's `parts`) a decode step of `rows` rows of a model whose
// decode step reads `weight_bytes` runs in on `threads` kernel threads: one a thread when the
// weights over the rows of a part are at most `max_bytes_per_row`, else 1 (every product split
// across the threads). Each part reads all the weights: the re-read is worth it while a part
// does enough rows' arithmetic on each weight byte, and the barriers it saves matter most for
// small models (at width 256 a step is ~75 parallel regions of a few µs each, and the threads'
// waiting at them was a third of the server's CPU a token). Measured in docs/benchmarks.md
// (issue #25), step time with two parts against one: the 10-15 MB default models
// 10-66% less from 8 rows; mamba-130m int8 (129 MB) 9% less at 64 rows (4 MB a row of a part),
// 4% less at 16; bf16 (258 MB) even; float32 (516 MB) 13-29% more at 16 and 64 rows.
inline int DecodeParts(int64_t rows, int threads, int64_t weight_bytes, int64_t max_bytes_per_row) {
  if (threads < 2 || rows < threads) return 1;
  const int64_t rows_per_part = rows / threads;  // the smallest part's
  return weight_bytes <= max_bytes_per_row * rows_per_part ? threads : 1;
}

}  // namespace attnserve::server::scheduler
