"""`oasr transcribe`: files -> transcripts, in process or through a server (`--url`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.cli.common import EXIT_OK, EXIT_USAGE, CliError, _check_files, _client

RESPONSE_FORMATS = ("text", "json", "verbose_json", "srt", "vtt")
EXTENSIONS = {"text": "txt", "json": "json", "verbose_json": "json", "srt": "srt", "vtt": "vtt"}
LONG_AUDIO_S = 60.0
"""In-process files at least this long get a progress bar in audio seconds."""


@dataclass
class _Transcript:
    source: Path
    body: str
    """The rendered response, in the requested format."""


def _progress(total: int, unit: str, enabled: bool, leave: bool = True) -> Any:
    from tqdm import tqdm

    # Progress goes to stderr, and only for a person watching: never into a pipe or a log.
    return tqdm(total=total, unit=unit, disable=not (enabled and sys.stderr.isatty()), file=sys.stderr,
                dynamic_ncols=True, leave=leave)


def _transcribe_remote(args: argparse.Namespace, files: list[Path]) -> Iterator[_Transcript]:
    from oasr import APIError

    with _client(args) as client, _progress(len(files), "file", len(files) > 1) as bar:
        for path in files:
            try:
                result = client.transcribe(path, model=args.model, language=args.language,
                                           response_format=args.response_format,
                                           timestamp_granularities=["word", "segment"] if args.word_timestamps else None)
            except APIError as exc:
                raise CliError(f"{path}: HTTP {exc.status}: {exc.message}") from exc
            bar.update(1)
            yield _Transcript(path, result.raw if isinstance(result.raw, str) else json.dumps(result.raw))


def _run_with_progress(engine: Any, samples: Any, options: Any, seconds: float, name: str) -> Any:
    """Transcribe one waveform by stepping the engine ourselves, so the offline decoder's
    per-window outputs (their `duration` is the audio decoded so far) can drive a progress bar
    in audio seconds; shown for long audio only."""
    from engine.loop import drive

    request_id = engine.add_request(samples, decoding=options)
    final: list[Any] = []
    with _progress(0, "s", seconds >= LONG_AUDIO_S, leave=False) as bar:
        bar.reset(total=round(seconds, 1))
        bar.set_description_str(name)

        def show(outputs: list[Any]) -> None:
            for out in outputs:
                if out.request_id != request_id:
                    continue
                if out.finished:
                    final.append(out)
                bar.n = bar.total if out.finished else min(round(out.progress_seconds, 1), bar.total)
                bar.refresh()

        drive(engine, show, stop=lambda: bool(final))
    return final[0]


def _transcribe_local(args: argparse.Namespace, files: list[Path]) -> Iterator[_Transcript]:
    from app.audio import AudioError, decode_audio
    from app.formats import to_srt, to_verbose_json, to_vtt, usage
    from app.requests import build_options
    from engine import ASREngine, EngineConfig
    from engine.errors import EngineError, InvalidRequestError

    try:
        engine = ASREngine(EngineConfig(ckpt_dir=args.ckpt_dir, device=args.device))
    except (EngineError, OSError, ValueError) as exc:
        raise CliError(f"cannot load the model: {exc}") from exc
    try:  # the servers' one builder: a BCP-47 --language ('en-US') means 'en' here too
        options = build_options(language=args.language, word_timestamps=args.word_timestamps)
    except EngineError as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc
    try:
        with _progress(len(files), "file", len(files) > 1) as files_bar:
            for path in files:
                try:
                    audio = decode_audio(path.read_bytes(), target_rate=engine.sample_rate)
                except AudioError as exc:
                    raise CliError(f"{path}: {exc}") from exc
                files_bar.set_postfix_str(path.name)
                try:
                    out = _run_with_progress(engine, audio.samples, options, audio.duration, path.name)
                except InvalidRequestError as exc:  # e.g. a language this model does not know
                    raise CliError(f"{path}: {exc}", EXIT_USAGE) from exc
                if out.finish_reason == "error":
                    raise CliError(f"{path}: recognition failed at {out.error_stage}: {out.error}")
                files_bar.update(1)
                fmt = args.response_format
                if fmt == "text":
                    body = out.text + "\n"
                elif fmt == "srt":
                    body = to_srt(out)
                elif fmt == "vtt":
                    body = to_vtt(out)
                elif fmt == "verbose_json":
                    body = json.dumps(to_verbose_json(out, "transcribe", words=args.word_timestamps, segments=True))
                else:
                    body = json.dumps({"text": out.text, "usage": usage(out)})
                yield _Transcript(path, body)
    finally:
        engine.shutdown()


def _write(transcripts: Iterator[_Transcript], files: list[Path], out: str | None, fmt: str) -> None:
    if out is None:
        for t in transcripts:
            if len(files) > 1:
                sys.stdout.write(f"==> {t.source} <==\n")
            sys.stdout.write(t.body if t.body.endswith("\n") else t.body + "\n")
            sys.stdout.flush()
        return
    target = Path(out)
    if len(files) == 1 and not target.is_dir():
        for t in transcripts:
            target.write_text(t.body)
        return
    target.mkdir(parents=True, exist_ok=True)
    for t in transcripts:
        (target / f"{t.source.stem}.{EXTENSIONS[fmt]}").write_text(t.body)


def cmd_transcribe(args: argparse.Namespace) -> int:
    if args.url and args.ckpt_dir:
        raise CliError("--url and --ckpt-dir exclude each other (a server has its own model)", EXIT_USAGE)
    if args.word_timestamps and args.response_format != "verbose_json":
        raise CliError("--word-timestamps needs --response-format verbose_json", EXIT_USAGE)
    files = _check_files(args.files)
    if args.output and len(files) > 1 and Path(args.output).is_file():
        raise CliError(f"-o {args.output} is a file; with several inputs -o names a directory", EXIT_USAGE)
    produce = _transcribe_remote if args.url else _transcribe_local
    _write(produce(args, files), files, args.output, args.response_format)
    return EXIT_OK
