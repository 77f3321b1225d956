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
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from itertools import takewhile

import numpy as np
import torch

from engine.log_mel import FRAMES_PER_SECOND, N_FRAMES, SAMPLE_RATE, pad_window
from engine.models.whisper.alignment import align_words
from engine.models.whisper.catchup import CatchUpRound, plan_cut
from engine.models.whisper.context import fit_frames
from engine.models.whisper.coverage import SpeechCoverage
from engine.models.whisper.owner import WindowedTranscription
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.stream_cuts import cut_after_commits, cut_in_pause
from engine.models.whisper.stream_output import attach_word_logprobs, stream_output
from engine.models.whisper.totals import WhisperTotals
from engine.models.whisper.transcript import (
    COMPRESSION_RATIO_THRESHOLD,
    compression_ratio,
    is_silence,
    loop_start,
)
from engine.models.whisper.window import WindowJob, WindowResult, WindowUpdate
from engine.request import Request
from engine.streaming.local_agreement import LocalAgreement, join_words, normalize_word
from engine.types import Delay, RequestOutput, Word
from engine.vad import VoiceActivityModel

logger = logging.getLogger(__name__)

PROMPT_CHARS = 200  # committed text carried as the prompt of the next pass
SILENCE_KEEP_S = 1.0  # on a silent pass, keep only this much audio (speech may be starting)
SILENCE_TRIM_AFTER_S = 5.0  # ...once the window is at least this long
SILENCE_PASS_EVERY_S = 3.0  # audio without speech still gets a pass this often (speech the VAD misses)
PASS_AFTER_SPEECH_S = 1.0  # passes are skipped once one has heard this much silence after the speech
REHEARD_TOLERANCE_S = 0.6  # a re-heard committed word ends this close to where it ended before
EDGE_S = 0.5  # agreed words ending this close to the end of a pass's audio wait for the next pass
UNSETTLED_TAIL_S = 1.0  # the last words of a pass, this close to its audio's end, are not forced on the final
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


