"""LocalAgreement-n: the commit policy of live transcription (n = 2 by default).

A live stream is re-decoded over its uncommitted audio window every step. Two consecutive
hypotheses agree on a prefix (word level); that prefix is committed and never changes, the
rest stays tentative. The window can then be trimmed at the end of the last committed word,
and the committed text prompts the next pass. Pure Python, no torch: the streaming runner
owns the audio and the model; this class owns only words.

    pass k-1:  [committed ...] the cat sat on
    pass k:    [committed ...] the cat sat in the
                               └─ committed ─┘ └ tentative ┘

With `agreement=n`, a word commits once the last n hypotheses agree on it (a slower, steadier
policy; `DecodingOptions.delay` picks n per stream).

Word texts follow Whisper's convention: a word carries its leading space (" cat"), scripts
written without spaces carry none. Words are compared normalized (case-folded, punctuation
and spaces removed) and committed in the newer hypothesis' surface form.
"""

from __future__ import annotations

import logging
import math
import unicodedata
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import takewhile

from engine.types import Word

logger = logging.getLogger(__name__)

DEFAULT_PROMPT_CHARS = 200
"""Committed text carried into the next pass's prompt; Whisper's prompt budget is ~223
tokens, and a couple of sentences is the context that helps."""
MAX_OVERLAP_WORDS = 32
"""Longest run of already-committed words looked for at the start of a new hypothesis: a pass
over a window trimmed at a sentence end, with little speech left, often says the prompt's whole
last sentence again."""
TIME_SLACK_S = 0.1
"""Words starting this much before the commit point are still considered new: word
timestamps jitter, and a new word can start inside the last committed one's tail."""
OVERLAP_WINDOW_S = 1.0
"""Committed words are looked for at a hypothesis' start only if it starts this close to the
commit point (a leaked prompt or an untrimmed window), not for repeats later in speech."""
NO_SPACE_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL SYLLABLE", "THAI", "LAO", "KHMER", "MYANMAR", "TIBETAN")
"""Unicode name prefixes of scripts whose words are not separated by spaces (Korean is, but
Whisper marks its word starts with spaces, so a bare Hangul word continues the last one)."""


def normalize_word(text: str) -> str:
    """Comparison key: case-folded with punctuation and spaces removed (punctuation-only words
    keep their stripped text, so "-" still differs from "")."""
    key = "".join(
        ch for ch in text.casefold() if not ch.isspace() and not unicodedata.category(ch).startswith("P")
    )
    return key or text.strip()


def join_words(words: Iterable[Word], text: str = "") -> str:
    """Append words to `text`, inserting a space only where Whisper-style words lack one."""
    for word in words:
        piece = word.word
        if not piece.strip():
            continue
        if not text:
            text = piece.lstrip()
        elif piece[0].isspace() or text[-1].isspace():
            text += piece
        elif _needs_space(text[-1], piece[0]):
            text += " " + piece
        else:
            text += piece
    return text


def _needs_space(before: str, after: str) -> bool:
    if not after.isalnum() or _no_space_script(after) or _no_space_script(before):
        return False
    return unicodedata.category(before) not in ("Ps", "Pi")  # no space after "(" or an opening quote


def _no_space_script(ch: str) -> bool:
    return unicodedata.name(ch, "").startswith(NO_SPACE_SCRIPTS)


@dataclass(frozen=True)
class AgreementUpdate:
    committed: list[Word]
    """Words committed by this call (absolute times), in order; never revised later."""
    tentative: list[Word]
    """The current uncommitted tail (absolute times); may change with the next hypothesis."""
    trim_to: float
    """Audio time (s) up to which the window may be dropped: the end of the last committed word."""


