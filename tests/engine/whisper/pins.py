"""Pinned Whisper outputs: what the engine produces on a few dev clips, to prove a refactor or an
optimisation changes no transcript.

The fixture `fixtures/whisper_pinned.json` is written by this module from the code as it is,
never by hand:

    PYTHONPATH=$PWD python -m tests.engine.whisper.pins            # rewrite the fixture
    PYTHONPATH=$PWD python -m tests.engine.whisper.pins --check     # compare, print differences

Regenerate it only for a change that is MEANT to alter outputs, and say so in the commit.
`test_whisper_pinned.py` recomputes the same cases and compares. The cases cover the paths a
refactor of the runner can break: offline greedy with several requests batched together,
beam 5 with n-best, word timestamps (the alignment pass), a two-window long-form recording
(seek, prompt conditioning), and one live stream fed 500 ms at a time (sliding window passes,
agreement, trimming, the final pass).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tests.conftest import load_clip

logger = logging.getLogger(__name__)

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "whisper_pinned.json"
GREEDY_CLIPS = ("jfk_inaugural", "libri_61-70968-0000", "cv_en_22058264", "mfa_um")
BEAM_CLIPS = ("libri_2412-153948-0000", "mfa_her")
WORD_CLIPS = ("jfk_inaugural", "mfa_long")
LONG_FORM_CLIP = "mfa_michaelandsickmichael"  # 52 s: two windows (downmixed stereo; only pinned, not scored)
LIVE_CLIP = "libri_61-70968-0000"
LIVE_STEP_SAMPLES = 8000  # 500 ms, the default WhisperOptions.stream_step_ms
TIME_TOLERANCE_S = 0.02
"""Word and segment times may move by one timestamp step (20 ms) between CPUs: they come from
DTW over attention weights, whose float32 rounding differs with the SIMD width (AVX2 / AVX-512)."""


def _words(words: Any) -> list[list[Any]] | None:
    return None if words is None else [[w.word, w.start, w.end] for w in words]


def _offline(out: Any) -> dict[str, Any]:
    assert out.finish_reason == "stop", (out.request_id, out.error)
    return {
        "text": out.text,
        "tokens": list(out.tokens),
        "segments": [[s.start, s.end, list(s.tokens)] for s in out.segments],
        "words": _words(out.words),
        "nbest": [a.text for a in out.nbest],
    }


def offline_cases(engine: Any) -> dict[str, Any]:
    """Every offline case, run on `engine` (an ASREngine built with `pinned_config()`)."""
    from engine.types import DecodingOptions

    greedy = engine.transcribe_outputs([load_clip(c) for c in GREEDY_CLIPS])
    beam = engine.transcribe_outputs([load_clip(c) for c in BEAM_CLIPS],
                                  decoding=DecodingOptions(beam_size=5, n_best=3))
    words = engine.transcribe_outputs([load_clip(c) for c in WORD_CLIPS],
                                   decoding=DecodingOptions(word_timestamps=True))
    long_form = engine.transcribe_outputs(load_clip(LONG_FORM_CLIP))
    return {
        "greedy": {c: _offline(o) for c, o in zip(GREEDY_CLIPS, greedy)},
        "beam5": {c: _offline(o) for c, o in zip(BEAM_CLIPS, beam)},
        "word_timestamps": {c: _offline(o) for c, o in zip(WORD_CLIPS, words)},
        "long_form": {LONG_FORM_CLIP: _offline(long_form[0])},
    }


def live_case(engine: Any) -> dict[str, Any]:
    """One stream fed 500 ms at a time, every pass a block triggers run to completion, on a
    streaming-mode engine: each output's committed and tentative text, and the final's tokens."""
    audio: np.ndarray = load_clip(LIVE_CLIP)
    rid = engine.add_streaming_request()
    outputs: list[Any] = []
    for off in range(0, audio.size, LIVE_STEP_SAMPLES):
        engine.feed_chunk(rid, audio[off : off + LIVE_STEP_SAMPLES], is_last=off + LIVE_STEP_SAMPLES >= audio.size)
        while engine.has_work():
            outputs.extend(o for o in engine.step() if o.request_id == rid)
    final = outputs[-1]
    assert final.finished and final.finish_reason == "stop", final
    return {
        LIVE_CLIP: {
            "outputs": [[o.committed, o.tentative, o.finished] for o in outputs],
            "text": final.text,
            "tokens": list(final.tokens),
        }
    }


def pinned_config(**overrides: Any) -> Any:
    """The engine the pins are computed on: the defaults, but float32 on every CPU (the default
    quantization depends on the CPU's int8 kernel, and pins must mean the same everywhere)."""
    from engine import EngineConfig

    return EngineConfig(quantization="none", **overrides)


def compute() -> dict[str, Any]:
    from engine import ASREngine

    offline = ASREngine(pinned_config())
    try:
        pins = offline_cases(offline)
    finally:
        offline.shutdown()
    live = ASREngine(pinned_config(service_mode="streaming"))
    try:
        pins["live"] = live_case(live)
    finally:
        live.shutdown()
    return pins


def differences(pinned: Any, actual: Any, path: str = "") -> list[str]:
    """Where `actual` differs from `pinned`: exact for text and token ids, within
    TIME_TOLERANCE_S for floats (times)."""
    if isinstance(pinned, dict) and isinstance(actual, dict):
        out = [f"{path}/{k}: missing" for k in pinned if k not in actual]
        out += [f"{path}/{k}: unexpected" for k in actual if k not in pinned]
        for k in pinned:
            if k in actual:
                out += differences(pinned[k], actual[k], f"{path}/{k}")
        return out
    if isinstance(pinned, list) and isinstance(actual, list):
        if len(pinned) != len(actual):
            return [f"{path}: {len(actual)} items, pinned {len(pinned)}: {actual!r} vs {pinned!r}"]
        return [d for i, (p, a) in enumerate(zip(pinned, actual)) for d in differences(p, a, f"{path}[{i}]")]
    if isinstance(pinned, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        return [] if abs(pinned - actual) <= TIME_TOLERANCE_S + 1e-9 else [f"{path}: {actual} vs pinned {pinned}"]
    return [] if pinned == actual else [f"{path}: {actual!r} vs pinned {pinned!r}"]


def _dump(value: Any, indent: str = "") -> str:
    """JSON with one line per list (a token sequence reads as one line, and diffs stay small)."""
    if not isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    inner = indent + " "
    items = [f"{inner}{json.dumps(k)}: {_dump(v, inner)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write (or --check) the pinned Whisper outputs fixture.")
    parser.add_argument("--check", action="store_true", help="compare with the fixture instead of writing it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    pins = compute()
    if args.check:
        diffs = differences(json.loads(FIXTURE.read_text()), pins)
        for d in diffs:
            logger.error("%s", d)
        logger.info("%d differences", len(diffs))
        return 1 if diffs else 0
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(_dump(pins) + "\n")
    logger.info("wrote %s", FIXTURE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
