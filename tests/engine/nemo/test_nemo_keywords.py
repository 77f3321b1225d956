"""Keywords on NeMo checkpoints: the CTC head's beam search is biased toward them (the shared
`ctc_prefix_beam_search` operator and its token trie); the RNN-T's beam search (malsd_batch) is
biased by icefall's ContextGraph scoring (engine/ops/context_graph.py), TDT's too.

The fixtures' weights are random, so "a rare phrase wrong without the keyword and right with it"
cannot be shown on speech here: the tests show the mechanism on the same audio instead (a word a
lower-ranked hypothesis holds enters the transcript once it is a keyword; keywords no hypothesis
comes near leave the transcript as it was)."""

from __future__ import annotations

import itertools

import numpy as np
import torch

from engine.models.nemo.beam import new_beam
from engine.models.nemo.ctc import CtcDecoder
from engine.models.nemo.runner import NemoRunner
from engine.ops.malsd import malsd_search
from engine.types import DecodingOptions
from tests.engine.nemo.conftest import clip, drive_alone, make_runner, transcribe_offline

NAME = "hybrid_cache_aware"


def contains(tokens: list[int], part: list[int]) -> bool:
    return any(tokens[i : i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


def _encode(runner: NemoRunner, audio: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    ckpt = runner.ckpt
    with torch.inference_mode():
        samples = torch.from_numpy(np.array(audio, dtype=np.float32))[None]
        mel, mel_len = ckpt.frontend(samples, torch.tensor([samples.shape[1]]))
        return ckpt.model.encoder(mel, mel_len, [list(runner.look_ahead)] if runner.look_ahead else None)  # type: ignore[no-any-return]


@torch.inference_mode()
def alternatives(runner: NemoRunner, audio: np.ndarray, beam: int) -> list[list[int]]:
    """The token sequences of the plain (unbiased) beam search of the runner's decoder."""
    enc, enc_len = _encode(runner, audio)
    if runner.method == "ctc":
        assert runner.ckpt.model.ctc is not None
        search = CtcDecoder(beam)
        search.advance(runner.ckpt.model.ctc(enc)[0, : int(enc_len[0])])
        return [tokens for tokens, _ in search.nbest(beam)]
    net = runner.decoder.net
    state = new_beam(net, beam, [], 0.0)
    malsd_search(net, net.project(enc), enc_len, [state], runner.decoder.beam_max_symbols)
    return [h.tokens for h in state.hypotheses(final=True)]


def promotable_word(runner: NemoRunner, audio: np.ndarray, plain_tokens: list[int], beam: int = 4) -> str | None:
    """A word some hypothesis of the plain beam search holds, in the pieces the tokenizer spells
    it with, whose pieces the plain transcript lacks."""
    tokenizer = runner.ckpt.tokenizer
    for tokens in alternatives(runner, audio, beam):
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


def test_a_runner_up_word_enters_the_transducer_transcript_once_it_is_a_keyword() -> None:
    """Offline and cache-aware streaming; a greedy request with keywords is beam searched."""
    runner = make_runner(NAME, decode_method="rnnt")
    tried = 0
    for clip_id in ("mfa_thoughts", "libri_61-70968-0000", "ps_goforward"):
        audio = clip(NAME, clip_id)
        plain = transcribe_offline(runner, audio, DecodingOptions(beam_size=4))
        keyword = promotable_word(runner, audio, plain.tokens, beam=8)
        if keyword is None:
            continue
        tried += 1
        pieces = runner.ckpt.tokenizer.encode(keyword)
        biased = transcribe_offline(runner, audio, DecodingOptions(beam_size=4, keywords=(keyword,)))
        assert contains(biased.tokens, pieces), (keyword, plain.text, biased.text)
        greedy = transcribe_offline(runner, audio, DecodingOptions(keywords=(keyword,)))
        assert contains(greedy.tokens, pieces), "a greedy request with keywords is beam searched"
        streamed = drive_alone(runner, audio, 3001, decoding=DecodingOptions(beam_size=4, keywords=(keyword,)))
        assert contains(streamed[-1].tokens, pieces), (keyword, streamed[-1].text)
    assert tried == 3, "every clip has an alternative word to promote"


def test_unrelated_keywords_leave_the_transducer_transcript_unchanged() -> None:
    runner = make_runner(NAME, decode_method="rnnt")
    unrelated = ("zebra", "quantum", "xylophone")
    for clip_id in ("mfa_thoughts", "libri_61-70968-0000", "ps_goforward"):
        audio = clip(NAME, clip_id)
        plain = transcribe_offline(runner, audio, DecodingOptions(beam_size=4))
        assert not any(contains(h, runner.ckpt.tokenizer.encode(w)) for h in alternatives(runner, audio, 8)
                       for w in unrelated), "the keywords are unrelated: no hypothesis holds one"  # fmt: skip
        biased = transcribe_offline(runner, audio, DecodingOptions(beam_size=4, keywords=unrelated))
        assert biased.tokens == plain.tokens

