"""`oasr stream`: play a file through /v1/realtime as live PCM16 (`oasr.client`), printing
partials in place; a dropped connection is resumed (oasr/realtime.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from typing import TextIO

from app.cli.common import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, CliError, _api_key, _check_files

logger = logging.getLogger(__name__)

STREAM_RATE_HZ = 24000
"""OpenAI's realtime PCM rate; the server resamples to the model's."""
STREAM_CHUNK_MS = 20


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
    """Play `pcm` through a resumable session (`oasr.client`): a dropped connection is resumed
    (docs/streaming.md), so the transcript survives a network blip."""
    import websockets

    from oasr import APIError, AsyncOASRClient, ServerUnreachable, StreamError
    from oasr.audio import pcm_chunks

    line = _LiveLine(sys.stdout)
    async with AsyncOASRClient(args.url, api_key=_api_key(args)) as client:
        events = client.stream(pcm_chunks(pcm, STREAM_RATE_HZ, STREAM_CHUNK_MS), sample_rate=STREAM_RATE_HZ,
                               language=args.language, vad=False, pace_s=STREAM_CHUNK_MS / 1000 / args.speed)
        try:
            async with contextlib.aclosing(events):  # returning mid-stream closes it here, not at loop shutdown
                async for event in events:
                    if event.type == "partial":
                        line.partial(event.text)
                    elif event.type == "final":
                        line.final(event.text)
                        return event.text
                    elif event.type == "failed":
                        raise CliError(f"transcription failed: {event.text}")
                    elif event.type == "resumed":
                        logger.info("connection dropped; session resumed at %d ms of audio", event.audio_end_ms)
        except ServerUnreachable as exc:
            raise CliError(str(exc), EXIT_UNREACHABLE) from exc
        except websockets.InvalidURI as exc:
            raise CliError(f"--url {args.url} is not a valid server URL: {exc}", EXIT_USAGE) from exc
        except APIError as exc:
            raise CliError(f"the server refused the session: HTTP {exc.status}: {exc.message}") from exc
        except StreamError as exc:
            raise CliError(f"the server closed the session: {exc}") from exc
    raise CliError("the server closed the session before the transcript was complete")


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
