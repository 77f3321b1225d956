"""Shared pieces of the /v1/realtime end-to-end tests (imported by test_realtime_*.py), and
tests of the event checker itself, so a checker that cannot fail is caught here.

- `pcm16_at(audio, rate)`: 16 kHz float32 -> headerless little-endian PCM16 at `rate`.
- `send_paced(send, chunks, chunk_s)`: real-time pacing on absolute due times (no drift).
- `check_session_events(events)`: the protocol invariants every test session must satisfy:
  unique event ids; per item, `committed` text only ever grows across partials, deltas rebuild
  committed + tentative, and every committed item ends with exactly one completed/failed.
- `sdk_session(...)`: one transcription session through the official `openai` SDK client.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

SAMPLE_RATE = 16000
TERMINAL = ("conversation.item.input_audio_transcription.completed",
            "conversation.item.input_audio_transcription.failed")
DELTA = "conversation.item.input_audio_transcription.delta"
COMMITTED = "input_audio_buffer.committed"


def pcm16_at(audio: np.ndarray, rate: int) -> bytes:
    """16 kHz float32 samples -> little-endian int16 PCM at `rate` (resampled with soxr)."""
    import soxr

    resampled = audio if rate == SAMPLE_RATE else soxr.resample(audio, SAMPLE_RATE, rate, quality="HQ")
    return (np.clip(resampled, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def chunks_of(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def send_paced(send: Callable[[bytes], Awaitable[None]], chunks: Sequence[bytes], chunk_s: float) -> float:
    """Send chunk i at start + i * chunk_s (absolute due times, so slow sends do not accumulate
    drift). Returns the monotonic time the last chunk was sent (the end of the audio)."""
    start = time.monotonic()
    for i, chunk in enumerate(chunks):
        delay = start + i * chunk_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await send(chunk)
    return time.monotonic()


@dataclass
class SessionLog:
    events: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    audio_end: float = 0.0
    """Monotonic time the client sent its last audio."""

    def add(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self.times.append(time.monotonic())

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def transcripts(self) -> list[str]:
        return [e["transcript"] for e in self.of_type(TERMINAL[0])]

    def first_delta_time(self) -> float | None:
        return next((t for e, t in zip(self.events, self.times) if e["type"] == DELTA and interim_text(e)), None)


def interim_text(event: dict[str, Any]) -> str:
    """The text a delta event shows: its `committed` + `tentative` with the tentative include,
    else its (append-only) `delta`."""
    if "tentative" in event:
        return str(event.get("committed", "")) + str(event["tentative"])
    return str(event.get("delta", ""))


def check_session_events(events: Sequence[dict[str, Any]]) -> None:
    """Assert the protocol invariants over every event of one session."""
    ids = [e.get("event_id") for e in events]
    assert all(ids) and len(set(ids)) == len(ids), "every server event needs a unique event_id"
    committed: dict[str, str] = {}
    rebuilt: dict[str, str] = {}
    committed_items: list[str] = []
    terminals: dict[str, int] = {}
    for e in events:
        kind, item = e["type"], e.get("item_id")
        if kind == DELTA:
            assert item is not None
            before = committed.get(item, "")
            now = e.get("committed", "")
            assert now.startswith(before), f"committed text changed: {before!r} -> {now!r}"
            committed[item] = now
            assert "text" not in e, "a delta never revises: its text only grows"
            rebuilt[item] = text = rebuilt.get(item, "") + e["delta"]
            assert text == now, f"deltas join to {text!r}, not the committed text {now!r}"
            assert item not in terminals, "delta after the item's terminal event"
        elif kind == COMMITTED:
            assert item not in committed_items, "item committed twice"
            committed_items.append(item)
        elif kind in TERMINAL:
            assert item in committed_items, f"{kind} for item {item} before/without its committed event"
            if kind == TERMINAL[0]:  # OpenAI's clients join the deltas: they must make the transcript
                assert rebuilt.get(item, "") == e["transcript"], (
                    f"deltas join to {rebuilt.get(item, '')!r}, not the completed {e['transcript']!r}")
            terminals[item] = terminals.get(item, 0) + 1
            for key in ("audio_end_ms", "server_ms"):
                assert isinstance(e.get(key), int) and e[key] >= 0, f"{kind} lacks the {key} extension"
    for item in committed_items:
        assert terminals.get(item) == 1, f"item {item} ended with {terminals.get(item, 0)} terminal events"


async def sdk_session(ws_url: str, pcm: bytes, *, rate: int = 24000, chunk_ms: int = 20,
                      server_vad: bool = False, timeout: float = 120.0, hold_at_s: float | None = None,
                      transcription: dict[str, Any] | None = None,
                      start_together: asyncio.Barrier | None = None, tentative: bool = False) -> SessionLog:
    """Stream `pcm` through the official SDK's realtime client at real-time pace, commit at the
    end (manual turn detection) and collect events until every committed item has ended.
    `hold_at_s`: once that much audio is out, wait for the first interim text before sending the
    rest (a streaming server answers while the audio is still coming, however slow the machine);
    such a session includes OASR's tentative text, since an append-only delta waits for text that
    will not change, which more audio may be needed to settle.
    `transcription`: more session transcription settings (language, keywords, delay, stream_context);
    none by default, since a model without language control refuses a `language`.
    `tentative`: include OASR's tentative text (the opt-in extension) without holding the audio.
    `start_together`: sessions sharing it send their first audio only once all are connected and
    configured (so connection set-up jitter does not offset their passes)."""
    import openai

    client = openai.AsyncOpenAI(api_key="x", websocket_base_url=ws_url + "/v1")
    realtime = client.realtime if hasattr(client, "realtime") else client.beta.realtime  # SDK < 1.100
    log = SessionLog()
    chunk_bytes = rate * chunk_ms // 1000 * 2
    async with realtime.connect(extra_query={"intent": "transcription"}) as conn:
        await conn.session.update(session={  # type: ignore[arg-type,typeddict-item]
            "type": "transcription",
            "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": rate},
                "transcription": {"model": "whisper-1", **(transcription or {})},
                "turn_detection": {"type": "server_vad"} if server_vad else None,
            }},
            **({"include": ["item.input_audio_transcription.tentative"]} if hold_at_s is not None or tentative
               else {}),
        })
        done = asyncio.Event()
        first_delta = asyncio.Event()

        async def receive() -> None:
            async for event in conn:
                log.add(event.to_dict())
                if log.events[-1]["type"] == DELTA and interim_text(log.events[-1]):
                    first_delta.set()
                committed = {e["item_id"] for e in log.of_type(COMMITTED)}
                ended = {e["item_id"] for e in log.events if e["type"] in TERMINAL}
                if done.is_set() and committed and committed <= ended:
                    return

        receiver = asyncio.create_task(receive())

        hold = None if hold_at_s is None else round(hold_at_s * 1000 / chunk_ms)
        sent = 0
        if start_together is not None:
            await asyncio.wait_for(start_together.wait(), timeout)

        async def append(chunk: bytes) -> None:
            nonlocal sent
            if sent == hold:
                await asyncio.wait_for(first_delta.wait(), timeout)
            sent += 1
            await conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())

        log.audio_end = await send_paced(append, chunks_of(pcm, chunk_bytes), chunk_ms / 1000)
        if not server_vad:
            await conn.input_audio_buffer.commit()
        done.set()
        await asyncio.wait_for(receiver, timeout)
    return log


def speech_bounds_ms(audio: np.ndarray, floor_db: float = -35.0) -> tuple[float, float]:
    """First and last 20 ms frame within floor_db of the loudest: an estimate of where speech
    is that does not use the server's VAD."""
    frame = 320
    n = len(audio) // frame
    rms = np.sqrt((audio[: n * frame].reshape(n, frame) ** 2).mean(axis=1) + 1e-12)
    loud = np.nonzero(20 * np.log10(rms / rms.max()) > floor_db)[0]
    return loud[0] * 20.0, (loud[-1] + 1) * 20.0


