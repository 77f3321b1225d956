"""Bad input is refused with a clear error at the API, and a fault inside a batch only fails
the request that caused it; everything else in the batch still transcribes."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from engine import DecodingOptions, InvalidRequestError, UnknownRequestError, UnsupportedError
from tests.conftest import Clip

GOOD = ("libri_61-70968-0000", "mfa_thoughts", "ps_cards_002")


def _run_until_done(engine: Any, rids: list[str], max_steps: int = 2000) -> dict[str, Any]:
    """Step the engine until every id in `rids` reported a finished output."""
    done: dict[str, Any] = {}
    for _ in range(max_steps):
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
        if all(r in done for r in rids):
            return done
    raise AssertionError(f"requests {set(rids) - set(done)} did not finish in {max_steps} steps")


@pytest.fixture
def good(clips: list[Clip]) -> list[Clip]:
    by_id = {c.id: c for c in clips}
    return [by_id[i] for i in GOOD]


@pytest.fixture
def isolated_engine(engine: Any) -> Iterator[Any]:
    """The shared engine, checked to be idle before and after (these tests step it by hand)."""
    assert not engine.has_unfinished()
    yield engine
    assert not engine.has_unfinished()
    assert engine.num_running == 0 and engine.num_waiting == 0


_AUDIO = np.full(16000, 0.01, dtype=np.float32)


@pytest.mark.parametrize(
    ("audio", "kwargs", "message"),
    [
        (np.zeros(0, dtype=np.float32), {}, "empty"),
        (np.array([0.0, math.nan, 0.1] * 100, dtype=np.float32), {}, "NaN or infinite"),
        (np.array([0.0, math.inf] * 100, dtype=np.float32), {}, "NaN or infinite"),
        (_AUDIO, {"sample_rate": 8000}, "16000 Hz"),
        ((_AUDIO * 32767).astype(np.int16), {}, "dtype int16"),
        (np.stack([_AUDIO, _AUDIO]), {}, "mono"),
        ([0.0] * 1600, {}, "numpy"),
    ],
    ids=["empty", "nan", "inf", "rate-8k", "int16", "2-d", "list"],
)
def test_bad_audio_is_refused_and_batch_mates_succeed(
    isolated_engine: Any, good: list[Clip], greedy_alone: dict[str, Any], audio: Any, kwargs: dict[str, Any],
    message: str,
) -> None:
    engine = isolated_engine
    first = engine.add_request(good[0].audio)
    with pytest.raises(InvalidRequestError, match=message):
        engine.add_request(audio, **kwargs)
    second = engine.add_request(good[1].audio)
    done = _run_until_done(engine, [first, second])
    assert done[first].text == greedy_alone[good[0].id].text
    assert done[second].text == greedy_alone[good[1].id].text


def test_a_torch_tensor_and_float64_audio_are_converted(isolated_engine: Any, good: list[Clip],
                                                        greedy_alone: dict[str, Any]) -> None:
    """The reference design's add_request takes tensors; float64 (numpy's default) is converted too."""
    import torch

    engine = isolated_engine
    clip = good[0]
    ids = [engine.add_request(torch.from_numpy(clip.audio.copy())), engine.add_request(clip.audio.astype(np.float64))]
    done = _run_until_done(engine, ids)
    assert [done[i].text for i in ids] == [greedy_alone[clip.id].text] * 2


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (DecodingOptions(beam_size=0), InvalidRequestError, r"beam_size must be in \[1, 30\]"),
        (DecodingOptions(beam_size=99), InvalidRequestError, r"beam_size must be in \[1, 30\]"),
        (DecodingOptions(n_best=31), InvalidRequestError, r"n_best must be in \[1, 30\]"),
        (DecodingOptions(best_of=0), InvalidRequestError, r"best_of must be in \[1, 30\]"),
        (DecodingOptions(temperature=-1.0), InvalidRequestError, r"temperature must be in \[0, 2.0\]"),
        (DecodingOptions(temperature=math.nan), InvalidRequestError, "temperature must be a finite number"),
        (DecodingOptions(temperature=0.5, top_p=0.0), InvalidRequestError, r"top_p must be in \(0, 1\]"),
        (DecodingOptions(top_k=0), InvalidRequestError, "top_k must be >= 1"),
        (DecodingOptions(max_new_tokens=0), InvalidRequestError, "max_new_tokens must be >= 1"),
        (DecodingOptions(language="fr"), UnsupportedError, "language 'fr' is not supported by the whisper model 'tiny.en': it is English-only"),
        (DecodingOptions(task="translate"), UnsupportedError, "task='translate' is not supported by the whisper model 'tiny.en'"),
    ],
    ids=["beam0", "beam99", "nbest31", "bestof0", "temp-neg", "temp-nan", "top_p0", "top_k0", "max_new0", "fr", "translate"],
)
def test_out_of_range_options_are_refused_and_batch_mates_succeed(
    isolated_engine: Any, good: list[Clip], greedy_alone: dict[str, Any], options: DecodingOptions,
    error: type[Exception], message: str,
) -> None:
    engine = isolated_engine
    first = engine.add_request(good[2].audio)
    with pytest.raises(error, match=message):
        engine.add_request(good[0].audio, decoding=options)
    done = _run_until_done(engine, [first])
    assert done[first].text == greedy_alone[good[2].id].text


def test_unknown_request_ids(isolated_engine: Any) -> None:
    with pytest.raises(UnknownRequestError, match="unknown request id 'nope'"):
        isolated_engine.feed_chunk("nope", np.zeros(160, dtype=np.float32))
    with pytest.raises(UnknownRequestError, match="unknown request id 'nope'"):
        isolated_engine.abort_request("nope")


def test_duplicate_request_id_is_refused(isolated_engine: Any, good: list[Clip]) -> None:
    rid = isolated_engine.add_request(good[2].audio, request_id="dup")
    with pytest.raises(InvalidRequestError, match="already in use"):
        isolated_engine.add_request(good[2].audio, request_id="dup")
    assert _run_until_done(isolated_engine, [rid])[rid].finish_reason == "stop"


# ---- failure isolation: a real fault injected into the real engine's forward passes ----


def _poisoned_mel(engine: Any, audio: np.ndarray) -> torch.Tensor:
    from engine.log_mel import pad_window

    mel = engine.runner.features([audio])[0]
    return pad_window(mel[:, : mel.shape[1] - 1], 0)


def test_encoder_fault_fails_only_the_culprit(
    isolated_engine: Any, good: list[Clip], greedy_alone: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = isolated_engine
    encoder = engine.runner.model.encoder
    poison_audio = (good[0].audio * 0.5).astype(np.float32)  # its own mel, unlike any batch mate's
    poison = _poisoned_mel(engine, poison_audio)
    real_forward, real_encode = encoder.forward, engine.runner.context_encoder.encode
    calls: list[int] = []  # windows per encoder batch (windows of one length share a forward)

    def recorded_encode(mels: list[torch.Tensor]) -> list[torch.Tensor]:
        calls.append(len(mels))
        return real_encode(mels)  # type: ignore[no-any-return]

    def faulty_forward(mel: torch.Tensor, *context: Any) -> torch.Tensor:
        width = min(mel.shape[2], poison.shape[1])  # a short window is encoded at its own length
        if any(float((row[:, :width] - poison[:, :width]).abs().max()) < 1e-4 for row in mel):
            raise RuntimeError("injected encoder fault")
        return real_forward(mel, *context)

    monkeypatch.setattr(encoder, "forward", faulty_forward)
    monkeypatch.setattr(engine.runner.context_encoder, "encode", recorded_encode)
    ids = [engine.add_request(good[1].audio), engine.add_request(poison_audio), engine.add_request(good[2].audio)]
    done = _run_until_done(engine, ids)
    culprit = done[ids[1]]
    assert culprit.finish_reason == "error" and culprit.error_stage == "encode"
    assert "injected encoder fault" in (culprit.error or "")
    assert done[ids[0]].finish_reason == "stop" and done[ids[0]].text == greedy_alone[good[1].id].text
    assert done[ids[2]].finish_reason == "stop" and done[ids[2]].text == greedy_alone[good[2].id].text
    assert calls[0] == 3, "the three requests should have been encoded as one batch first"
    # the engine keeps stepping: a later request transcribes normally
    monkeypatch.undo()
    later = engine.add_request(good[0].audio)
    assert _run_until_done(engine, [later])[later].text == greedy_alone[good[0].id].text


def test_decoder_step_fault_fails_only_the_culprit(
    isolated_engine: Any, good: list[Clip], greedy_alone: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The culprit carries a long prompt, so only its rows decode at positions >= PROMPT_POS; the
    fault fires in one-token steps (not the prefill) whenever such a row is in the batch."""
    engine = isolated_engine
    decoder = engine.runner.model.decoder
    prompt = " ".join(["alpha beta gamma delta"] * 20)
    prompt_pos = len(engine.runner.tokenizer.encode(" " + prompt))  # the culprit's rows start beyond it
    assert prompt_pos > 60, "the other requests must never reach the culprit's positions"
    real_forward = decoder.forward
    faults: list[int] = []

    def faulty_forward(tokens: torch.Tensor, positions: torch.Tensor, cache: Any, **kwargs: Any) -> torch.Tensor:
        if tokens.shape[1] == 1 and int(positions.max()) >= prompt_pos:
            faults.append(tokens.shape[0])
            raise RuntimeError("injected decoder fault")
        return real_forward(tokens, positions, cache, **kwargs)

    monkeypatch.setattr(decoder, "forward", faulty_forward)
    ids = [
        engine.add_request(good[0].audio),
        engine.add_request(good[1].audio, decoding=DecodingOptions(prompt=prompt)),
        engine.add_request(good[2].audio),
    ]
    done = _run_until_done(engine, ids)
    culprit = done[ids[1]]
    assert culprit.finish_reason == "error" and culprit.error_stage == "decode"
    assert "injected decoder fault" in (culprit.error or "")
    assert faults[0] == 3 and 1 in faults, "the batched step fails first, then the culprit alone"
    assert done[ids[0]].text == greedy_alone[good[0].id].text
    assert done[ids[2]].text == greedy_alone[good[2].id].text
    assert engine.runner.batch.num_rows == 0 and not engine.runner.active


def test_an_engine_with_few_decoder_rows_refuses_a_wider_beam_and_samples_fewer_candidates(
        good: list[Clip]) -> None:
    """A window needing more decoder rows than the engine has would wait forever: a beam that
    wide is refused at admission, and a sampled window draws only as many candidates as fit."""
    from engine import ASREngine, EngineConfig

    narrow = ASREngine(EngineConfig(quantization="none", max_batch_size=2, max_decode_rows=2))
    try:
        with pytest.raises(InvalidRequestError, match="max_decode_rows=2"):
            narrow.add_request(good[0].audio, decoding=DecodingOptions(beam_size=3))
        sampled = narrow.transcribe(good[0].audio, decoding=DecodingOptions(temperature=0.4, seed=0))
        assert isinstance(sampled, str) and sampled.strip()
    finally:
        narrow.shutdown()
