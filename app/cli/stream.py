"""`oasr stream`: play a file through /v1/realtime as live PCM16, printing partials in place;
a dropped connection is resumed (app/cli/realtime_client.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from typing import Any, TextIO

from app.cli.common import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, CliError, _check_files, _headers
from app.cli.realtime_client import ResumeRefused, ResumingRealtimeClient

logger = logging.getLogger(__name__)

STREAM_RATE_HZ = 24000
"""OpenAI's realtime PCM rate; the server resamples to the model's."""
STREAM_CHUNK_MS = 20


def _ws_url(url: str) -> str:
    base = url.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base[len("https://"):]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://"):]
    return f"{base}/v1/realtime?intent=transcription"


class _LiveLine:
    """Prints a partial in place (`\\r`), then the final text on its own line."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self._width = 0

    def partial(self, text: str) -> None:
        self._draw(text)

    def final(self, text: str) -> None:
        self._draw(text)
        self.stream.write("\n")
        self.stream.flush()
        self._width = 0

    def _draw(self, text: str) -> None:
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)


async def _stream(args: argparse.Namespace, pcm: bytes) -> str:
    """Play `pcm` through a resumable session: a dropped connection is resumed (docs/streaming.md),
    so the transcript survives a network blip."""
    import websockets

    chunk_bytes = STREAM_RATE_HZ * STREAM_CHUNK_MS // 1000 * 2  # 16-bit mono
    line = _LiveLine(sys.stdout)
    client = ResumingRealtimeClient(_ws_url(args.url), _headers(args), rate=STREAM_RATE_HZ)
    try:
        await client.connect()
    except (OSError, asyncio.TimeoutError) as exc:
        raise CliError(f"cannot reach the server at {args.url}: {exc}", EXIT_UNREACHABLE) from exc
    except websockets.InvalidURI as exc:
        raise CliError(f"--url {args.url} is not a valid server URL: {exc}", EXIT_USAGE) from exc
    except websockets.InvalidStatus as exc:
        raise CliError(f"the server refused the session: {_error_message_ws(exc)}") from exc
    await client.send_event({"type": "session.update", "session": {
        "type": "transcription",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": STREAM_RATE_HZ}, "turn_detection": None,
                            "transcription": {"language": args.language}}},
    }})

    async def send_audio() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i, offset in enumerate(range(0, len(pcm), chunk_bytes)):
            # Paced against the start time, not by sleeping a fixed 20 ms, so delays never add up.
            await asyncio.sleep(max(0.0, started + i * STREAM_CHUNK_MS / 1000 / args.speed - loop.time()))
            await client.send_audio(pcm[offset: offset + chunk_bytes])
        await client.commit()

    sender = asyncio.ensure_future(send_audio())
    try:
        async for event in client.events():
            kind = event.get("type")
            if kind == "conversation.item.input_audio_transcription.delta":
                line.partial(event.get("text") or (event.get("committed", "") + event.get("tentative", "")))
            elif kind == "conversation.item.input_audio_transcription.completed":
                transcript = str(event.get("transcript", ""))
                line.final(transcript)
                return transcript
            elif kind == "conversation.item.input_audio_transcription.failed":
                raise CliError(f"transcription failed: {event['error']['message']}")
            elif kind == "error":
                raise CliError(f"server error: {event['error']['message']}")
            elif kind == "session.resumed":
                logger.info("connection dropped; session resumed at %d ms of audio", event["audio_end_ms"])
    except (websockets.ConnectionClosed, ResumeRefused) as exc:
        raise CliError(f"the server closed the session: {exc}") from exc
    finally:
        sender.cancel()
        await client.close()
    raise CliError("the server closed the session before the transcript was complete")


def _error_message_ws(exc: Any) -> str:
    response = exc.response
    try:
        return f"HTTP {response.status_code}: {json.loads(response.body)['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


def cmd_stream(args: argparse.Namespace) -> int:
    import numpy as np

    from app.audio import AudioError, decode_audio

    if not args.speed > 0:
        raise CliError("--speed must be positive", EXIT_USAGE)
    (path,) = _check_files([args.file])
    try:
        audio = decode_audio(path.read_bytes(), target_rate=STREAM_RATE_HZ)
    except AudioError as exc:
        raise CliError(f"{path}: {exc}") from exc
    pcm = (np.clip(audio.samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    started = time.monotonic()
    asyncio.run(_stream(args, pcm))
    logger.info("streamed %.1f s of audio in %.1f s", audio.duration, time.monotonic() - started)
    return EXIT_OK
