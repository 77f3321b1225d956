"""What a live Whisper stream reports: a pass's words with their log-probabilities, and the
stream's output (committed text, then the tentative tail) after each pass or at its end."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from engine.models.whisper.window import WindowResult, attach_logprobs
from engine.streaming.local_agreement import LocalAgreement
from engine.types import DecodingOptions, RequestOutput, Segment, Word

if TYPE_CHECKING:
    from engine.models.whisper.tokenizer import WhisperTokenizer


def attach_word_logprobs(words: list[Word], result: WindowResult, tokenizer: WhisperTokenizer,
                         forced_words: list[Word]) -> None:
    """Give each word its tokens and their log-probabilities. Forced words (`forced_words`, in
    order) were read, not chosen: they take the values of the words they repeat, from the pass
    that chose them."""
    lps = [lp for t, lp in zip(result.tokens, result.token_logprobs) if t < tokenizer.eot]
    _, pieces = tokenizer.split_to_word_tokens([t for t in result.tokens if t < tokenizer.eot])
    offset = 0
    known = iter(forced_words)
    for word, tokens in zip(words, pieces):
        mine = lps[offset : offset + len(tokens)]
        offset += len(tokens)
        word.tokens, word.logprobs = tokens, mine
        unknown = sum(math.isnan(lp) for lp in mine)
        if unknown:
            source = next(known, None)
            if source is not None and source.logprobs is not None and len(source.logprobs) == unknown:
                filled = iter(source.logprobs)
                word.logprobs = [next(filled) if math.isnan(lp) else lp for lp in mine]
            else:  # the forced text tokenized differently: the word is reported without log-probabilities
                word.tokens, word.logprobs = None, None


def stream_output(request_id: str, agreement: LocalAgreement, committed_words: list[Word],
                  options: DecodingOptions, tokenizer: WhisperTokenizer, language: str | None,
                  duration: float, finished: bool) -> RequestOutput:
    """The stream's text so far: what is committed, then (until it finishes) the tentative tail.
    A finished output carries the committed tokens, one segment over the committed words, their
    mean confidence, and the words themselves when `options.word_timestamps` asks for them."""
    committed = agreement.committed_text
    tentative = "" if finished else agreement.tentative_text
    out = RequestOutput(
        request_id=request_id,
        text=committed + tentative,
        finished=finished,
        finish_reason="stop" if finished else None,
        language=language,
        duration=duration,
        committed=committed,
        tentative=tentative,
    )
    if finished:
        out.tokens = tokenizer.encode(" " + committed.strip()) if committed.strip() else []
        if options.word_timestamps:
            out.words = list(committed_words)
        if committed_words:  # mean probability of the committed words
            out.confidence = round(sum(w.confidence for w in committed_words) / len(committed_words), 4)
            out.segments = [Segment(id=0, start=committed_words[0].start, end=committed_words[-1].end,
                                    text=" " + committed.strip(), tokens=out.tokens)]
    if options.logprobs:
        words = committed_words + ([] if finished else agreement.tentative)
        scored = [w for w in words if w.tokens is not None and w.logprobs is not None]
        attach_logprobs(out, tokenizer, [t for w in scored for t in w.tokens or []],
                        [lp for w in scored for lp in w.logprobs or []])
    return out
