"""Offline requests made ready to decode: each admitted request becomes a transcription with its
first jobs (a long one, cut at VAD silences: its first windows' jobs, longform.py), their log-mel
features computed FEATURES_PER_CALL pieces a call per padding convention.

    Collator(parts, options, vad, coverage, windows_in_flight).collate(requests, outputs)
                                                    -> [(request, state, jobs)]
    collate_beside(collator, requests, threads, default_threads)  -> Future of (that list, outputs)
    beside = CollationsBeside(collator, threads, default_threads)
    beside.start(requests); beside.release(request); beside.take(outputs, wait_s) -> [(request, state, jobs)]

A request whose VAD or features fail gets its error output and no state; one that needs no
decoding (all silence) gets its finished output and no jobs.

A long request's collation (the VAD over the whole recording, then every window's features) takes
seconds for an hour of audio: the 601 s long-form recording's takes 0.36-0.5 s of the engine thread
(/metrics' offline.collate stage; ~1 s before its VAD was scored in batched calls). Run
there, it stops every live stream's passes for that long. `collate_beside` runs it on a thread of
its own that ends with it, torch on one intra-op thread there, so the engine thread keeps stepping
meanwhile and its own parallel ops keep their spinning OpenMP workers: a second thread running
parallel regions would make them wait for sleeping ones (app/passing_thread.py). The runner does
so only while it has other work; an idle engine collates on its own thread, on every core.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait

import torch
from torch import Tensor

from engine.log_mel import N_SAMPLES, SAMPLE_RATE
from engine.models.whisper.coverage import SpeechCoverage
from engine.models.whisper.longform import SegmentedTranscription, window_request
from engine.models.whisper.offline import OfflineTranscription, uses_audio_padding
from engine.models.whisper.options import WhisperOptions
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.window import WindowJob
from engine.request import Request, error_output
from engine.types import RequestOutput
from engine.vad import VoiceActivityModel
from engine.vad.windows import SpeechMap, SpeechWindow, speech_map, speech_windows

logger = logging.getLogger(__name__)

FAILED = "failed"  # a request whose speech windows could not be found (its error is reported)

Collated = tuple[Request, OfflineTranscription | SegmentedTranscription, list[WindowJob]]

FEATURES_PER_CALL = 8
"""Pieces (requests, or a long request's windows) featurized in one call: a call's STFT holds
every piece's spectrum at once (~10 MB for a 30 s window), so the transient stays bounded
however many windows are featurized (the same features bit for bit as one call)."""


class Collator:
    def __init__(self, parts: WhisperParts, options: WhisperOptions, vad: VoiceActivityModel | None,
                 coverage: Callable[[], SpeechCoverage], windows_in_flight: int):
        """`vad`: cuts long requests into windows decoded side by side (None: window after
        window); `coverage`: a new request's coverage bookkeeping; `windows_in_flight`: most
        windows of a long request featurized and not done at once (longform.py: its memory)."""
        self.parts = parts
        self.options = options
        self.vad = vad
        self.coverage = coverage
        self.windows_in_flight = windows_in_flight

    def is_long(self, request: Request) -> bool:
        """Whether `request` is cut at VAD silences into windows (its collation takes a VAD pass)."""
        assert request.audio is not None
        return (self.options.offline_long_form == "parallel" and self.vad is not None
                and request.audio.shape[0] > N_SAMPLES)

    def collate(self, requests: list[Request], outputs: list[RequestOutput]) -> list[Collated]:
        """Log-mel features of `requests` (a long one's: of each of its speech windows) in one
        call; each becomes an offline transcription with the jobs that wait to be encoded first
        (a long one: all of its windows'). Error and finished outputs go to `outputs`."""
        windows = {r.request_id: self._speech_windows(r, outputs) for r in requests}
        requests = [r for r in requests if windows[r.request_id] != FAILED]
        # what is featurized: the request itself, or each of its first windows
        pieces = [[r] if not isinstance(plan := windows[r.request_id], tuple)
                  else [window_request(r, w) for w in plan[1][: self.windows_in_flight]]
                  for r in requests]
        flat = [p for ps in pieces for p in ps]
        mels = iter(self._features(flat, [self._fits(r) for r in flat], outputs))
        ready: list[Collated] = []
        for request, ps in zip(requests, pieces):
            own = [next(mels) for _ in ps]
            if any(m is None for m in own):
                continue
            own_mels = [m.to(self.parts.dtype) for m in own if m is not None]
            fit = self._fits(request)
            plan = windows[request.request_id]
            state: OfflineTranscription | SegmentedTranscription
            if isinstance(plan, tuple):
                state = SegmentedTranscription(request, plan[0], plan[1], list(zip(ps, own_mels)), self.parts, fit,
                                               self.coverage, self._window_features(fit))
                try:  # an empty first window has the next one featurized in its place
                    jobs = state.first_jobs()
                except Exception as exc:
                    outputs.append(error_output(request, "features", exc))
                    continue
            else:
                state = OfflineTranscription(request, own_mels[0], self.parts, fit_context=fit, coverage=self.coverage())
                job = state.next_job()
                jobs = [] if job is None else [job]
            if not jobs:
                outputs.append(state.finish())
                continue
            ready.append((request, state, jobs))
        return ready

    def _fits(self, request: Request) -> bool:
        """Whether a request's windows are encoded over their audio only ('fit'). Word timing reads
        cross-attention over the real audio, learnt on 30 s encodings: a request with word
        timestamps keeps them (measured: a 'fit' window moved a word 0.5 s into a pause of the
        long-form test recording)."""
        return self.options.offline_encoder_context == "fit" and not request.decoding.word_timestamps

    def _window_features(self, fit: bool) -> Callable[[list[Request]], list[Tensor]]:
        """How a long request's later windows are featurized, each when a window before is done."""
        audio_padding = uses_audio_padding(fit)

        def featurize(requests: list[Request]) -> list[Tensor]:
            mels = self.parts.features([r.audio for r in requests], audio_padding=audio_padding)
            return [m.to(self.parts.dtype) for m in mels]

        return featurize

    def _features(self, requests: list[Request], fits: list[bool], outputs: list[RequestOutput]) -> list[Tensor | None]:
        """Log-mel features of offline requests, FEATURES_PER_CALL in a call per padding
        convention (one by one if a call fails: only the culprit fails)."""
        mels: list[Tensor | None] = [None] * len(requests)
        for audio_padding in (True, False):
            same = [i for i, fit in enumerate(fits) if uses_audio_padding(fit) == audio_padding]
            for start in range(0, len(same), FEATURES_PER_CALL):
                index = same[start : start + FEATURES_PER_CALL]
                try:
                    batch = self.parts.features([requests[i].audio for i in index], audio_padding=audio_padding)
                    for i, mel in zip(index, batch):
                        mels[i] = mel
                except Exception as exc:
                    logger.warning("batched feature extraction failed (%s); retrying one by one", exc)
                    for i in index:
                        try:
                            mels[i] = self.parts.features([requests[i].audio], audio_padding=audio_padding)[0]
                        except Exception as one_exc:
                            outputs.append(error_output(requests[i], "features", one_exc))
        return mels

    def _speech_windows(self, request: Request,
                        outputs: list[RequestOutput]) -> tuple[SpeechMap, list[SpeechWindow]] | str | None:
        """A long request's speech and its windows (decoded side by side, longform.py); None: decoded
        window after window (short, asked so, or no VAD); FAILED: the VAD failed (its error
        output is added)."""
        if not self.is_long(request):
            return None
        assert request.audio is not None and self.vad is not None
        try:  # timed as part of offline.collate
            speech = speech_map(request.audio, self.vad)
            return speech, speech_windows(request.audio, speech, N_SAMPLES / SAMPLE_RATE)
        except Exception as exc:
            outputs.append(error_output(request, "features", exc))
            return FAILED


def collate_beside(collator: Collator, requests: list[Request], threads: int,
                   default_threads: int) -> Future[tuple[list[Collated], list[RequestOutput]]]:
    """`collator.collate(requests)` on a new thread that ends with it, torch on `threads` intra-op
    threads there: its collated requests and the outputs it gave (errors, finished ones).
    `default_threads`: the engine's thread count, which torch's default for new threads (set too
    by `torch.set_num_threads`) is left at afterwards, whatever another thread set meanwhile."""
    future: Future[tuple[list[Collated], list[RequestOutput]]] = Future()

    def run() -> None:
        future.set_running_or_notify_cancel()
        try:
            torch.set_num_threads(threads)
            with torch.inference_mode():
                outputs: list[RequestOutput] = []
                ready = collator.collate(requests, outputs)
            future.set_result((ready, outputs))
        except BaseException as exc:  # handed to the engine thread, which fails these requests
            future.set_exception(exc)
        finally:
            torch.set_num_threads(default_threads)

    # not a daemon: a process that exits while a long request's VAD runs here (a server drained by
    # SIGTERM) waits for it (well under a second per 10 minutes of audio) instead of tearing torch
    # down under it, which aborted the process ("terminate called without an active exception")
    threading.Thread(target=run, name="oasr-collate", daemon=False).start()
    return future


class CollationsBeside:
    """Long requests being collated beside the engine thread (`collate_beside`), until the engine
    thread takes them: a request released meanwhile is dropped when its collation comes back (its
    thread cannot be stopped; its work is thrown away)."""

    def __init__(self, collator: Collator, threads: int, default_threads: int):
        """`threads`: torch's intra-op threads on a collation's thread; `default_threads`: the
        engine's, see `collate_beside`."""
        self.collator = collator
        self.threads = threads
        self.default_threads = default_threads
        self._pending: list[tuple[list[Request], Future[tuple[list[Collated], list[RequestOutput]]]]] = []

    def __bool__(self) -> bool:
        return bool(self._pending)

    def requests(self) -> int:
        """How many requests are being collated and not released."""
        return sum(len(requests) for requests, _ in self._pending)

    def start(self, requests: list[Request]) -> None:
        self._pending.append((list(requests), collate_beside(self.collator, list(requests), self.threads,
                                                             self.default_threads)))

    def release(self, request: Request) -> None:
        for requests, _ in self._pending:
            requests[:] = [r for r in requests if r is not request]

    def take(self, outputs: list[RequestOutput], wait_s: float = 0.0) -> list[Collated]:
        """The collated requests that are back (waiting up to `wait_s` for one first), their
        error and finished outputs added to `outputs`; a collation that raised fails its requests."""
        if self._pending and wait_s > 0:
            wait([f for _, f in self._pending], timeout=wait_s, return_when=FIRST_COMPLETED)
        taken: list[Collated] = []
        pending = []
        for requests, future in self._pending:
            if not future.done():
                pending.append((requests, future))
                continue
            wanted = {r.request_id for r in requests}  # those not released meanwhile
            try:
                ready, given = future.result()
            except Exception as exc:
                outputs.extend(error_output(r, "features", exc) for r in requests)
                continue
            outputs.extend(o for o in given if o.request_id in wanted)
            taken.extend(c for c in ready if c[0].request_id in wanted)
        self._pending = pending
        return taken

    def clear(self) -> None:
        """Forget every collation (their threads end on their own; nothing takes their result)."""
        self._pending.clear()


__all__ = ["FEATURES_PER_CALL", "Collated", "CollationsBeside", "Collator", "collate_beside"]
