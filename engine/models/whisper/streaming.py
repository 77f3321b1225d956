"""Live Whisper streaming: re-decode a sliding window, commit what two passes agree on.

Each pass decodes the stream's uncommitted audio (at most `stream_window_s`) with the
committed text as prompt. Words of consecutive passes are compared (LocalAgreement-2): their
longest common prefix is committed and never changes, and the window is trimmed to the end of
the last committed word. At end of input one final pass commits everything left.

A stream handed more audio than one pass covers (its window over `stream_window_s`) decodes
that backlog as offline segments first (catchup.py), commits them, and resumes live passes.

Bounds, per stream: the window holds at most `stream_window_s` of audio between passes (more
only while a catch-up round decodes it, and then only the audio the client sent ahead of the
engine); a pass decodes at most that window, prompted with at most PROMPT_CHARS of committed
text, and scans only the committed words at the window's end. What grows with the session is the
transcript itself (the committed text and words, which the final output returns).

This module runs the passes: when one is due or may be skipped, catch-up rounds, each pass's job,
what its result commits, the final pass. The window and committed words they work on are
stream_window.py's; what a pass starts from, stream_prefix.py's; how its result is read,
stream_results.py's.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from engine.log_mel import FRAMES_PER_SECOND, N_FRAMES, SAMPLE_RATE, pad_window
from engine.models.whisper.catchup import CatchUpRound, plan_cut
from engine.models.whisper.context import fit_frames
from engine.models.whisper.coverage import SpeechCoverage
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.stream_prefix import (
    PROMPT_CHARS,
    pass_draft,
    prompt_words,
    settled_tentative,
    word_count,
)
from engine.models.whisper.stream_results import drop_reheard, looping, pass_words, silent_pass
from engine.models.whisper.stream_window import StreamWindow
from engine.models.whisper.totals import WhisperTotals
from engine.models.whisper.transcript import is_silence, loop_start
from engine.models.whisper.window import WindowJob, WindowResult, WindowUpdate
from engine.request import Request
from engine.streaming.local_agreement import join_words
from engine.types import Delay, RequestOutput, Word
from engine.vad import VoiceActivityModel

SILENCE_KEEP_S = 1.0  # on a silent pass, keep only this much audio (speech may be starting)
SILENCE_TRIM_AFTER_S = 5.0  # ...once the window is at least this long
SILENCE_PASS_EVERY_S = 3.0  # audio without speech still gets a pass this often (speech the VAD misses)
PASS_AFTER_SPEECH_S = 1.0  # passes are skipped once one has heard this much silence after the speech
EDGE_S = 0.5  # agreed words ending this close to the end of a pass's audio wait for the next pass
TOKENS_PER_SECOND_CAP = 8  # fast speech is ~4 text tokens/s; the rest is room for timestamps

DELAYS: dict[Delay, tuple[float, int]] = {
    "minimal": (0.5, 2),
    "low": (1.0, 2),
    "medium": (1.0, 3),
    "high": (2.0, 3),
    "xhigh": (3.0, 4),
}
"""`DecodingOptions.delay` -> (pass cadence as a multiple of WhisperOptions.stream_step_ms, passes
that must agree before words commit). Shorter cadence: faster partials for proportionally more
compute; more agreeing passes: fewer committed mistakes, later commits. No delay is 'low'."""


class StreamingTranscription(StreamWindow):
    """The passes over a live stream's window (stream_window.py)."""

    def __init__(self, request: Request, parts: WhisperParts, window_s: float, fit_context: bool,
                 coverage: SpeechCoverage | None = None, totals: WhisperTotals | None = None):
        """`window_s`: longest uncommitted window re-decoded per pass; `fit_context`: encode a
        pass's window plus silence ('fit', context.py) instead of a zero-padded 30 s window;
        `coverage`: speech no word covers gets one more pass (coverage.py); None: off; `totals`:
        the runner's counts, which each pass and the audio it encodes are added to."""
        cadence, agree = DELAYS[request.decoding.delay or "low"]
        super().__init__(request, parts, window_s, agree)
        self.cadence = cadence
        """The engine's pass step is multiplied by it (the delay's pass cadence)."""
        self.totals = totals or WhisperTotals()
        self.coverage = coverage or SpeechCoverage(None)
        self.fit_context = fit_context
        self.generator: torch.Generator | None = None
        self.in_flight = False
        self.final_done = False
        self._forced_words: list[Word] = []  # the words a final pass is forced with (logprobs known)
        self._forced_committed = 0  # how many of the pass's first words are forced committed ones
        self.passes = 0
        self.current_job: WindowJob | None = None  # the pass in flight
        self.last_pass_tokens: list[int] | None = None  # what the last pass decoded, forced words first
        self.last_pass_start = 0.0  # where its window started (its timestamps count from there)
        self.unprompted = False  # the last prompted pass heard speech and wrote nothing
        self.cover_due = False  # a skipped pass kept speech no word covers: the next pass runs
        self.catch_up: CatchUpRound | None = None  # the backlog round decoding, if any (catchup.py)
        self.spoken = False
        """A pass started over audio the VAD hears speech in, or decoded text: the stream's passes
        cost what speech costs from now on (over silence they decode a few tokens or are skipped;
        the live gate counts the streams that have not, app/admission.py)."""

    # ---- scheduling ----

    def pass_samples(self, step_samples: int) -> int:
        """New audio that makes a pass due: the engine's step times the delay's cadence."""
        return max(1, round(step_samples * self.cadence))

    def ready(self, step_samples: int) -> bool:
        """Due a pass: `pass_samples` of new audio (absorbed or not yet), or the end of input."""
        if self.in_flight or self.final_done or self.catch_up is not None:
            return False
        pending = self.new_samples + self.request.pending_samples
        return pending >= self.pass_samples(step_samples) or self.request.input_finished

    def may_skip_pass(self, speech_end: float | None) -> bool:
        """A pass may be skipped when it would write nothing: input goes on, nothing is tentative,
        and the last pass heard PASS_AFTER_SPEECH_S of silence after the last speech the VAD
        heard from `vad_since()` on (`speech_end`, stream seconds; None: none there); speech cut
        at a pass's edge is often written only by the pass after. Audio the last pass did not hear gets a
        pass every SILENCE_PASS_EVERY_S still: speech the VAD misses is decoded late, not never."""
        if self.request.input_finished or self.in_flight or self.agreement.tentative or self.cover_due:
            return False
        if speech_end is not None and self.heard_until - speech_end < PASS_AFTER_SPEECH_S:
            return False
        return self._window_end() - max(self.heard_until, self.window_start) < SILENCE_PASS_EVERY_S

    def vad_since(self) -> float:
        """Stream time from which speech the VAD hears keeps the next pass (`may_skip_pass`)."""
        return self.heard_until - PASS_AFTER_SPEECH_S

    def skip_pass(self, speech_end: float | None) -> None:
        """No pass this period. A window holding SILENCE_TRIM_AFTER_S without speech (no word
        committed, no VAD speech) at its end keeps only its last SILENCE_KEEP_S, as a pass that
        heard only silence would cut it, unless the VAD hears speech there that no word covers:
        passes forced with the words before it can end their text at once (tiny.en, forced with
        "Firefox", wrote "." over "Firefox ... six" for five passes, and the trim dropped "six").
        The window is then cut where the words end instead, and the next pass decodes the speech
        after them, once (coverage.py bounds the retries)."""
        self.new_samples = 0
        spoken_until = max(self.committed_words[-1].end if self.committed_words else 0.0, speech_end or 0.0)
        if self._window_end() - max(spoken_until, self.window_start) >= SILENCE_TRIM_AFTER_S:
            keep_from = self._window_end() - SILENCE_KEEP_S
            verdict = self.coverage.review(self.window, self._spoken_until(), keep_from, self.window_start)
            if verdict.retry_from is None:
                self._trim_to(keep_from)
            else:
                self._restart_at(verdict.retry_from)
                self.cover_due = True

    # ---- catch-up (catchup.py) ----

    def behind(self) -> bool:
        """The window holds more audio than one pass decodes: the backlog is decoded as offline
        segments (`start_catch_up`) instead of cutting audio no pass has heard."""
        return self.window.size > self.window_cap

    def start_catch_up(self, vad: VoiceActivityModel | None) -> tuple[list[WindowJob], RequestOutput | None]:
        """Cut the audio after the committed words into segments and return the first one's
        window (an offline job); with nothing to decode (silence), the round ends at once and
        its output is returned. The tentative words are re-decoded by the segments; where the
        VAD hears no speech at all they are committed as the last pass heard them, not dropped."""
        cut = plan_cut(self.window, self.window_start, self._spoken_until(), vad, self.window_cap / SAMPLE_RATE,
                       input_ended=self.is_final_pass())
        self.catch_up = CatchUpRound(cut, self.window, self.window_start,
                                     self.fit_context and not self.options.word_timestamps,
                                     lambda: SpeechCoverage(self.coverage.vad, self.coverage.totals))
        self.new_samples = 0
        if not cut.segments:
            self.agreement.finish(None)
            self._collect_commits()
        job = self.catch_up.start_next(self, self.request, self.parts, self._segment_prompt())
        if job is None:
            return [], self._end_catch_up()
        return [job], None

    def on_segment_done(self, words: list[Word]) -> tuple[RequestOutput | None, list[WindowJob]]:
        """A backlog segment is decoded: commit its words (they replace the tentative tail,
        which covered the same audio) and start the next segment; the last ends the round."""
        assert self.catch_up is not None
        if words:
            self.agreement.finish(words, known_new=True)
            self._collect_commits()
        job = self.catch_up.start_next(self, self.request, self.parts, self._segment_prompt())
        if job is None:
            return self._end_catch_up(), []
        return (self._output(finished=False) if words else None), [job]

    def _segment_prompt(self) -> str:
        return (self.options.prompt or "") + " " + self.agreement.committed_text[-PROMPT_CHARS:]

    def _end_catch_up(self) -> RequestOutput:
        """The round is committed: the window starts where it ended and live passes resume over
        the audio after it (a pass is due once it holds a cadence of audio)."""
        assert self.catch_up is not None
        self._restart_at(self.catch_up.cut.until)
        self.catch_up = None
        self.heard_until = max(self.heard_until, self.window_start)
        self.unprompted = False
        self.new_samples = self.window.size
        return self._output(finished=False)

    def make_job(self, mel: torch.Tensor) -> WindowJob:
        frames = min(N_FRAMES, mel.shape[1] - 1 if mel.shape[1] > 1 else mel.shape[1])
        length = fit_frames(frames) if self.fit_context else N_FRAMES
        job = WindowJob(self, pad_window(mel, 0, length), 0, frames, 0.0, 0, live=True)
        job.final = self.is_final_pass()
        job.forced = self._forced_tokens(job.final)
        job.draft = pass_draft(self.parts.tokenizer, self.last_pass_tokens, self.last_pass_start, job.forced,
                               self.window_start)
        self.current_job = job  # build_prefix reads its forced words
        job.refresh_prefix()
        self.in_flight = True
        self.new_samples = 0
        self.passes += 1
        self.totals.count_pass(length / FRAMES_PER_SECOND)
        return job

    # ---- WindowJob owner interface ----

    def token_budget(self, frames: int) -> int:
        """Passes get no temperature fallback (it would stall every other stream), so a window
        that starts repeating itself is cut at a generous rate for speech plus timestamps."""
        return TOKENS_PER_SECOND_CAP * frames // FRAMES_PER_SECOND + 16

    def prompt_tokens(self) -> list[int]:
        tok = self.parts.tokenizer
        # prompt with committed text the window no longer holds; the rest the model hears again
        prompt_text = "" if self.unprompted else (self.options.prompt or "") + join_words(
            prompt_words(self.committed_words, self.window_start))
        prompt = tok.encode(" " + prompt_text[-PROMPT_CHARS:].strip()) if prompt_text.strip() else []
        return prompt if self.unprompted else self.keywords + prompt

    def forced_tokens(self) -> list[int]:
        return self.current_job.forced if self.current_job is not None else []

    def superseded_pass(self) -> WindowJob | None:
        """An interim pass still in flight when the input has ended: the final pass re-decodes the
        same audio, so the runner drops the interim one rather than make the client wait for it."""
        job = self.current_job
        if self.in_flight and job is not None and not job.final and self.request.input_finished:
            return job
        return None

    def drop_pass(self) -> None:
        self.in_flight = False
        self.current_job = None

    def on_window_done(self, job: WindowJob, result: WindowResult) -> WindowUpdate:
        self.in_flight = False
        self.cover_due = False
        self.current_job = None
        self.heard_until = self.window_start + job.frames / FRAMES_PER_SECOND
        loops = looping(self.parts.tokenizer, result.tokens)
        if job.forced:  # forced tokens were read, not chosen: their log-probabilities come from the words
            result = replace(result, tokens=job.forced + result.tokens,
                             token_logprobs=[math.nan] * len(job.forced) + result.token_logprobs)
        self.last_pass_tokens, self.last_pass_start = result.tokens, self.window_start
        silent = silent_pass(result, self.options.no_speech_threshold, prompted=bool(self.agreement.committed_text))
        mute = not silent and not any(t < self.parts.tokenizer.eot for t in result.tokens)
        self.spoken = self.spoken or not (silent or mute)
        if (mute or loops) and (job.sot_index or job.forced) and not self.unprompted:
            # tiny.en, prompted with a sentence's first words over audio starting mid-sentence,
            # can answer with an empty transcript although it hears speech, and prompted with
            # "word, word, word," it loops: decode without prompt (or forced words)
            self.unprompted = True
            self.last_pass_tokens = None  # no draft from a loop
            if job.final and self.is_final_pass():
                return WindowUpdate([self._retry(job)])
            return WindowUpdate()
        self.unprompted = self.unprompted and mute
        words = [] if silent else pass_words(self.parts, job, result, self.options, self.language, self.window_start,
                                             self._forced_words if job.forced else [])
        if loops:  # unprompted already: the loop is the model's on this audio (live passes have no
            # temperature fallback); keep what precedes it, so two passes never agree on a loop
            cut = loop_start([w.word for w in words])
            words = words if cut is None else words[:cut]
        if job.final and self.is_final_pass():
            # a silent (or mute) last window keeps the tentative tail the previous pass heard
            self.agreement.finish(None if silent or mute else self._drop_reheard(job, words), known_new=bool(job.forced))
            self._collect_commits()
            retry = self._cover_the_rest()
            if retry is not None:
                return WindowUpdate([retry])
            self.final_done = True
            return WindowUpdate(output=self._output(finished=True))
        heard, tentative_before = self._drop_reheard(job, words), self.agreement.tentative
        self.agreement.insert(heard, settled_until=self.heard_until - EDGE_S, known_new=bool(job.forced))
        self._collect_commits()
        if not heard and not tentative_before:
            self._trim_in_pause_after_commits(words)
        # audio is dropped only on Whisper's own silence verdict: the stricter prompted-pass rule
        # above also fires mid-speech now and then, and would drop words never decoded
        really_silent = is_silence(result, self.options.no_speech_threshold)
        if really_silent and not self.agreement.tentative and self.window.size > SILENCE_TRIM_AFTER_S * SAMPLE_RATE:
            keep_from = self._window_end() - SILENCE_KEEP_S
            verdict = self.coverage.review(self.window, self._spoken_until(), keep_from, self.window_start,
                                           wrote_nothing=True)
            if verdict.retry_from is None:
                self._trim_to(keep_from)
            else:  # the VAD hears speech there: one more pass, without the prompt that may have silenced it
                self.unprompted = True
        return WindowUpdate(output=self._output(finished=False))

    def _cover_the_rest(self) -> WindowJob | None:
        """After the final pass: speech the VAD hears after the last committed word that has not
        had its extra pass yet (the pass ended its text early, or heard silence) gets one more
        final pass, over the audio from where the words end, prompted with the committed text."""
        verdict = self.coverage.review(self.window, self._spoken_until(), self._window_end(), self.window_start,
                                       wrote_nothing=not self._committed_in_window())
        if verdict.retry_from is None:
            return None
        # the same window again (nothing written, speech from its start): without the prompt
        self.unprompted = verdict.retry_from <= self.window_start + 1e-3 and not self._committed_in_window()
        self._restart_at(verdict.retry_from)
        return self.make_job(self.parts.features([self.window])[0].to(self.parts.dtype))

    def _retry(self, job: WindowJob) -> WindowJob:
        """The same window, already encoded, decoded again with the prefix as it is now."""
        retry = replace(job, forced=[], draft=[])
        self.current_job = retry
        retry.refresh_prefix()
        self.in_flight = True
        return retry

    def on_empty_end(self) -> RequestOutput:
        """End of input with no audio left in the window: the final is the committed text."""
        self.agreement.finish([])
        self._collect_commits()
        return self._output(finished=True)

    # ---- internals ----

    def _forced_tokens(self, final: bool) -> list[int]:
        """A pass starts from what is known of its window: the committed words still in it and,
        for the final pass, the tentative ones too, except those near the end of the audio the
        last pass had (the last words of a pass are often cut at its edge: "pain." for
        "painful"). The decoder then writes only what follows them, and the encoder still hears
        the words before, so the window need not be cut close to the new speech."""
        if self.unprompted:
            return []
        inside = self._committed_in_window()
        self._forced_committed = word_count(self.parts.tokenizer, inside)
        if final:
            inside += settled_tentative(self.agreement.tentative, self.heard_until)
        self._forced_words = inside
        text = join_words(inside).strip()
        return self.parts.tokenizer.encode(" " + text) if text else []

    def _drop_reheard(self, job: WindowJob, words: list[Word]) -> list[Word]:
        """The window still holds audio of committed words (it is trimmed in pauses after them),
        so a pass re-hears them first. A pass forced with them starts with exactly those words:
        drop them by count (their aligned times are no evidence: a lone word in a window of
        mostly silence drifts by seconds from pass to pass, and a re-heard "No." taken for a new
        one was committed twice). An unforced pass: stream_results.drop_reheard."""
        if job.forced:
            return words[self._forced_committed :]
        return drop_reheard(words, self._committed_in_window())

    def _restart_at(self, t: float) -> None:
        """Start the window at `t` (where the words end) for a coverage retry: the last pass's
        tokens count from the old start, so they are no draft for the next."""
        self._trim_to(t)
        self.last_pass_tokens = None