class StreamingTranscription(WindowedTranscription):
    def __init__(self, request: Request, parts: WhisperParts, window_s: float, fit_context: bool,
                 coverage: SpeechCoverage | None = None, totals: WhisperTotals | None = None):
        """`window_s`: longest uncommitted window re-decoded per pass; `fit_context`: encode a
        pass's window plus silence ('fit', context.py) instead of a zero-padded 30 s window;
        `coverage`: speech no word covers gets one more pass (coverage.py); None: off; `totals`:
        the runner's counts, which each pass and the audio it encodes are added to."""
        super().__init__(request, parts)
        self.totals = totals or WhisperTotals()
        self.coverage = coverage or SpeechCoverage(None)
        self.window_cap = int(window_s * SAMPLE_RATE)  # samples
        self.fit_context = fit_context
        self.generator: torch.Generator | None = None
        self.window = np.zeros(0, dtype=np.float32)
        self.window_start = 0.0  # seconds of stream time at window[0]
        self.new_samples = 0
        self.in_flight = False
        self.final_done = False
        self.cadence, agree = DELAYS[self.options.delay or "low"]
        """cadence: the engine's pass step is multiplied by it (the delay's pass cadence)."""
        self.agreement = LocalAgreement(agreement=agree)
        self._forced_words: list[Word] = []  # the words a final pass is forced with (logprobs known)
        self._forced_committed = 0  # how many of the pass's first words are forced committed ones
        self.committed_words: list[Word] = []
        self.passes = 0
        self.current_job: WindowJob | None = None  # the pass in flight
        self.last_pass_tokens: list[int] | None = None  # what the last pass decoded, forced words first
        self.last_pass_start = 0.0  # where its window started (its timestamps count from there)
        self.unprompted = False  # the last prompted pass heard speech and wrote nothing
        self.heard_until = 0.0  # stream time (s) up to which the last finished pass decoded
        self.cover_due = False  # a skipped pass kept speech no word covers: the next pass runs
        self.catch_up: CatchUpRound | None = None  # the backlog round decoding, if any (catchup.py)
        self.spoken = False
        """A pass started over audio the VAD hears speech in, or decoded text: the stream's passes
        cost what speech costs from now on (over silence they decode a few tokens or are skipped;
        the live gate counts the streams that have not, app/admission.py)."""

    # ---- scheduling ----

    def absorb(self) -> None:
        """Move the request's pending audio into the window."""
        chunk = self.request.take_pending_audio()
        if chunk.size:
            self.window = np.concatenate([self.window, chunk]) if self.window.size else chunk
            self.new_samples += int(chunk.size)

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

    def _window_end(self) -> float:
        return self.window_start + self.window.size / SAMPLE_RATE

    def is_final_pass(self) -> bool:
        return self.request.input_finished and not self.request.pending_audio

    def window_audio(self) -> np.ndarray:
        return self.window

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
        job.draft = self._draft(job.forced)
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
        prompt_text = "" if self.unprompted else (self.options.prompt or "") + join_words(self._prompt_words())
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
        looping = self._looping(result.tokens)
        if job.forced:  # forced tokens were read, not chosen: their log-probabilities come from the words
            result = replace(result, tokens=job.forced + result.tokens,
                             token_logprobs=[math.nan] * len(job.forced) + result.token_logprobs)
        self.last_pass_tokens, self.last_pass_start = result.tokens, self.window_start
        silent = self._silent(result)
        mute = not silent and not any(t < self.parts.tokenizer.eot for t in result.tokens)
        self.spoken = self.spoken or not (silent or mute)
        if (mute or looping) and (job.sot_index or job.forced) and not self.unprompted:
            # tiny.en, prompted with a sentence's first words over audio starting mid-sentence,
            # can answer with an empty transcript although it hears speech, and prompted with
            # "word, word, word," it loops: decode without prompt (or forced words)
            self.unprompted = True
            self.last_pass_tokens = None  # no draft from a loop
            if job.final and self.is_final_pass():
                return WindowUpdate([self._retry(job)])
            return WindowUpdate()
        self.unprompted = self.unprompted and mute
        words = [] if silent else self._words(job, result)
        if looping:  # unprompted already: the loop is the model's on this audio (live passes have no
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

    def _spoken_until(self) -> float:
        """Stream time (s) up to which words cover the window: the last committed word's end."""
        return max([self.window_start, *(w.end for w in self.committed_words[-1:])])

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

    def _silent(self, result: WindowResult) -> bool:
        """Whisper's no-speech probability alone decides for a live pass. Offline decoding also
        asks for a low log-probability, but a short window left after a committed sentence makes
        the model repeat its prompt fluently (measured: no-speech 0.9+, confident text)."""
        prompted = bool(self.agreement.committed_text)
        return is_silence(result, self.options.no_speech_threshold) or (
            prompted and result.no_speech_prob > self.options.no_speech_threshold
        )

    def _forced_tokens(self, final: bool) -> list[int]:
        """A pass starts from what is known of its window: the committed words still in it and,
        for the final pass, the tentative ones too, except those near the end of the audio the
        last pass had (the last words of a pass are often cut at its edge: "pain." for
        "painful"). The decoder then writes only what follows them, and the encoder still hears
        the words before, so the window need not be cut close to the new speech."""
        if self.unprompted:
            return []
        inside = self._committed_in_window()
        self._forced_committed = self._word_count(inside)
        if final:
            settled = self.heard_until - UNSETTLED_TAIL_S
            inside += list(takewhile(lambda w: w.end <= settled, self.agreement.tentative))
        self._forced_words = inside
        text = join_words(inside).strip()
        return self.parts.tokenizer.encode(" " + text) if text else []

    def _draft(self, forced: list[int]) -> list[int]:
        """What this pass will likely decode after `forced`: what the last pass decoded after
        the same tokens (consecutive passes hear mostly the same audio; measured at 16 lockstep
        sessions, half of the tokens passes decode are the last pass's). Without forced words a
        pass decodes with timestamps, and a draft without them, or with timestamps counted from
        where the window started before a trim, would fail at its first token."""
        tok = self.parts.tokenizer
        last = self.last_pass_tokens
        if last is None or last[: len(forced)] != forced:
            return []
        rest = last[len(forced) :]
        if forced:
            rest = [t for t in rest if t < tok.eot]
        elif self.window_start != self.last_pass_start or not any(t >= tok.timestamp_begin for t in rest):
            return []  # timestamps from another window start would fail at once
        return [*rest, tok.eot]

    def _word_count(self, words: list[Word]) -> int:
        """How many words `words` make once joined and tokenized again (as a pass reads them)."""
        text = join_words(words).strip()
        tok = self.parts.tokenizer
        return len(tok.split_to_word_tokens(tok.encode(" " + text))[0]) if text else 0

    def _committed_in_window(self) -> list[Word]:
        """Committed words whose audio the window still holds (it is cut in pauses after them),
        found from the end: a pass's work does not grow with the session's transcript. Aligned
        ends are not in order (a lone word is aligned up to seconds late), so the search goes back
        until a word ends a whole window before the window's start."""
        inside: list[Word] = []
        for w in reversed(self.committed_words):
            if w.end > self.window_start + 1e-3:
                inside.append(w)
            elif w.end <= self.window_start - self.window_cap / SAMPLE_RATE:
                break
        return inside[::-1]

    def _prompt_words(self) -> list[Word]:
        """The committed words before the window, back to PROMPT_CHARS of text (the prompt's
        budget), found from the end."""
        words: list[Word] = []
        chars = 0
        for w in reversed(self.committed_words):
            if w.end <= self.window_start + 1e-3:
                words.append(w)
                chars += len(w.word)
                if chars >= PROMPT_CHARS:
                    break
        return words[::-1]

    def _looping(self, tokens: list[int]) -> bool:
        """The pass wrote the same few words over and over (Whisper's own repetition test)."""
        tok = self.parts.tokenizer
        text = tok.decode([t for t in tokens if t < tok.eot])
        return compression_ratio(text) > COMPRESSION_RATIO_THRESHOLD

    def _words(self, job: WindowJob, result: WindowResult) -> list[Word]:
        tok = self.parts.tokenizer
        text_tokens = [t for t in result.tokens if t < tok.eot]
        if not text_tokens or job.audio_features is None:
            return []
        sot = tok.sot_sequence(self.language, self.options.task, timestamps=False)
        words = align_words(self.parts.model.decoder, tok, self.parts.alignment_heads, sot[:-1], text_tokens,
                           job.audio_features, job.frames, self.window_start, job.audio_positions,
                           self.parts.silence_kv([job]), confidence=self.options.word_timestamps,
                           cross=job.cross_kv)
        if self.options.logprobs:
            attach_word_logprobs(words, result, tok, self._forced_words if job.forced else [])
        # punctuation alone is what tiny.en says over a pause: committing it prints ". . . ."
        return [w for w in words if any(ch.isalnum() for ch in w.word)]

    def _drop_reheard(self, job: WindowJob, words: list[Word]) -> list[Word]:
        """The window still holds audio of committed words (it is trimmed in pauses after them),
        so a pass re-hears them first. A pass forced with them starts with exactly those words:
        drop them by count (their aligned times are no evidence: a lone word in a window of
        mostly silence drifts by seconds from pass to pass, and a re-heard "No." taken for a new
        one was committed twice). An unforced pass: drop the hypothesis up to its match of the
        last committed word in the window (matched by text near its time)."""
        if job.forced:
            return words[self._forced_committed :]
        inside = self._committed_in_window()
        if not inside or not words:
            return words
        last = inside[-1]
        key = normalize_word(last.word)
        # the occurrence nearest in time: "five five" re-heard must drop only the first "five"
        matches = [(abs(w.end - last.end), i) for i, w in enumerate(words)
                   if normalize_word(w.word) == key and abs(w.end - last.end) <= REHEARD_TOLERANCE_S]
        if matches:
            return words[min(matches)[1] + 1 :]
        return [w for w in words if (w.start + w.end) / 2 > last.end]

    def _collect_commits(self) -> None:
        """Record newly committed words and cut the window where stream_cuts.py says."""
        new = self.agreement.take_committed()
        if not new:
            return
        self.committed_words.extend(new)
        cut = cut_after_commits(self._committed_in_window(), new, self.window.size / SAMPLE_RATE)
        if cut is not None:
            self._trim_to(cut)

    def _trim_in_pause_after_commits(self, reheard: list[Word]) -> None:
        """A pass that wrote nothing new (`reheard`) after a pause: stream_cuts.cut_in_pause."""
        cut = cut_in_pause(self._committed_in_window(), reheard, self.heard_until)
        if cut is not None:
            self._trim_to(cut)

    def _restart_at(self, t: float) -> None:
        """Start the window at `t` (where the words end) for a coverage retry: the last pass's
        tokens count from the old start, so they are no draft for the next."""
        self._trim_to(t)
        self.last_pass_tokens = None

    def _trim_to(self, t: float) -> None:
        cut = round((t - self.window_start) * SAMPLE_RATE)
        cut = max(0, min(cut, self.window.size))
        if cut:
            self.window = self.window[cut:]
            self.window_start += cut / SAMPLE_RATE

    def _output(self, finished: bool) -> RequestOutput:
        return stream_output(self.request.request_id, self.agreement, self.committed_words, self.options,
                             self.parts.tokenizer, self.language, self.request.received_samples / SAMPLE_RATE,
                             finished)

