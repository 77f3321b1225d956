// Paged attention: a batch of stream chunks attends over the K/V each stream holds in the block
// pool (engine/cache/block_pool.py) through its block table, then over the chunk's own K/V,
// without gathering a dense copy of anyone's history.
//
//   scores[b,h,i,j] = (query[b,i,h] . key_j + score_bias[b,h,i,j]) * scale
//   out[b,i,h]      = softmax_j(scores) . value_j
//
// Keys j of row b: its context frames 0..context_lens[b]-1, frame p at pool slot
// block_table[b][(context_start[b] + p) / block_size] * block_size + (context_start[b] + p) % block_size,
// then its chunk frames 0..chunk_lens[b]-1 from `key`/`value`. score_bias (B, H, C, Tc + C) is laid
// out like the dense reference: context key p at column p, chunk key c at column Tc + c.
#pragma once

#include "common.h"

namespace oasr::paged {

struct Args {
  at::Tensor query, key, value, key_pool, value_pool, block_table, context_start, context_lens, chunk_lens;
  c10::optional<at::Tensor> score_bias;
  double scale;
  int64_t block_size;
};

// Shapes, dtypes, devices and every index the kernels will follow (the small index tensors are
// read on the host). Throws RuntimeError naming the argument.
void check_args(const Args& a);

// A checked call's inputs, contiguous, and its output.
struct Launch {
  at::Tensor q, k, v, key_pool, value_pool, block_table, context_start, context_lens, chunk_lens, bias, out;
  double scale;
  int64_t block_size;
};

#if OASR_WITH_CUDA
// paged_attention.cu: one thread block per (row, head, tile of queries).
void launch_cuda(const Launch& l);
#endif

}  // namespace oasr::paged
