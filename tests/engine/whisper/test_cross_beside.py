"""A window's decoder cross K/V projected on the encoder thread (encoder_thread.py) are what its
prefill would have projected, bit for bit, where the projection is exact (int8); a float model
keeps projecting them in the prefill."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tests.conftest import Clip, wer


@pytest.fixture(scope="module")
def int8_parts() -> Any:
    from engine import EngineConfig
    from engine.models.whisper.parts import WhisperParts

    return WhisperParts.load(EngineConfig(quantization="int8_w8a8"))


def _features(parts: Any, lengths: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Encoder outputs (G, 1500, C) of `lengths` seconds of noise each (own positions: 50 a second)."""
    gen = torch.Generator().manual_seed(3)
    mels = [parts.features([np.asarray(torch.randn(16000 * n, generator=gen) * 0.05)])[0] for n in lengths]
    with torch.inference_mode():
        feats = parts.context.encode(mels)
    return torch.stack(feats), [int(m.shape[1]) // 2 for m in mels]


def test_cross_kv_projected_beside_are_bitwise_the_prefills(int8_parts: Any) -> None:
    decoder = int8_parts.model.decoder
    assert decoder.projects_cross_exactly
    feats, positions = _features(int8_parts, [3, 5, 3, 8])
    silence = int8_parts.context.silence_kv(feats[0])
    with torch.inference_mode():
        expected = decoder.new_cache(feats, capacity=4, audio_positions=positions, silence=silence)
        beside = [decoder.project_cross(f, n) for f, n in zip(feats, positions)]
        for projected in (beside, [beside[0], None, None, beside[3]], [None, beside[1], beside[2], None]):
            got = decoder.new_cache(feats, capacity=4, audio_positions=positions, silence=silence,
                                    projected=projected)
            for layer in range(len(decoder.blocks)):
                for i, n in enumerate(positions):  # past its own positions an item's K/V are never read
                    assert torch.equal(got.cross_k[layer][i, :, :n], expected.cross_k[layer][i, :, :n])
                    assert torch.equal(got.cross_v[layer][i, :, :n], expected.cross_v[layer][i, :, :n])
                assert got.cross_k[layer].dtype == expected.cross_k[layer].dtype
                assert got.cross_k[layer].is_contiguous()
    # a wrong projection is seen: the check above can fail
    with torch.inference_mode():
        wrong = [(list(k), [_nudged(v_) for v_ in v]) for k, v in beside]
        got = decoder.new_cache(feats, capacity=4, audio_positions=positions, silence=silence, projected=wrong)
    assert not torch.equal(got.cross_v[0][0, :, : positions[0]], expected.cross_v[0][0, :, : positions[0]])


def test_packed_cross_kv_are_bitwise_the_layers_outputs_packed(int8_parts: Any) -> None:
    """The int8 path's cross K/V come packed straight from the fused projection's integer sums
    (cross_kv.project_stored): bitwise its outputs packed (`pack_int8_rows`)."""
    from engine.ops.int8_kv import pack_int8_rows

    decoder = int8_parts.model.decoder
    if decoder.cross_kv_dtype != torch.int8:
        pytest.skip("the compiled kernels are not loaded: the int8 path keeps float32 cross K/V")
    feats, positions = _features(int8_parts, [3, 5])
    with torch.inference_mode():
        ks, vs = decoder.project_cross(feats[1], positions[1])
        for layer, block in enumerate(decoder.blocks):
            k, v = block.cross_attn.project_kv(feats[1][None, : positions[1]])
            assert torch.equal(ks[layer], pack_int8_rows(k)) and torch.equal(vs[layer], pack_int8_rows(v))


def _nudged(stored: torch.Tensor) -> torch.Tensor:
    """Stored K/V (float16, or packed int8 rows) with one value of its first row one step off."""
    out = stored.clone()
    out[..., 0, 0] += 1
    return out


def test_a_float_model_projects_in_its_prefill() -> None:
    from engine import EngineConfig
    from engine.models.whisper.parts import WhisperParts

    parts = WhisperParts.load(EngineConfig(quantization="none"))
    assert not parts.model.decoder.projects_cross_exactly


def test_int8_streams_take_their_cross_kv_from_the_encoder_thread(clips: list[Clip],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Live streams on an int8 engine with the encoder thread: their windows' K/V come from the
    thread, every stream ends once with its text."""
    from engine import ASREngine, EngineConfig
    from engine.models.whisper.model import TextDecoder

    picked = [c for c in clips if c.text and 3.0 <= c.duration <= 8.0][:3]
    engine = ASREngine(EngineConfig(quantization="int8_w8a8", service_mode="streaming", num_threads=2))
    thread = engine.runner.encoder_thread
    assert thread is not None
    on_thread: list[int] = []
    project = TextDecoder.project_cross

    def counted(self: TextDecoder, features: torch.Tensor, positions: int) -> Any:
        on_thread.append(positions)
        return project(self, features, positions)

    monkeypatch.setattr(TextDecoder, "project_cross", counted)
    try:
        rids = [engine.add_streaming_request() for _ in picked]
        outputs: dict[str, list[Any]] = {rid: [] for rid in rids}
        step = 8000
        for off in range(0, max(c.audio.size for c in picked), step):
            for rid, clip in zip(rids, picked):
                if off < clip.audio.size:
                    engine.feed_chunk(rid, clip.audio[off : off + step], is_last=off + step >= clip.audio.size)
                    for out in engine.step():
                        outputs[out.request_id].append(out)
        while engine.has_work():
            for out in engine.step():
                outputs[out.request_id].append(out)
    finally:
        engine.shutdown()
    assert on_thread, "no window's cross K/V were projected on the encoder thread"
    finals = [[o for o in outputs[rid] if o.finished] for rid in rids]
    assert all(len(f) == 1 and f[0].finish_reason == "stop" for f in finals), finals
    assert wer([c.text or "" for c in picked], [f[0].text for f in finals]) <= 25.0
