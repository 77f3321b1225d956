"""The speech-LLM's small parts on their own: Qwen3-ASR's output header, shared KV blocks with
copy-on-write, and the checkpoint loader's refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from engine.cache import BlockPool, KVSpec
from engine.config import EngineConfig
from engine.errors import CheckpointError
from engine.families import resolve_family
from engine.models.speechllm.checkpoint import load_checkpoint
from engine.models.speechllm.rows import SharedBlocks
from engine.models.speechllm.runner import SpeechLLMRunner
from engine.models.speechllm.search import Hypothesis
from engine.types import DecodingOptions

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "speechllm"


@pytest.fixture(scope="module")
def qwen3() -> SpeechLLMRunner:
    return SpeechLLMRunner.from_config(EngineConfig(ckpt_dir=str(FIXTURES / "qwen3_asr"), service_mode="offline"))


def test_a_qwen3_header_is_cut_and_names_the_language(qwen3: SpeechLLMRunner) -> None:
    tok = qwen3.tokenizer
    header = tok.encode("language German")
    body = tok.encode(" montreal forced aligner")
    assert qwen3.asr_text is not None
    eos = min(qwen3.eos)
    hyp = Hypothesis([*header, qwen3.asr_text, *body, eos], [-0.1] * (len(header) + len(body) + 2), -1.0)
    tokens, logprobs, language = qwen3._transcript(hyp, DecodingOptions())
    assert tokens == body and len(logprobs) == len(body) and language == "de"
    assert tok.decode(tokens) == " montreal forced aligner"
    # while the header is being written a partial shows nothing; a finished output without one is all text
    unfinished = Hypothesis(header, [-0.1] * len(header), -1.0)
    assert qwen3._transcript(unfinished, DecodingOptions(), finished=False) == ([], [], None)
    assert qwen3._transcript(unfinished, DecodingOptions())[0] == header
    # a forced language's header is in the prompt: everything generated is transcript
    assert qwen3._transcript(hyp, DecodingOptions(language="de"))[0] == [*header, qwen3.asr_text, *body]


def test_forked_rows_share_blocks_and_copy_one_before_writing_into_it() -> None:
    spec = KVSpec(num_layers=1, num_heads=1, head_dim=2, dtype=torch.float32)
    pool = BlockPool(spec, num_blocks=8, block_size=4, device=torch.device("cpu"))
    blocks = SharedBlocks(pool)
    table = blocks.allocate(6)  # positions 0..5: one full block, one partly written
    assert table is not None and len(table) == 2 and blocks.used == 2
    pool.k[0, blocks.slots(table, 6)] = torch.arange(6.0)[:, None, None].expand(6, 1, 2)
    beam = blocks.fork(table)
    assert blocks.used == 2  # shared, not copied
    slot = blocks.make_writable(beam, 6)  # position 6 lies in the shared partial block: copied first
    assert beam[0] == table[0] and beam[1] != table[1] and blocks.used == 3
    assert torch.equal(pool.k[0, blocks.slots(beam, 6)], pool.k[0, blocks.slots(table, 6)])
    pool.k[0, slot] = 99.0
    assert 99.0 not in pool.k[0, blocks.slots(table, 7)]  # the original row never sees the beam's write
    assert blocks.make_writable(beam, 7) == slot + 1  # its own block now: no more copies
    blocks.release(table)
    blocks.release(beam)
    assert blocks.used == 0 and all(r == 0 for r in blocks.refs)


def test_checkpoints_are_detected_and_broken_ones_refused_by_name(tmp_path: Path) -> None:
    for model in ("qwen2_audio", "qwen3_asr"):
        assert resolve_family(str(FIXTURES / model)).name == "speechllm"
    broken = tmp_path / "broken"
    shutil.copytree(FIXTURES / "qwen2_audio", broken)
    config = json.loads((broken / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 3
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"lacks decoder\.layers\.2"):
        load_checkpoint(str(broken), torch.device("cpu"), torch.float32)
    config["text_config"]["num_hidden_layers"] = 2
    config["text_config"]["hidden_size"] = 32
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="shape"):
        load_checkpoint(str(broken), torch.device("cpu"), torch.float32)


def test_a_qwen3_prompt_always_has_the_system_turn_and_the_request_s_prompt_is_its_context() -> None:
    from engine.models.speechllm.prompt import QWEN3_AUDIO_PAD, Qwen3ASRPrompt

    # what the published Qwen/Qwen3-ASR-0.6B-hf processor renders for a user-only chat (Transformers'
    # test_processing_qwen3_asr.py::test_chat_template)
    hub = ("<|im_start|>system\n<|im_end|>\n<|im_start|>user\n"
           "<|audio_start|><|audio_pad|><|audio_end|><|im_end|>\n<|im_start|>assistant\n")
    before, after = Qwen3ASRPrompt.from_options(DecodingOptions()).render()
    assert before + QWEN3_AUDIO_PAD + after == hub
    before, after = Qwen3ASRPrompt.from_options(DecodingOptions(prompt="Hotwords: OASR", language="de")).render()
    assert before.startswith("<|im_start|>system\nHotwords: OASR<|im_end|>\n")
    assert after.endswith("<|im_start|>assistant\nlanguage German<asr_text>")
