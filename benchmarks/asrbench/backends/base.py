"""What a backend is: declared capabilities per kind, typed options, and the calls kinds make.

A backend never emulates a capability it lacks: `capabilities()` answers `unsupported` with
a reason and the kind is skipped and reported as such.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import yaml

from benchmarks.asrbench.errors import BackendError as BackendError
from benchmarks.asrbench.errors import OptionError as OptionError

KINDS = ("cold_start", "single", "batch", "throughput", "load", "longform", "streaming")




@dataclass(frozen=True)
class Capability:
    supported: bool
    reason: str = ""


def supported(note: str = "") -> Capability:
    return Capability(True, note)


def unsupported(reason: str) -> Capability:
    return Capability(False, reason)


@dataclass(frozen=True)
class Option:
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None

    def parse(self, key: str, raw: str) -> Any:
        """`raw` is parsed as YAML (`-o "engine={max_wait_time: 0.05}"`, `-o "server_args=[--x, y]"`),
        then checked against the type of the default."""
        try:
            value: Any = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise OptionError(f"option {key}={raw!r}: not valid YAML ({exc})") from exc
        kind = type(self.default) if self.default is not None else None
        if kind is str:
            value = raw if not isinstance(value, str) else value  # `-o model=1.0` stays the string "1.0"
        elif kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if (kind is not None and not isinstance(value, kind)) or (kind is int and isinstance(value, bool)):
            raise OptionError(f"option {key}={raw!r}: expected {kind.__name__ if kind else 'a value'}")
        if self.choices is not None and value not in self.choices:
            raise OptionError(f"option {key}={raw!r}: expected one of {list(self.choices)}")
        return value


@dataclass
class Utterance:
    """One workload item as a request: the decoded audio and its reference.

    Every backend gets the same waveform: in-process backends the array, network backends
    the same samples as a PCM16 WAV (encoded once, before timing starts)."""

    item_id: str
    audio: np.ndarray
    """float32 mono at 16 kHz."""
    text: str
    bucket: str = ""
    _wav: bytes | None = field(default=None, repr=False)

    @property
    def duration_s(self) -> float:
        return len(self.audio) / 16_000

    def wav_bytes(self) -> bytes:
        if self._wav is None:
            from benchmarks.asrbench.audio import to_wav_bytes

            self._wav = to_wav_bytes(self.audio)
        return self._wav


class StreamSession:
    """One live stream: the kind sends chunks, the backend records partials as they arrive.

    Backends subclass this and call `_partial` / `_final` / `_fail` from whatever thread
    receives events; times are `time.perf_counter()` at receipt.
    """

    def __init__(self) -> None:
        self.partials: list[tuple[float, str]] = []
        self.final_text: str | None = None
        self.final_t: float | None = None
        self.error: str | None = None
        self._done = threading.Event()

    def send(self, chunk: np.ndarray) -> None:
        raise NotImplementedError

    def close_input(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        """Release the stream after a failure; default does nothing."""

    def result(self, timeout: float) -> str:
        if not self._done.wait(timeout):
            raise BackendError(f"no final result within {timeout:.0f} s")
        if self.error is not None:
            raise BackendError(self.error)
        assert self.final_text is not None
        return self.final_text

    def _partial(self, text: str) -> None:
        self.partials.append((time.perf_counter(), text))

    def _final(self, text: str, t: float | None = None) -> None:
        self.final_t = time.perf_counter() if t is None else t
        self.final_text = text
        self._done.set()

    def _fail(self, message: str) -> None:
        self.error = message
        self._done.set()


class Backend(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    simulated: ClassVar[bool] = False
    OPTIONS: ClassVar[dict[str, Option]] = {}

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options

    @classmethod
    def parse_options(cls, pairs: list[str]) -> dict[str, Any]:
        """`["k=v", ...]` -> typed options with defaults filled in; unknown keys are an error."""
        values = {k: o.default for k, o in cls.OPTIONS.items()}
        for pair in pairs:
            key, sep, raw = pair.partition("=")
            if not sep:
                raise OptionError(f"backend option {pair!r} is not key=value")
            key = cls.ALIASES.get(key, key)
            if key not in cls.OPTIONS:
                raise OptionError(f"backend {cls.name} has no option {key!r}; known: {sorted(cls.OPTIONS)}")
            values[key] = cls.OPTIONS[key].parse(key, raw)
        return values

    ALIASES: ClassVar[dict[str, str]] = {}
    """Alternative option names (`url` for `base_url`)."""

    REQUIRES: ClassVar[str | None] = None
    """The optional package (distribution name) this backend needs, if any."""

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this backend cannot run here (its optional package is missing), or None."""
        if cls.REQUIRES is None:
            return None
        from importlib import metadata

        try:
            metadata.version(cls.REQUIRES)
        except metadata.PackageNotFoundError:
            return f"{cls.REQUIRES} is not installed (pip install {cls.REQUIRES})"
        return None

    @property
    def label(self) -> str:
        """Name shown in reports (backend plus the option that changes what is measured)."""
        return self.name

    @abstractmethod
    def capabilities(self) -> dict[str, Capability]:
        """Per kind in KINDS; valid after `start()` (a backend may probe its server)."""

    def start(self) -> None:  # noqa: B027 - optional hook: a backend with nothing to load keeps it
        """Load the model / start or attach to the server. Kinds run after this returns."""

    def stop(self) -> None:  # noqa: B027 - optional hook, like start
        """Release everything `start` acquired; idempotent."""

    def prepare(self, utt: Utterance) -> None:  # noqa: B027 - optional hook
        """Encode `utt`'s request payload; runs before timing starts (network backends)."""

    @abstractmethod
    def transcribe(self, utt: Utterance) -> str:
        """One request, blocking; thread-safe up to `concurrency()` callers."""

    def transcribe_batch(self, utts: list[Utterance]) -> list[str]:
        raise BackendError(f"{self.name} has no native batch API")

    def open_stream(self, utt: Utterance) -> StreamSession:
        """`utt` is passed only so a simulator can know its reference; real backends ignore it."""
        raise BackendError(f"{self.name} has no streaming API")

    def concurrency(self) -> int:
        """In-flight requests the throughput kind keeps outstanding."""
        return 1

    def pids(self) -> dict[str, int]:
        """Processes besides the benchmark itself to monitor (role -> pid), e.g. a server."""
        return {}

    def info(self) -> dict[str, Any]:
        """Versions, model, resolved options: goes into run.json."""
        return {}
