"""Keywords on the Zipformer transducer: icefall's ContextGraph biases its modified beam search.

The fixture's weights are random, so "a rare phrase wrong without the keyword and right with it"
cannot be shown on speech: the tests show the mechanism on the same audio (a word a lower-ranked
hypothesis holds enters the transcript once it is a keyword, offline and streaming; keywords no
hypothesis comes near leave the transcript as it was)."""

from __future__ import annotations

import itertools

import numpy as np
import torch

from engine.models.zipformer.beam import new_beam
from engine.models.zipformer.runner import ZipformerRunner
from engine.ops.modified_beam import modified_beam_search
from engine.types import DecodingOptions
from tests.engine.zipformer.conftest import (
    clip,
    drive_alone,
    make_runner,
    reference,
    reference_features,
    transcribe_offline,
)

CLIPS = tuple(reference()["clips"])


def contains(tokens: list[int], part: list[int]) -> bool:
    return any(tokens[i : i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


@torch.inference_mode()
def alternatives(runner: ZipformerRunner, clip_id: str, beam: int) -> list[list[int]]:
    f = torch.from_numpy(reference_features()[clip_id])[None]
    enc, enc_len = runner.model.encoder(f, torch.tensor([f.shape[1]]))
    state = new_beam(runner.net, beam, [], 0.0)
    modified_beam_search(runner.net, runner.net.project(enc), enc_len.tolist(), [state])
    return [h.tokens for h in state.hypotheses(final=True)]


def promotable_word(runner: ZipformerRunner, clip_id: str, plain: list[int]) -> str | None:
    tok = runner.ckpt.tokenizer
    for tokens in alternatives(runner, clip_id, 8):
        starts = [i for i, t in enumerate(tokens) if tok.pieces[t].startswith("▁")] + [len(tokens)]
        for i, j in itertools.pairwise(starts):
            word = tok.text(tokens[i:j]).strip()
            if word and tok.encode(word) == tokens[i:j] and not contains(plain, tokens[i:j]):
                return word
    return None


def test_a_runner_up_word_enters_the_transcript_once_it_is_a_keyword() -> None:
    runner = make_runner()
    tried = 0
    for clip_id in CLIPS:
        audio = np.asarray(clip(clip_id))
        plain = transcribe_offline(runner, audio, DecodingOptions(beam_size=4))
        keyword = promotable_word(runner, clip_id, plain.tokens)
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
    assert tried, "some clip has an alternative word to promote"


def test_unrelated_keywords_leave_the_transcript_unchanged() -> None:
    runner = make_runner()
    unrelated = ("zebra", "quantum", "xylophone")
    for clip_id in CLIPS:
        audio = np.asarray(clip(clip_id))
        plain = transcribe_offline(runner, audio, DecodingOptions(beam_size=4))
        assert not any(contains(h, runner.ckpt.tokenizer.encode(w)) for h in alternatives(runner, clip_id, 8)
                       for w in unrelated), "the keywords are unrelated: no hypothesis holds one"  # fmt: skip
        biased = transcribe_offline(runner, audio, DecodingOptions(beam_size=4, keywords=unrelated))
        assert biased.tokens == plain.tokens
