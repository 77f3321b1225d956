"""Shape-only (fake) implementations of the compiled operators, so `torch.compile` and
FakeTensor tracing can see through them. Registered by the loader once `engine._C` is loaded."""

from __future__ import annotations

import torch

_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    _registered = True

    @torch.library.register_fake("oasr::ctc_prefix_beam_search")
    def _ctc_prefix_beam_search(
        log_probs: torch.Tensor, lengths: torch.Tensor, frame_offset: torch.Tensor, num_hyps: torch.Tensor,
        hyp_tokens: torch.Tensor, hyp_frames: torch.Tensor, hyp_token_logprobs: torch.Tensor,
        hyp_lengths: torch.Tensor, hyp_scores: torch.Tensor, hyp_context: torch.Tensor, beam: int, blank: int,
        trie_nodes: torch.Tensor | None = None, trie_edges: torch.Tensor | None = None,
        trie_scores: torch.Tensor | None = None, trie_roots: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:  # fmt: skip
        b, t = log_probs.shape[0], log_probs.shape[1]
        cap = hyp_tokens.shape[2] + t
        return (
            num_hyps.new_empty(b), hyp_tokens.new_empty(b, beam, cap), hyp_frames.new_empty(b, beam, cap),
            hyp_token_logprobs.new_empty(b, beam, cap), hyp_lengths.new_empty(b, beam),
            hyp_scores.new_empty(b, beam, 3), hyp_context.new_empty(b, beam),
        )  # fmt: skip

    @torch.library.register_fake("oasr::paged_attention")
    def _paged_attention(
        query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_pool: torch.Tensor,
        value_pool: torch.Tensor, block_table: torch.Tensor, context_start: torch.Tensor,
        context_lens: torch.Tensor, chunk_lens: torch.Tensor, score_bias: torch.Tensor | None, scale: float,
        block_size: int,
    ) -> torch.Tensor:  # fmt: skip
        return query.new_empty(query.shape)

    @torch.library.register_fake("oasr::kaldi_fbank")
    def _kaldi_fbank(
        waveform: torch.Tensor, frame_starts: torch.Tensor, window: torch.Tensor, mel_banks: torch.Tensor,
        twiddle: torch.Tensor, preemph: float,
    ) -> torch.Tensor:  # fmt: skip
        return waveform.new_empty(frame_starts.shape[0], mel_banks.shape[1])

    @torch.library.register_fake("oasr::rnnt_greedy_label_loop")
    def _rnnt_greedy_label_loop(
        f: torch.Tensor, lengths: torch.Tensor, h: torch.Tensor, c: torch.Tensor, pred: torch.Tensor,
        time_jump: torch.Tensor, frames_decoded: torch.Tensor, embed: torch.Tensor, lstm: list[torch.Tensor],
        pred_weight: torch.Tensor, pred_bias: torch.Tensor, out_weight: torch.Tensor, out_bias: torch.Tensor,
        durations: torch.Tensor, activation: str, max_symbols: int,
    ) -> tuple[torch.Tensor, ...]:  # fmt: skip
        b = f.shape[0]
        emitted = torch.library.get_ctx().new_dynamic_size()  # the longest row's label count
        return (
            lengths.new_empty(b, emitted), lengths.new_empty(b, emitted),
            f.new_empty(b, emitted, dtype=torch.float32), lengths.new_empty(b), h.new_empty(h.shape),
            c.new_empty(c.shape), pred.new_empty(pred.shape), lengths.new_empty(b), lengths.new_empty(b),
        )  # fmt: skip

    @torch.library.register_fake("oasr::quantize_rows")
    def _quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.new_empty(x.shape, dtype=torch.int8), x.new_empty(x.shape[0], 1)

    @torch.library.register_fake("oasr::quantize_rows_u8")
    def _quantize_rows_u8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.new_empty(x.shape, dtype=torch.uint8), x.new_empty(x.shape[0], 1)

    @torch.library.register_fake("oasr::dequantize_rows")
    def _dequantize_rows(acc: torch.Tensor, row_scale: torch.Tensor, col_scale: torch.Tensor,
                         bias: torch.Tensor | None = None) -> torch.Tensor:
        return acc.new_empty(acc.shape, dtype=torch.float32)

    @torch.library.register_fake("oasr::int8_linear_rows")
    def _int8_linear_rows(x: torch.Tensor, w_packed: torch.Tensor, w_offsets: torch.Tensor, col_scale: torch.Tensor,
                          bias: torch.Tensor | None = None) -> torch.Tensor:
        return x.new_empty(x.shape[0], w_packed.shape[1])

    @torch.library.register_fake("oasr::pack_int8_rows_weight")
    def _pack_int8_rows_weight(weight: torch.Tensor) -> torch.Tensor:
        return weight.new_empty(weight.shape[1] // 4, weight.shape[0], 4)

    @torch.library.register_fake("oasr::pack_int8_kv")
    def _pack_int8_kv(x: torch.Tensor) -> torch.Tensor:
        return x.new_empty(*x.shape[:-1], x.shape[-1] + 4, dtype=torch.int8)

    @torch.library.register_fake("oasr::dequantize_pack_kv")
    def _dequantize_pack_kv(acc: torch.Tensor, row_scale: torch.Tensor, col_scale: torch.Tensor,
                            bias: torch.Tensor | None, batch: int, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (batch, heads, acc.shape[0] // batch, acc.shape[1] // (2 * heads) + 4)
        return acc.new_empty(shape, dtype=torch.int8), acc.new_empty(shape, dtype=torch.int8)

    @torch.library.register_fake("oasr::half_kv_attention")
    def _half_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
                           scale: float, k_tail: torch.Tensor | None = None,
                           v_tail: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return q.new_empty(q.shape), q.new_empty(q.shape[:-1])

    @torch.library.register_fake("oasr::dtw_path")
    def _dtw_path(cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        steps = torch.library.get_ctx().new_dynamic_size()  # between max(n, m) and n + m - 1 cells
        return cost.new_empty(steps, dtype=torch.long), cost.new_empty(steps, dtype=torch.long)
