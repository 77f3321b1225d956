// The `oasr` operator library: every schema in one place, and the Python module `engine._C`
// whose import loads this shared object (kernels register from their own files with
// TORCH_LIBRARY_IMPL). No pybind11: the operators are reached through torch.ops.oasr.*.
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(oasr, m) {
  // CTC prefix beam search over a batch of rows, resumable chunk by chunk: the hypotheses of the
  // previous call come in, the new ones go out (see engine/ops/ctc_beam.py for the layout).
  m.def(
      "ctc_prefix_beam_search(Tensor log_probs, Tensor lengths, Tensor frame_offset, Tensor num_hyps, "
      "Tensor hyp_tokens, Tensor hyp_frames, Tensor hyp_token_logprobs, Tensor hyp_lengths, "
      "Tensor hyp_scores, Tensor hyp_context, int beam, int blank, Tensor? trie_nodes=None, "
      "Tensor? trie_edges=None, Tensor? trie_scores=None, Tensor? trie_roots=None) -> "
      "(Tensor num_hyps, Tensor hyp_tokens, Tensor hyp_frames, Tensor hyp_token_logprobs, "
      "Tensor hyp_lengths, Tensor hyp_scores, Tensor hyp_context)");
  // Attention of a batch of stream chunks over K/V held in the block pool through block tables
  // (engine/ops/paged_attention.py).
  m.def(
      "paged_attention(Tensor query, Tensor key, Tensor value, Tensor key_pool, Tensor value_pool, "
      "Tensor block_table, Tensor context_start, Tensor context_lens, Tensor chunk_lens, "
      "Tensor? score_bias, float scale, int block_size) -> Tensor");
  // Kaldi log-mel filterbank of frames cut from one concatenated waveform (engine/ops/fbank.py).
  m.def(
      "kaldi_fbank(Tensor waveform, Tensor frame_starts, Tensor window, Tensor mel_banks, Tensor twiddle, "
      "float preemph) -> Tensor");
  // Batched greedy RNN-T / TDT decoding by label looping (engine/ops/rnnt.py): projected encoder
  // frames and the decoding state in; emitted tokens (padded) and the next state out.
  m.def(
      "rnnt_greedy_label_loop(Tensor f, Tensor lengths, Tensor h, Tensor c, Tensor pred, Tensor time_jump, "
      "Tensor frames_decoded, Tensor embed, Tensor[] lstm, Tensor pred_weight, Tensor pred_bias, "
      "Tensor out_weight, Tensor out_bias, Tensor durations, str activation, int max_symbols) -> "
      "(Tensor tokens, Tensor frames, Tensor logprobs, Tensor counts, Tensor h, Tensor c, Tensor pred, "
      "Tensor time_jump, Tensor frames_decoded)");
  // Row-wise int8 quantisation of activations and the dequantisation of an int32 (or exact float32) GEMM's output
  // (engine/ops/int8_rows.py): one pass each.
  m.def("quantize_rows(Tensor x) -> (Tensor q, Tensor scale)");
  m.def("quantize_rows_u8(Tensor x) -> (Tensor q, Tensor scale)");  // q + 128, for AMX int8
  m.def("dequantize_rows(Tensor acc, Tensor row_scale, Tensor col_scale, Tensor? bias=None) -> Tensor");
  // A whole int8 linear layer for a few rows on AVX-512 VNNI (quantize, exact integer sums,
  // dequantize in one call), bitwise the three above around an int8 GEMM; its weight packing.
  m.def("int8_linear_rows(Tensor x, Tensor w_packed, Tensor w_offsets, Tensor col_scale, Tensor? bias=None) -> Tensor");
  m.def("pack_int8_rows_weight(Tensor weight) -> Tensor");
  // Monotonic DTW path through a (text, time) cost matrix: Whisper's word timestamps
  // (engine/ops/dtw.py).
  m.def("dtw_path(Tensor cost) -> (Tensor text_idx, Tensor time_idx)");
  // Rows of float32 keys or values as int8 with a float32 scale each (engine/ops/int8_kv.py).
  m.def("pack_int8_kv(Tensor x) -> Tensor");
  // ... and those of a fused key-value int8 projection straight from its integer sums.
  m.def("dequantize_pack_kv(Tensor acc, Tensor row_scale, Tensor col_scale, Tensor? bias, int batch, int heads) "
        "-> (Tensor k, Tensor v)");
  // Attention of float32 queries over float16 (or packed int8) keys and values and its
  // log-sum-exp: Whisper's decoder cross-attention on a CPU (engine/ops/half_kv_attention.py).
  m.def(
      "half_kv_attention(Tensor q, Tensor k, Tensor v, Tensor lengths, float scale, Tensor? k_tail=None, "
      "Tensor? v_tail=None) -> (Tensor out, Tensor lse)");
}

namespace {
PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "OASR custom operators (torch.ops.oasr)", -1,
                          nullptr};
}

PyMODINIT_FUNC PyInit__C(void) {
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr && PyModule_AddIntConstant(module, "WITH_CUDA", OASR_WITH_CUDA) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
