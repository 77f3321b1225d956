"""Offline (and long-form) transcription of one request.

An `OfflineTranscription` walks a request's audio in 30 s windows, one `WindowJob` at a time:
it builds each job's prompt, accepts or retries (temperature fallback) the decoded result,
turns it into segments and words, and advances to where the last complete segment ended
(openai/whisper's `transcribe`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

import torch
from torch import Tensor

from engine.log_mel import EDGE_FRAMES, FRAMES_PER_SECOND, N_FRAMES, pad_window, padding_value
from engine.models.whisper.alignment import align_words
from engine.models.whisper.context import fit_frames
from engine.models.whisper.coverage import SpeechCoverage
from engine.models.whisper.decoding import DecodeGroup, text_may_end_at
from engine.models.whisper.owner import WindowedTranscription
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.transcript import (
    COMPRESSION_RATIO_THRESHOLD,
    PROMPT_RESET_TEMPERATURE,
    RawSegment,
    compression_ratio,
    is_silence,
    needs_fallback,
    runaway,
    split_segments,
    temperature_ladder,
)
from engine.models.whisper.window import WindowJob, WindowResult, WindowUpdate, attach_logprobs
from engine.request import Request
from engine.types import Alternative, RequestOutput, Segment, Word

FALLBACK_SEED_STRIDE = 1009  # seeds of a window's fallback attempts: seed + stride × window + ladder index
ALL_AT_ONCE = None
"""`fallback_width` of a request decoded alone: every hotter attempt of a failed window side by side."""
RUNAWAY_CHECK_EVERY = 8
"""Decoded tokens between two looks at a running attempt for a runaway loop (`cut_runaways`): the
look (detokenize, gzip) costs tens of microseconds."""


def cut_runaways(groups: Iterable[DecodeGroup]) -> None:
    """End at their next token the offline candidates that their windows find stuck in a loop
    (`OfflineTranscription.runs_away`), looking every RUNAWAY_CHECK_EVERY tokens: a greedy
    decode's one row, each sampled row on its own (best_of rows are independent candidates, and
    a looping one kept the others' rows in the batch until it reached the token limit), a beam
    only once every beam, finished ones included, loops (they trade places)."""
    for group in groups:
        owner = group.job.owner
        if group.done or not isinstance(owner, OfflineTranscription):
            continue
        decoded = max(len(tokens) for tokens in group.tokens)  # a sampled row may have ended long ago
        if decoded < group.checked_at + RUNAWAY_CHECK_EVERY:
            continue
        group.checked_at = decoded
        if group.beam > 1:
            if all(owner.runs_away(group.job, c) for c in group.candidates()):
                group.cut_short()
            continue
        group.cut_short([row for row, tokens in enumerate(group.tokens) if owner.runs_away(group.job, tokens)])


def uses_audio_padding(fit_context: bool) -> bool:
    """Whether an offline request's features follow the reference's padding (engine/log_mel.py).
    30 s windows do, as openai/whisper and Transformers compute them (our transcripts then agree
    with Transformers' to 0.61 % WER on the dev set, float32). 'fit' windows keep faster-whisper's
    constant padding: the encoded silence completing them is computed once for that constant, and
    completing them with the silence of each clip's own floor measured worse (dev set, int8:
    10.84 -> 11.15 % WER) without bringing them closer to the reference (context.py)."""
    return not fit_context


class OfflineTranscription(WindowedTranscription):
    """Transcribes one request's whole audio, window after window."""

    def __init__(self, request: Request, mel: Tensor, parts: WhisperParts, fit_context: bool = False,
                 coverage: SpeechCoverage | None = None, fallback_width: int | None = ALL_AT_ONCE,
                 speech_until: float | None = None, seams: Sequence[float] = ()):
        """`fit_context`: a window shorter than 30 s is encoded with the 'fit' context (context.py).
        `mel` follows the padding convention of the context (`uses_audio_padding`). `coverage`:
        speech a window leaves without words is decoded again (coverage.py); None: off.
        `fallback_width`: how many hotter attempts of a failed window decode at a time (None: all
        of them, `_fallback_jobs`); the transcript is the same whatever the width.
        `speech_until`: where (s into the audio) the VAD hears the speech end, for audio cut at
        a silence after it (a long recording's window); each window's text does not end well
        before it (WindowJob.speech_until). `seams`: where (s into the audio) pieces of a
        recording cut apart join (a long recording's window, longform.py)."""
        super().__init__(request, parts)
        self.seams = sorted(seams)
        self.coverage = coverage or SpeechCoverage(None)
        self.unprompted = False  # the next window is decoded without the previous text (a retry)
        self.fit_context = fit_context
        self.speech_until = speech_until
        self.mel = mel
        if uses_audio_padding(fit_context):
            self.content_frames = mel.shape[1] - EDGE_FRAMES
            self.pad_value = padding_value(mel)
        else:
            # the trailing frame (centred on the end padding) is dropped and padded like the rest,
            # as faster-whisper does
            self.content_frames = mel.shape[1] - 1 if mel.shape[1] > 1 else mel.shape[1]
            self.mel = mel[:, : self.content_frames]
            self.pad_value = 0.0
        self.seek = 0
        tok = parts.tokenizer
        self.initial_prompt = tok.encode(" " + self.options.prompt.strip()) if self.options.prompt else []
        self.history: list[int] = []  # text+timestamp tokens of accepted windows, for conditioning
        self.segments: list[Segment] = []
        self.segment_logprobs: list[list[float]] = []  # per segment, each of its tokens' log-probability
        self.window_nbest: list[tuple[list[int], float]] = []
        self.windows = 0
        self.attempts: list[WindowResult] = []  # the current window's decodes that failed the checks
        self.fallbacks: dict[int, WindowJob] = {}  # ladder index -> attempt (launched or waiting its turn)
        self.fallback_results: dict[int, WindowResult] = {}
        self.fallback_width = fallback_width
        self.next_fallback = 1  # ladder index of the next attempt to launch
        self.ladder = temperature_ladder(self.options.temperature, self.options.temperature_fallback)
        self.generator: torch.Generator | None = None
        if self.options.temperature > 0 or self.options.temperature_fallback:
            self.generator = torch.Generator(device=parts.device)
            self.generator.manual_seed(self.options.seed if self.options.seed is not None else 0)
        self.last_temperature = 0.0

    # ---- jobs ----

    def token_budget(self, frames: int) -> int | None:
        """Offline windows rely on the temperature fallback to stop runaway repetition."""
        return None

    def prompt_tokens(self) -> list[int]:
        """Keywords, the request's prompt and the text of accepted windows (unless a retry drops
        it), cut to the half of the text context openai/whisper gives a prompt."""
        conditioned = self.options.condition_on_previous_text and not self.unprompted
        prompt = self.initial_prompt + (self.history if conditioned else [])
        return self.keywords + prompt[-(self.parts.dims.n_text_ctx // 2 - 1 - len(self.keywords)):]

    def next_job(self) -> WindowJob | None:
        """The job for the window at `seek`, at the first temperature of the ladder."""
        if self.seek >= self.content_frames:
            return None
        frames = min(N_FRAMES, self.content_frames - self.seek)
        length = fit_frames(frames) if self.fit_context else N_FRAMES
        window = pad_window(self.mel, self.seek, length, self.pad_value)
        job = WindowJob(self, window, self.seek, frames, self.ladder[0], 0)
        if self.speech_until is not None:
            job.speech_until = self.speech_until - self.seek / FRAMES_PER_SECOND
        job.refresh_prefix()
        return job

    def _fallback_jobs(self, first: WindowJob) -> list[WindowJob]:
        """The window again at every hotter temperature of the ladder, decoded `fallback_width` at
        a time, coolest first (openai/whisper tries them one after another; the first that passes
        is kept either way). Each attempt samples from its own generator, seeded by the request's
        seed, the window and the temperature, so what it draws does not depend on its batch mates,
        on timing or on how many attempts decode at once."""
        base = self.options.seed if self.options.seed is not None else 0
        jobs = []
        for index in range(1, len(self.ladder)):
            generator = torch.Generator(device=self.parts.device)
            generator.manual_seed(base + FALLBACK_SEED_STRIDE * (self.windows + 1) + index)
            job = WindowJob(self, first.mel, first.seek, first.frames, self.ladder[index], index,
                            audio_features=first.audio_features, generator=generator)
            job.speech_until = first.speech_until
            job.refresh_prefix()
            jobs.append(job)
        return jobs

    # ---- results ----

    def runs_away(self, job: WindowJob, tokens: list[int]) -> bool:
        """Whether a candidate of a running attempt (`tokens` so far) is stuck in a loop, and a
        hotter attempt follows the attempt: it ends in a runaway (`runaway`: the same few tokens
        over and over) and its text fails Whisper's compression check already.
        Such a decode goes on to its token limit and fails that check there; ended now, it fails
        it now, and the next attempt starts that much sooner (on the long-form benchmark
        recording a window's greedy "a a a ..." ran 224 tokens, the last second of the
        recording's decode). A greedy decode's transcript is the same either way but for a loop
        left after that many repeats (never seen). A sampled attempt's best_of pick keeps a
        candidate that ended on its own over a cut one (DecodeGroup._finish_sampled: the cut one
        fails the check for certain; openai/whisper ranks by log-probability alone and then fails
        the attempt when a loop ranks first), the most likely of the cut ones only when every
        candidate was cut (a sampled attempt's text is a draw of the engine's own seeded
        generators either way, never the reference's); where every attempt fails,
        `_best_attempt` weighs the cut ones' tokens so far."""
        if job.ladder_index >= len(self.ladder) - 1:
            return False  # the last attempt: nothing would follow it
        eot = self.parts.tokenizer.eot
        return runaway([t for t in tokens if t < eot]) and compression_ratio(self._text_of(tokens)) > COMPRESSION_RATIO_THRESHOLD

    def on_window_done(self, job: WindowJob, result: WindowResult) -> WindowUpdate:
        if job.ladder_index > 0:
            return self._on_fallback_done(job, result)
        if len(self.ladder) > 1 and self._fails(result):
            self.attempts = [result]
            self.fallbacks = {j.ladder_index: j for j in self._fallback_jobs(job)}
            self.fallback_results = {}
            self.next_fallback = 1
            return WindowUpdate(jobs=self._launch_fallbacks())
        return self._accept(job, result)

    def _launch_fallbacks(self) -> list[WindowJob]:
        """The attempts to start now, coolest first: as many as keep `fallback_width` decoding.
        Side by side (a request alone) a failed window waits for one more decode whatever the
        ladder depth; one at a time (a long request's windows, which fill the batch anyway) it
        decodes best_of rows rather than best_of for every temperature, and a window that passes
        at the first hotter temperature, the common case, does the same work as openai/whisper."""
        width = len(self.ladder) if self.fallback_width is None else self.fallback_width
        running = sum(1 for i in range(1, self.next_fallback) if i not in self.fallback_results)
        jobs = []
        while self.next_fallback < len(self.ladder) and running < width:
            jobs.append(self.fallbacks[self.next_fallback])
            self.next_fallback += 1
            running += 1
        return jobs

    def _on_fallback_done(self, job: WindowJob, result: WindowResult) -> WindowUpdate:
        """Accept the coolest attempt that passes once every cooler one has failed; withdraw the
        hotter ones still decoding. All failed: the best of them (`_best_attempt`)."""
        if self.fallbacks.get(job.ladder_index) is not job:
            return WindowUpdate()  # withdrawn after a cooler attempt passed
        self.fallback_results[job.ladder_index] = result
        for index in range(1, len(self.ladder)):
            found = self.fallback_results.get(index)
            if found is None:
                return WindowUpdate(jobs=self._launch_fallbacks())  # a cooler attempt is still to decode
            if not self._fails(found):
                withdrawn = [j for i, j in self.fallbacks.items()
                             if index < i < self.next_fallback and i not in self.fallback_results]
                return self._accept(self.fallbacks[index], found, withdrawn)
        self.attempts += [self.fallback_results[i] for i in range(1, len(self.ladder))]
        return self._accept(job, self._best_attempt())

    def _fails(self, result: WindowResult) -> bool:
        return needs_fallback(result, self._text_of(result.tokens), self.options.no_speech_threshold)

    def _text_of(self, tokens: list[int]) -> str:
        """A decode's text as the fallback checks read it: stripped, as openai/whisper and
        faster-whisper compute its compression ratio."""
        return self.parts.tokenizer.decode(tokens).strip()

    def _accept(self, job: WindowJob, result: WindowResult, withdrawn: list[WindowJob] | None = None) -> WindowUpdate:
        tok = self.parts.tokenizer
        self.attempts = []
        self.fallbacks, self.fallback_results = {}, {}
        self.windows += 1
        self.last_temperature = result.temperature
        window_start = job.seek / FRAMES_PER_SECOND
        self.unprompted = False
        covered = window_start  # where the window's kept text ends (s)
        if self._silent(job, result):
            advance = job.frames
        else:
            raw, advance = split_segments(result.tokens, tok, window_start, job.frames)
            if job.speech_until is not None and text_may_end_at(job.speech_until, advance / FRAMES_PER_SECOND):
                # its text was free to end there (decoding.py): what is left is the speech's last
                # moment and the padding after it, not a sentence to decode again as a window of
                # its own (tiny.en wrote "word word ..." over such 0.4 s windows); speech the VAD
                # hears there without words is still decoded again (coverage.py)
                advance = job.frames
            kept = self._add_segments(job, raw, result)
            covered = max([covered, *(self._text_end(seg) for seg in kept)])
            if result.temperature <= PROMPT_RESET_TEMPERATURE:
                # the kept segments' tokens only, as openai/whisper and faster-whisper condition:
                # the unfinished tail after the last timestamp pair is decoded again by the next
                # window, and in its prompt it told the model that audio was already transcribed
                self.history.extend(t for seg in kept for t in seg.tokens)
            else:
                self.history = []
            if result.nbest:
                self.window_nbest = result.nbest
        self.seek = self._next_seek(job, covered, job.seek + advance, wrote_nothing=covered == window_start)
        nxt = self.next_job()
        if nxt is None:
            return WindowUpdate(output=self.finish(), withdrawn=withdrawn or [])
        return WindowUpdate(jobs=[nxt], output=self.partial(), withdrawn=withdrawn or [])

    def _text_end(self, segment: RawSegment) -> float:
        """Where a kept segment's text ends, for coverage: at its end timestamp, or at the first
        seam after its start, where the stitched segment ends too (longform.py). tiny.en can
        stretch a segment's timestamps over the pieces after a seam while writing none of their
        speech ("... on the left." timed to a window's end over 8 s of falsetto and "I hardly
        know her"); read to its timestamp, that speech looked covered and was lost."""
        seam = next((s for s in self.seams if s > segment.start), None)
        return segment.end if seam is None else min(segment.end, seam)

    def _silent(self, job: WindowJob, result: WindowResult) -> bool:
        """Whisper's silence verdict, or a window Whisper thinks holds no speech (no-speech
        probability over the threshold) although it wrote confident text, where the VAD hears
        no speech either: tiny.en, given the 0.3 s of silence after a session's last word as a
        window of its own, writes "One. One. One. One. One." there (no-speech 0.77, mean
        log-probability -0.66). Both must agree: either alone misses quiet or unusual speech."""
        threshold = self.options.no_speech_threshold
        if is_silence(result, threshold):
            return True
        if result.no_speech_prob <= threshold:
            return False
        start = job.seek / FRAMES_PER_SECOND
        return not self.coverage.hears_speech(self.request.audio, start, start + job.frames / FRAMES_PER_SECOND)

    def _next_seek(self, job: WindowJob, covered: float, advance_to: int, wrote_nothing: bool) -> int:
        """Where the next window starts: `advance_to` (mel frames) as decoded, unless the VAD hears
        speech between the end of the window's text (`covered`, s) and there that has not been
        decoded again yet; then from where the text ends (coverage.py). A window that wrote
        nothing is decoded again from shortly before that speech, without the previous text as
        prompt if that is where it started (a prompt can talk tiny.en into silence)."""
        verdict = self.coverage.review(self.request.audio, covered, min(advance_to, self.content_frames) / FRAMES_PER_SECOND,
                                       wrote_nothing=wrote_nothing)
        if verdict.retry_from is None:
            return advance_to
        seek = max(job.seek, min(advance_to - 1, round(verdict.retry_from * FRAMES_PER_SECOND)))
        self.unprompted = seek == job.seek
        return seek

    def _best_attempt(self) -> WindowResult:
        """Every temperature failed: keep the most confident decode that is not repetitive (or the
        most confident at all), as faster-whisper does, rather than the last, hottest one. The
        temperature reported stays the last one, so the prompt is still reset after it."""
        below = [r for r in self.attempts if compression_ratio(self._text_of(r.tokens)) <= COMPRESSION_RATIO_THRESHOLD]
        best = max(below or self.attempts, key=lambda r: r.avg_logprob)
        return replace(best, temperature=self.attempts[-1].temperature)

    def _add_segments(self, job: WindowJob, raw: list[RawSegment], result: WindowResult) -> list[RawSegment]:
        """Add the window's segments that hold text and take time (openai/whisper and
        faster-whisper drop the others); returns them."""
        tok = self.parts.tokenizer
        duration = self.request.duration
        kept: list[tuple[list[int], list[int], str, float, float]] = []  # tokens, text tokens, text, start, end
        kept_logprobs: list[list[float]] = []
        kept_raw: list[RawSegment] = []
        offset = 0  # the raw segments are consecutive slices of result.tokens
        for seg in raw:
            lps = result.token_logprobs[offset : offset + len(seg.tokens)]
            offset += len(seg.tokens)
            text_tokens = [t for t in seg.tokens if t < tok.eot]
            text = tok.decode(text_tokens)
            if not text.strip() or seg.start == seg.end:
                continue
            kept_raw.append(seg)
            start = max(0.0, min(seg.start, duration))
            kept.append((seg.tokens, text_tokens, text, start, max(start, min(seg.end, duration))))
            kept_logprobs.append([lp for t, lp in zip(seg.tokens, lps) if t < tok.eot])
        self.segment_logprobs.extend(kept_logprobs)
        words: list[list[Word] | None] = [None] * len(kept)
        if self.options.word_timestamps and kept:
            words = list(self._align(job, [(k[1], k[3], k[4]) for k in kept]))
        for (tokens, _, text, start, end), seg_words in zip(kept, words):
            self.segments.append(
                Segment(
                    id=len(self.segments),
                    start=round(start, 3),
                    end=round(end, 3),
                    text=text,
                    tokens=tokens,
                    avg_logprob=result.avg_logprob,
                    no_speech_prob=result.no_speech_prob,
                    compression_ratio=compression_ratio(self._text_of(result.tokens)),
                    temperature=result.temperature,
                    words=seg_words,
                )
            )
        return kept_raw

    def _align(self, job: WindowJob, segments: list[tuple[list[int], float, float]]) -> list[list[Word]]:
        """Words of each (text tokens, start, end) segment of one window. The whole window's text is
        aligned at once, as openai/whisper does: DTW stretches the text it is given over the whole
        window, so aligning one segment at a time smeared each segment's words across 30 s."""
        tok = self.parts.tokenizer
        assert job.audio_features is not None
        sot = tok.sot_sequence(self.language, self.options.task, timestamps=False)
        all_tokens = [t for text_tokens, _, _ in segments for t in text_tokens]
        words = align_words(
            self.parts.model.decoder, tok, self.parts.alignment_heads, sot[:-1], all_tokens,
            job.audio_features, job.frames, job.seek / FRAMES_PER_SECOND,
        )
        # a word belongs to the segment holding its first token
        _, word_tokens = tok.split_to_word_tokens(all_tokens)
        seg_of_token = [i for i, (text_tokens, _, _) in enumerate(segments) for _ in text_tokens]
        out: list[list[Word]] = [[] for _ in segments]
        first = 0
        for w, pieces in zip(words, word_tokens):
            out[seg_of_token[first]].append(w)
            first += len(pieces)
        for seg_words, (_, seg_start, seg_end) in zip(out, segments):
            for w in seg_words:  # keep each word inside its segment and the audio
                w.start = round(min(max(w.start, seg_start), seg_end), 3)
                w.end = round(min(max(w.end, w.start), seg_end), 3)
        return out

    # ---- outputs ----

    def _text(self) -> str:
        return "".join(s.text for s in self.segments).strip()

    def partial(self) -> RequestOutput:
        out = RequestOutput(
            request_id=self.request.request_id,
            text=self._text(),
            finished=False,
            language=self.language,
            duration=self.seek / FRAMES_PER_SECOND,
            committed=self._text(),
            segments=list(self.segments),
        )
        self._attach_logprobs(out)
        return out

    def _attach_logprobs(self, out: RequestOutput) -> None:
        if not self.options.logprobs:
            return
        eot = self.parts.tokenizer.eot
        tokens = [t for s in self.segments for t in s.tokens if t < eot]
        attach_logprobs(out, self.parts.tokenizer, tokens, [lp for lps in self.segment_logprobs for lp in lps])

    def finish(self) -> RequestOutput:
        tok = self.parts.tokenizer
        tokens = [t for s in self.segments for t in s.tokens if t < tok.eot]
        text = self._text()
        words = [w for s in self.segments for w in (s.words or [])] if self.options.word_timestamps else None
        if self.windows == 1 and len(self.window_nbest) > 1:
            nbest: list[Alternative] = []
            for toks, score in self.window_nbest:  # beams differing only in timestamps read the same
                alt_text = tok.decode([t for t in toks if t < tok.eot]).strip()
                if all(a.text != alt_text for a in nbest):
                    nbest.append(Alternative(alt_text, round(math.exp(score), 4)))
            nbest = nbest[: self.options.n_best]
        else:
            logprobs = [s.avg_logprob for s in self.segments]
            conf = math.exp(sum(logprobs) / len(logprobs)) if logprobs else 0.0
            nbest = [Alternative(text, round(conf, 4))]
        out = RequestOutput(
            request_id=self.request.request_id,
            text=text,
            tokens=tokens,
            finished=True,
            finish_reason="stop",
            words=words,
            segments=list(self.segments),
            nbest=nbest,
            confidence=nbest[0].confidence if nbest else None,
            language=self.language,
            duration=self.request.duration,
            committed=text,
        )
        self._attach_logprobs(out)
        return out
