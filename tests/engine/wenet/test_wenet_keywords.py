"""Per-request keywords on the WeNet family: spelled with the model's units, they bias the CTC
prefix beam search toward their token sequences (engine.ops.ContextTrie)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
import torch

from engine.ctc_prefix import CTCState
from engine.errors import InvalidRequestError
from engine.models.wenet.keywords import KeywordSpeller
from engine.models.wenet.runner import WenetRunner
from engine.models.wenet.testing import drive_alone, record_log_probs, units_list
from engine.types import DecodingOptions
from tests.conftest import load_clip

PIECE = 1600  # samples per engine step


def test_keywords_are_spelled_with_the_model_units() -> None:
    units = units_list()
    speller = KeywordSpeller(units)
    assert [units[i] for i in speller.spell("he said")] == ["▁H", "E", "▁S", "A", "I", "D"]
    bpe = KeywordSpeller(["<blank>", "<unk>", "▁HE", "▁H", "E", "LLO", "L", "O", "<sos/eos>"])
    assert bpe.spell("Hello") == [2, 5]  # longest units first
    cjk = KeywordSpeller(["<blank>", "<unk>", "你", "好", "<sos/eos>"])
    assert cjk.spell("你 好") == [2, 3]
    with pytest.raises(InvalidRequestError, match="cannot be spelled"):
        speller.spell("route 66")


def test_an_unspellable_keyword_is_refused_at_admission(make_runner: Callable[..., WenetRunner]) -> None:
    runner = make_runner()
    with pytest.raises(InvalidRequestError, match="cannot be spelled"):
        runner.check_options(DecodingOptions(keywords=("B52",)), streaming=True)


def promotable_word(runner: WenetRunner, audio: np.ndarray, plain_words: list[str]) -> str | None:
    """A word some hypothesis of the plain beam search holds (spelled the way a keyword is
    spelled: '▁' + its letters) that the plain transcript lacks."""
    seen = record_log_probs(runner)
    drive_alone(runner, audio, PIECE, "probe", DecodingOptions(beam_size=4))
    state = CTCState(4)
    state.advance(torch.cat(seen.pop("probe")))
    for h in state.beams:
        pieces = [runner.detok.units[t] for t in h.tokens]
        starts = [i for i, p in enumerate(pieces) if p.startswith("▁")] + [len(pieces)]
        for i, j in itertools.pairwise(starts):
            word = "".join(pieces[i:j]).lstrip("▁")
            if word not in plain_words and runner.speller.spell(word) == list(h.tokens[i:j]):
                return word
    return None


def test_a_keyword_enters_the_transcript(make_runner: Callable[..., WenetRunner]) -> None:
    """A word the plain search ranks below the top appears in the transcript once it is a keyword;
    a greedy request with keywords is beam searched."""
    runner = make_runner(chunk_size=4, family_options={"wenet": {"keyword_boost": 4.0}})
    tried = 0
    for clip in ("mfa_thoughts", "ps_cards_005", "mfa_her", "libri_61-70968-0000"):
        audio = load_clip(clip)[:20000]
        plain = drive_alone(runner, audio, PIECE, "plain", DecodingOptions(beam_size=4))[-1]
        keyword = promotable_word(runner, audio, plain.text.split())
        if keyword is None:
            continue
        tried += 1
        biased = drive_alone(runner, audio, PIECE, "kw", DecodingOptions(beam_size=4, keywords=(keyword,)))[-1]
        assert biased.finish_reason == "stop"
        assert keyword in biased.text.split(), (clip, keyword, plain.text, biased.text)
        greedy = drive_alone(runner, audio, PIECE, "g", DecodingOptions(keywords=(keyword,)))[-1]
        assert keyword in greedy.text.split()
        plain_again = drive_alone(runner, audio, PIECE, "p", DecodingOptions(beam_size=4, keywords=()))[-1]
        assert plain_again.text == plain.text
    assert tried >= 2, "fewer than two clips offered a runner-up word to promote"