PAUSE_CLIPS = ("mfa_thoughts", "mfa_her")
"""Clips with clean silence around their speech (energy bounds agree with Silero within 70 ms)."""


def recording_with_pauses() -> tuple[np.ndarray, list[tuple[float, float]]]:
    """0.5 s + PAUSE_CLIPS[0] + 1.5 s + PAUSE_CLIPS[1] + 1.0 s of faint noise, at 16 kHz, and
    the (start_ms, end_ms) of the speech in each clip, from its energy (not the server's VAD)."""
    from tests.conftest import load_clip

    rng = np.random.default_rng(0)

    def silence(seconds: float) -> np.ndarray:
        return (rng.standard_normal(int(seconds * SAMPLE_RATE)) * 1e-4).astype(np.float32)

    parts = [silence(0.5), load_clip(PAUSE_CLIPS[0]), silence(1.5), load_clip(PAUSE_CLIPS[1]), silence(1.0)]
    expected, offset = [], 0.0
    for part, is_speech in zip(parts, (False, True, False, True, False)):
        if is_speech:
            on, off = speech_bounds_ms(part)
            expected.append((offset + on, offset + off))
        offset += len(part) * 1000 / SAMPLE_RATE
    return np.concatenate(parts), expected


# ---- the checker must catch what it exists for ----


def _delta(item: str, delta: str, committed: str, tentative: str, **extra: Any) -> dict[str, Any]:
    return {"type": DELTA, "event_id": f"e{time.monotonic_ns()}{delta}{committed}", "item_id": item,
            "delta": delta, "committed": committed, "tentative": tentative, **extra}


def _end(item: str, n: int, transcript: str = "") -> list[dict[str, Any]]:
    return [{"type": COMMITTED, "event_id": f"c{n}", "item_id": item},
            {"type": TERMINAL[0], "event_id": f"t{n}", "item_id": item, "transcript": transcript, "audio_end_ms": 1,
             "server_ms": 1}]


def test_checker_accepts_growing_commits_with_tentative_tails() -> None:
    events = [_delta("a", "Hello ", "Hello ", "wor"), _delta("a", "", "Hello ", "word"),
              _delta("a", "word now", "Hello word now", ""), *_end("a", 1, "Hello word now")]
    check_session_events(events)


def test_checker_rejects_changed_committed_text_and_revising_deltas() -> None:
    events = [_delta("a", "Hello ", "Hello ", "wor"), _delta("a", "me", "Help me", ""), *_end("a", 1, "Help me")]
    with pytest.raises(AssertionError, match="committed text changed"):
        check_session_events(events)
    revising = [_delta("a", "Hello ", "Hello ", "wor"), _delta("a", "", "Hello ", "word", text="Hello word"),
                *_end("a", 1, "Hello ")]
    with pytest.raises(AssertionError, match="never revises"):
        check_session_events(revising)
    with pytest.raises(AssertionError, match="deltas join"):
        check_session_events([_delta("a", "Hello wor", "Hello ", "wor"), *_end("a", 1, "Hello ")])


def test_checker_rejects_missing_or_double_completion() -> None:
    with pytest.raises(AssertionError, match="0 terminal"):
        check_session_events([{"type": COMMITTED, "event_id": "c", "item_id": "a"}])
    with pytest.raises(AssertionError, match="2 terminal"):
        check_session_events([*_end("a", 1), _end("a", 2)[1]])