@dataclass
class LocalAgreement:
    """Commits the longest common word prefix of each hypothesis and the one before it.

        agreement = LocalAgreement()
        update = agreement.insert(words, offset=window_start_s)   # every pass
        prompt = agreement.prompt()                                # for the next pass
        final = agreement.finish(last_words, offset=...)           # end of input

    State stays bounded: committed history is kept as text plus the last few words (to spot
    re-emitted ones); only the tentative tail (and committed words not yet taken with
    `take_committed`) is kept as words.
    """

    prompt_chars: int = DEFAULT_PROMPT_CHARS
    agreement: int = 2
    """Consecutive hypotheses that must agree on a word before it commits (LocalAgreement-n)."""
    committed_text: str = ""
    """Everything committed so far; only ever extended."""
    committed_until: float = 0.0
    """End (s) of the last committed word."""
    _tentative: list[Word] = field(default_factory=list)
    _older: list[list[Word]] = field(default_factory=list)
    """With agreement > 2: the uncommitted tails of the hypotheses before the last one."""
    _recent: deque[Word] = field(default_factory=lambda: deque(maxlen=MAX_OVERLAP_WORDS))
    _untaken: list[Word] = field(default_factory=list)

    @property
    def tentative(self) -> list[Word]:
        return list(self._tentative)

    @property
    def tentative_text(self) -> str:
        """The tentative tail as it continues `committed_text` (with its leading space, if any)."""
        return join_words(self._tentative, self.committed_text)[len(self.committed_text) :]

    @property
    def text(self) -> str:
        """committed_text + tentative_text: the partial transcript to show."""
        return join_words(self._tentative, self.committed_text)

    def insert(self, words: Sequence[Word], offset: float = 0.0, settled_until: float = math.inf,
               known_new: bool = False) -> AgreementUpdate:
        """Take the hypothesis of one pass (word times relative to `offset`, in seconds). Agreed
        words ending after `settled_until` (absolute seconds) stay tentative, with all after them:
        the last words of a pass, at the end of the audio it had, are often clipped ("pain." for
        "painful") or close a sentence the speaker has not finished ("whatsoever." before "here").
        `known_new`: the caller already removed the committed words the pass heard again (by
        count, from a pass forced with them), so none is dropped here by its text or time."""
        fresh = self._new_words(words, offset, known_new)
        earlier = [*self._older, self._tentative]
        if len(earlier) < self.agreement - 1:  # not yet enough hypotheses to agree
            agreed = 0
        else:
            agreed = 0
            for column in zip(*earlier, fresh, strict=False):
                if len({normalize_word(w.word) for w in column}) != 1:
                    break
                agreed += 1
        agreed = min(agreed, sum(1 for _ in takewhile(lambda w: w.end <= settled_until, fresh)))
        committed = fresh[:agreed]
        self._commit(committed)
        self._older = [tail[agreed:] for tail in earlier][-(self.agreement - 2):] if self.agreement > 2 else []
        self._tentative = fresh[agreed:]
        return AgreementUpdate(committed=committed, tentative=list(self._tentative), trim_to=self.committed_until)

    def finish(self, words: Sequence[Word] | None = None, offset: float = 0.0, known_new: bool = False) -> AgreementUpdate:
        """End of input: commit all of the final hypothesis (or, without one, the tentative tail).
        `known_new` as for `insert`."""
        committed = self._new_words(words, offset, known_new) if words is not None else self._tentative
        self._commit(committed)
        self._tentative, self._older = [], []
        return AgreementUpdate(committed=list(committed), tentative=[], trim_to=self.committed_until)

    def force_commit_before(self, time: float) -> AgreementUpdate:
        """Commit the tentative words ending by `time` (s) without waiting for agreement.

        For a window at its length cap: its older audio is about to be dropped, so the last
        pass's words for it are the best there will be.
        """
        n = 0
        while n < len(self._tentative) and self._tentative[n].end <= time:
            n += 1
        committed, self._tentative = self._tentative[:n], self._tentative[n:]
        self._older = [tail[n:] for tail in self._older]
        self._commit(committed)
        return AgreementUpdate(committed=committed, tentative=list(self._tentative), trim_to=self.committed_until)

    def take_committed(self) -> list[Word]:
        """Words committed since the last call, for a caller that does not keep the updates.

        They are held until taken, so a caller should use either this or the updates.
        """
        taken, self._untaken = self._untaken, []
        return taken

    def prompt(self) -> str:
        """The tail of the committed text for the next pass's prompt, cut at a word boundary."""
        text = self.committed_text
        if len(text) <= self.prompt_chars:
            return text
        tail = text[-self.prompt_chars :]
        space = tail.find(" ")
        return tail[space + 1 :] if 0 <= space < len(tail) - 1 else tail

    # -- internals --

    def _new_words(self, words: Sequence[Word], offset: float, known_new: bool = False) -> list[Word]:
        """The hypothesis in absolute time, without words that were already committed (unless
        the caller knows there are none: `known_new`). Times are no proof of that: a lone word
        in a window of mostly silence is aligned up to seconds late, and every word heard after
        it would fall before its end."""
        if not math.isfinite(offset):
            raise ValueError(f"offset must be a finite number of seconds, got {offset!r}")
        fresh = [
            replace(w, start=w.start + offset, end=w.end + offset)
            for w in words
            if w.word.strip()
        ]
        if not self._recent or not fresh:
            return fresh
        # A window kept from a little before the commit point (or a leaked prompt) re-hears the
        # last committed words at its start: drop the longest such run, matched by text, since
        # word timestamps jitter by a couple of tenths of a second. A single word counts only
        # when it starts at the commit point, so "no, no" said with a pause survives; after a
        # pass that was told the committed words (`known_new`), only a run of several counts: the
        # model then repeats a phrase it was given, while one word again is speech ("five five").
        recent = [normalize_word(w.word) for w in self._recent]
        if fresh[0].start < self.committed_until + OVERLAP_WINDOW_S:
            shortest = 2 if known_new or fresh[0].start >= self.committed_until + TIME_SLACK_S else 1
            for n in range(min(len(recent), len(fresh)), shortest - 1, -1):
                if recent[-n:] == [normalize_word(w.word) for w in fresh[:n]]:
                    logger.debug("dropping %d re-emitted committed word(s)", n)
                    return fresh[n:]
        if known_new:
            return fresh
        # No textual overlap: words lying mostly before the commit point were heard already.
        return [w for w in fresh if (w.start + w.end) / 2 > self.committed_until - TIME_SLACK_S]

    def _commit(self, words: Sequence[Word]) -> None:
        if not words:
            return
        self.committed_text = join_words(words, self.committed_text)
        self._recent.extend(words)
        self._untaken.extend(words)
        self.committed_until = max(self.committed_until, words[-1].end)
