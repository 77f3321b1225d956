"""Keywords on NeMo checkpoints: the CTC head's beam search is biased toward them (the shared
`ctc_prefix_beam_search` operator and its token trie); a transducer refuses them clearly."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from engine.errors import UnsupportedError
from engine.models.nemo.ctc import CtcDecoder
from engine.models.nemo.runner import NemoRunner
from engine.types import DecodingOptions
from tests.engine.nemo.conftest import clip, make_runner, transcribe_offline

NAME = "hybrid_cache_aware"


def contains(tokens: list[int], part: list[int]) -> bool:
    return any(tokens[i : i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


def promotable_word(runner: NemoRunner, audio: np.ndarray, plain_tokens: list[int]) -> str | None:
    """A word some hypothesis of the plain beam search holds, in the pieces the tokenizer spells
    it with, whose pieces the plain transcript lacks."""
    ckpt = runner.ckpt
    with torch.inference_mode():
        samples = torch.from_numpy(np.array(audio, dtype=np.float32))[None]
        mel, mel_len = ckpt.frontend(samples, torch.tensor([samples.shape[1]]))
        enc, enc_len = ckpt.model.encoder(mel, mel_len, [list(runner.look_ahead)] if runner.look_ahead else None)
        assert ckpt.model.ctc is not None
        log_probs = ckpt.model.ctc(enc)[0, : int(enc_len[0])]
    search = CtcDecoder(4)
    search.advance(log_probs)
    tokenizer = ckpt.tokenizer
    for tokens, _ in search.nbest(4):
        starts = [i for i, t in enumerate(tokens) if tokenizer.pieces[t].startswith("▁")] + [len(tokens)]
        for i, j in itertools.pairwise(starts):
            word = tokenizer.text(tokens[i:j]).strip()
            if word and tokenizer.encode(word) == tokens[i:j] and not contains(plain_tokens, tokens[i:j]):
                return word
    return None


def test_a_runner_up_word_enters_the_transcript_once_it_is_a_keyword() -> None:
    runner = make_runner(NAME, decode_method="ctc", family_options={"nemo": {"keyword_boost": 5.0}})
    tried = 0
    for clip_id in ("mfa_thoughts", "libri_61-70968-0000", "ps_goforward"):  # the fixture's clips
        audio = clip(NAME, clip_id)
        plain = transcribe_offline(runner, audio, DecodingOptions(beam_size=4))
        keyword = promotable_word(runner, audio, plain.tokens)
        if keyword is None:
            continue
        tried += 1
        pieces = runner.ckpt.tokenizer.encode(keyword)
        biased = transcribe_offline(runner, audio, DecodingOptions(beam_size=4, keywords=(keyword,)))
        assert contains(biased.tokens, pieces), (keyword, plain.text, biased.text)
        greedy = transcribe_offline(runner, audio, DecodingOptions(keywords=(keyword,)))
        assert contains(greedy.tokens, pieces), "a greedy request with keywords is beam searched"
    assert tried, "no clip had an alternative word to promote"


def test_the_transducer_refuses_keywords_naming_the_way_out() -> None:
    runner = make_runner(NAME)
    with pytest.raises(UnsupportedError, match="decode_method='ctc'"):
        runner.check_options(DecodingOptions(keywords=("hello",)), streaming=True)
