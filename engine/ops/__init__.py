"""The engine's hot loops as operators: compiled kernels (`engine._C`, torch.ops.oasr.*) with
their Python references.

| entry point | reference | used by |
|---|---|---|
| `ctc_prefix_beam_search` (+ `ContextTrie` keyword biasing) | `ctc_prefix_beam_search_reference` | WeNet CTC beam, CTC heads |
| `paged_attention` | `paged_attention_reference` | WeNet streaming attention over the block pool |
| `kaldi_fbank` (CUDA; CPU twin for tests) | `kaldi_fbank_reference` (engine/fbank.py) | `KaldiFbank` on CUDA devices |
| `rnnt_greedy_label_loop` (`TransducerWeights`) | `rnnt_greedy_label_loop_reference` | NeMo transducer greedy decoding |
| `dtw_path` | `dtw_path_reference` | Whisper word timestamps (every live pass) |
| `half_kv_attention` (float16 or packed int8 K/V) | `half_kv_attention_reference` | Whisper decoder cross-attention (CPU int8 path) |
| `pack_int8_rows` (int8_kv.py) | `pack_int8_rows_reference` | Whisper cross K/V packing at prefill (CPU int8 path) |

Transducer beam searches run in Python only (90 %+ of their time is the prediction network and
joint over the hypotheses, measured in benchmarks/records/history.md): `malsd.malsd_search` (NeMo's
malsd_batch) and `modified_beam.modified_beam_search` (icefall's), over the `TransducerNet` seam
of `transducer_beam`, with keyword biasing by `context_graph.ContextGraph`.

Each entry point runs the compiled kernel when `engine._C` is loaded (`extension_status()`),
the reference otherwise; `use_extension=` forces one. The references are what the kernels are
tested against (tests/engine/ops).
"""

from engine.ops.context_biasing import DEFAULT_BOOST, ContextTrie
from engine.ops.ctc_beam import BeamState, ctc_prefix_beam_search, ctc_prefix_beam_search_reference
from engine.ops.ctc_reference import Hypothesis
from engine.ops.extension import DISABLE_ENV, ExtensionStatus, extension_loaded, extension_status
from engine.ops.fbank import kaldi_fbank, kaldi_fbank_batched, kaldi_fbank_reference
from engine.ops.paged_attention import paged_attention, paged_attention_reference
from engine.ops.rnnt import (
    GreedyOutput,
    TransducerDecodeState,
    TransducerWeights,
    rnnt_greedy_label_loop,
    rnnt_greedy_label_loop_reference,
)

__all__ = [
    "DEFAULT_BOOST",
    "DISABLE_ENV",
    "BeamState",
    "ContextTrie",
    "ExtensionStatus",
    "GreedyOutput",
    "Hypothesis",
    "TransducerDecodeState",
    "TransducerWeights",
    "ctc_prefix_beam_search",
    "ctc_prefix_beam_search_reference",
    "extension_loaded",
    "extension_status",
    "kaldi_fbank",
    "kaldi_fbank_batched",
    "kaldi_fbank_reference",
    "paged_attention",
    "paged_attention_reference",
    "rnnt_greedy_label_loop",
    "rnnt_greedy_label_loop_reference",
]
