"""`oasr`: serve, transcribe files, list models, stream a file live.

    oasr serve [--<setting> VALUE ...]          every server setting as a flag (docs/configuration.md)
    oasr transcribe FILE... [--url URL | --ckpt-dir DIR] [--response-format F] [-o OUT]
    oasr models [--url URL]
    oasr stream FILE [--url URL]

Errors are one line on stderr; the exit code says what kind (`EXIT_*` below, and `oasr --help`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TextIO

from app.settings_doc import SettingSpec, setting_specs

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILURE = 1
"""The work failed: the server answered with an error, audio could not be decoded, the model failed."""
EXIT_USAGE = 2
"""Bad command line: unknown flag, invalid value, missing input file."""
EXIT_UNREACHABLE = 3
"""No server answered at --url (connection refused, DNS, timeout while connecting)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C."""

DEFAULT_URL = "http://127.0.0.1:8000"
RESPONSE_FORMATS = ("text", "json", "verbose_json", "srt", "vtt")
EXTENSIONS = {"text": "txt", "json": "json", "verbose_json": "json", "srt": "srt", "vtt": "vtt"}
STREAM_RATE_HZ = 24000
"""OpenAI's realtime PCM rate; the server resamples to the model's."""
STREAM_CHUNK_MS = 20
LONG_AUDIO_S = 60.0
"""In-process files at least this long get a progress bar in audio seconds."""
HTTP_TIMEOUT_S = 600.0
"""Long files take a while; the server's own request timeout (600 s by default) ends them first."""

EPILOG = f"""exit codes:
  {EXIT_OK}    success
  {EXIT_FAILURE}    the work failed (server error response, undecodable audio, model failure)
  {EXIT_USAGE}    usage error (unknown flag, bad value, missing input file)
  {EXIT_UNREACHABLE}    server unreachable at --url
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)

docs: docs/api.md (HTTP, WebSocket, gRPC), docs/configuration.md (every serve flag)"""


class CliError(Exception):
    """Ends the command with a one-line message on stderr and `code` as the exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.message = message
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors on one line (its default prints the usage block too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# --------------------------------------------------------------------------- serve


def _add_setting_flag(group: argparse._ArgumentGroup, spec: SettingSpec) -> None:
    # SUPPRESS: a flag left out leaves its OASR_* variable (or the default) in charge.
    common: dict[str, Any] = {"dest": spec.name, "default": argparse.SUPPRESS,
                              "help": f"{spec.doc} [env {spec.env}; default {spec.default_text}]"}
    if spec.kind == "bool":
        group.add_argument(spec.flag, action=argparse.BooleanOptionalAction, **common)
    elif spec.kind == "choice":
        group.add_argument(spec.flag, choices=spec.choices, **common)
    elif spec.kind == "list":
        group.add_argument(spec.flag, metavar="A,B,...", **common)
    else:
        group.add_argument(spec.flag, metavar=spec.kind.upper(), **common)


def _env_value(spec: SettingSpec, value: Any) -> str:
    if spec.kind == "bool":
        return "true" if value else "false"
    return str(value)


def cmd_serve(args: argparse.Namespace) -> int:
    import pydantic

    for spec in setting_specs():
        if spec.name in vars(args):
            os.environ[spec.env] = _env_value(spec, getattr(args, spec.name))
    from app.settings import Settings

    try:
        settings = Settings()
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"--{'.'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}" for e in exc.errors())
        raise CliError(f"invalid setting: {problems}", EXIT_USAGE) from exc
    import uvicorn

    # The same app object `uvicorn app.main:app` serves, built from the OASR_* variables set above.
    from app.main import app

    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level.lower(),
                            timeout_graceful_shutdown=int(settings.shutdown_grace_secs) + 5)
    server = uvicorn.Server(config)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits 1 itself when it cannot bind
        raise CliError(f"server failed to start on {settings.host}:{settings.port} (see the log above)") from exc
    if not server.started:
        raise CliError(f"server failed to start on {settings.host}:{settings.port} (see the log above)")
    return EXIT_OK


# --------------------------------------------------------------------------- shared client bits


def _api_key(args: argparse.Namespace) -> str | None:
    if args.api_key:
        return str(args.api_key)
    keys = [k.strip() for k in os.environ.get("OASR_API_KEY", "").split(",") if k.strip()]
    return keys[0] if keys else None


def _headers(args: argparse.Namespace) -> dict[str, str]:
    key = _api_key(args)
    return {"Authorization": f"Bearer {key}"} if key else {}


def _error_message(response: Any) -> str:
    """The server's own message from an OpenAI-shaped error body, else the status line."""
    try:
        body = response.json()
        message = body["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text.strip()[:200] or response.reason_phrase
    return f"HTTP {response.status_code}: {message}"


@contextmanager
def _http(args: argparse.Namespace) -> Iterator[Any]:
    import httpx

    url = args.url.rstrip("/")
    try:
        with httpx.Client(base_url=url, headers=_headers(args),
                          timeout=httpx.Timeout(HTTP_TIMEOUT_S, connect=10.0)) as client:
            yield client
    except httpx.ConnectError as exc:
        raise CliError(f"cannot reach the server at {url}: {exc}", EXIT_UNREACHABLE) from exc
    except httpx.ConnectTimeout as exc:
        raise CliError(f"cannot reach the server at {url}: connect timed out", EXIT_UNREACHABLE) from exc
    except httpx.HTTPError as exc:
        raise CliError(f"request to {url} failed: {type(exc).__name__}: {exc}") from exc


def _check_files(paths: Sequence[str]) -> list[Path]:
    files = [Path(p) for p in paths]
    for f in files:
        if not f.is_file():
            raise CliError(f"no such file: {f}", EXIT_USAGE)
    return files


# --------------------------------------------------------------------------- transcribe


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
    data: dict[str, Any] = {"response_format": args.response_format}
    if args.language:
        data["language"] = args.language
    if args.word_timestamps:
        data["timestamp_granularities[]"] = ["word", "segment"]
    if args.model:
        data["model"] = args.model
    with _http(args) as client, _progress(len(files), "file", len(files) > 1) as bar:
        for path in files:
            with path.open("rb") as fh:
                response = client.post("/v1/audio/transcriptions", data=data, files={"file": (path.name, fh)})
            if response.status_code != 200:
                raise CliError(f"{path}: {_error_message(response)}")
            bar.update(1)
            yield _Transcript(path, response.text)


def _run_with_progress(engine: Any, samples: Any, options: Any, seconds: float, name: str) -> Any:
    """Transcribe one waveform by stepping the engine ourselves, so the offline decoder's
    per-window outputs (their `duration` is the audio decoded so far) can drive a progress bar
    in audio seconds; shown for long audio only."""
    request_id = engine.add_request(samples, decoding=options)
    with _progress(0, "s", seconds >= LONG_AUDIO_S, leave=False) as bar:
        bar.reset(total=round(seconds, 1))
        bar.set_description_str(name)
        while True:
            for out in engine.step():
                if out.request_id != request_id:
                    continue
                if out.finished:
                    bar.n = bar.total
                    bar.refresh()
                    return out
                bar.n = min(round(out.duration, 1), bar.total)
                bar.refresh()


def _transcribe_local(args: argparse.Namespace, files: list[Path]) -> Iterator[_Transcript]:
    from app.audio import AudioError, decode_audio
    from app.formats import to_srt, to_verbose_json, to_vtt, usage
    from engine import ASREngine, DecodingOptions, EngineConfig
    from engine.errors import EngineError, InvalidRequestError

    try:
        engine = ASREngine(EngineConfig(ckpt_dir=args.ckpt_dir, device=args.device))
    except (EngineError, OSError, ValueError) as exc:
        raise CliError(f"cannot load the model: {exc}") from exc
    options = DecodingOptions(task="transcribe", language=args.language, word_timestamps=args.word_timestamps)
    try:
        options.validate()
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


# --------------------------------------------------------------------------- models


def cmd_models(args: argparse.Namespace) -> int:
    with _http(args) as client:
        response = client.get("/v1/models")
    if response.status_code != 200:
        raise CliError(_error_message(response))
    for model in response.json().get("data", []):
        info = model.get("info") or {}
        details = " ".join(f"{k}={info[k]}" for k in ("family", "device", "service_mode") if k in info)
        sys.stdout.write(f"{model['id']}\t{details}\n")
    return EXIT_OK


# --------------------------------------------------------------------------- stream


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
    import websockets

    headers = _headers(args)
    chunk_bytes = STREAM_RATE_HZ * STREAM_CHUNK_MS // 1000 * 2  # 16-bit mono
    line = _LiveLine(sys.stdout)
    try:
        ws = await websockets.connect(_ws_url(args.url), additional_headers=headers, max_size=None)
    except (OSError, asyncio.TimeoutError) as exc:
        raise CliError(f"cannot reach the server at {args.url}: {exc}", EXIT_UNREACHABLE) from exc
    except websockets.InvalidURI as exc:
        raise CliError(f"--url {args.url} is not a valid server URL: {exc}", EXIT_USAGE) from exc
    except websockets.InvalidStatus as exc:
        raise CliError(f"the server refused the session: {_error_message_ws(exc)}") from exc
    async with ws:
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "transcription",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": STREAM_RATE_HZ}, "turn_detection": None,
                                "transcription": {"language": args.language}}},
        }}))

        async def send_audio() -> None:
            loop = asyncio.get_running_loop()
            started = loop.time()
            for i, offset in enumerate(range(0, len(pcm), chunk_bytes)):
                # Paced against the start time, not by sleeping a fixed 20 ms, so delays never add up.
                await asyncio.sleep(max(0.0, started + i * STREAM_CHUNK_MS / 1000 / args.speed - loop.time()))
                chunk = pcm[offset: offset + chunk_bytes]
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "audio": base64.b64encode(chunk).decode()}))
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))

        sender = asyncio.ensure_future(send_audio())
        try:
            async for message in ws:
                event = json.loads(message)
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
        except websockets.ConnectionClosed as exc:
            raise CliError(f"the server closed the session: {exc}") from exc
        finally:
            sender.cancel()
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


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="oasr", description="OASR speech recognition: server and client.", epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the HTTP + gRPC server", epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           description="Run the server. Each flag overrides its OASR_* environment variable.")
    group = serve.add_argument_group("settings (docs/configuration.md)")
    for spec in setting_specs():
        _add_setting_flag(group, spec)
    serve.set_defaults(func=cmd_serve)

    def client_flags(p: argparse.ArgumentParser, url_default: str | None) -> None:
        p.add_argument("--url", default=url_default,
                       help=f"server base URL{'' if url_default is None else ' (default: %(default)s)'}")
        p.add_argument("--api-key", help="API key for a server started with OASR_API_KEY "
                                         "(default: the first key in $OASR_API_KEY)")

    tx = sub.add_parser("transcribe", help="transcribe audio files (in process, or with a server via --url)",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    tx.add_argument("files", nargs="+", metavar="FILE", help="audio files (wav, flac, mp3, ogg, webm, m4a, ...)")
    client_flags(tx, None)
    tx.add_argument("--ckpt-dir", help="model checkpoint for in-process transcription (default: embedded tiny.en)")
    tx.add_argument("--device", default="auto", help="in process: 'auto', 'cpu', 'cuda', ... (default: auto)")
    tx.add_argument("--model", help="with --url: the model name to send (servers with --served-model-name)")
    tx.add_argument("--response-format", choices=RESPONSE_FORMATS, default="text",
                    help="output format (default: %(default)s)")
    tx.add_argument("--language", help="ISO 639-1 code, e.g. en (default: detected)")
    tx.add_argument("--word-timestamps", action="store_true",
                    help="word timings in the output (needs --response-format verbose_json)")
    tx.add_argument("-o", "--output", help="write to this file; with several inputs, a directory "
                                           "with one <name>.<ext> per input (default: stdout)")
    tx.set_defaults(func=cmd_transcribe)

    models = sub.add_parser("models", help="list the models a server serves", epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    client_flags(models, DEFAULT_URL)
    models.set_defaults(func=cmd_models)

    stream = sub.add_parser("stream", help="play a file through /v1/realtime, printing partials live",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    stream.add_argument("file", metavar="FILE", help="audio file to play as live 24 kHz PCM16")
    client_flags(stream, DEFAULT_URL)
    stream.add_argument("--language", help="ISO 639-1 code, e.g. en (default: detected)")
    stream.add_argument("--speed", type=float, default=1.0,
                        help="playback speed; 1 is real time, 2 twice as fast (default: %(default)s)")
    stream.set_defaults(func=cmd_stream)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except CliError as exc:
        sys.stderr.write(f"oasr {args.command}: error: {exc.message}\n")
        return exc.code
    except KeyboardInterrupt:
        sys.stderr.write(f"oasr {args.command}: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `oasr transcribe ... | head`
        return EXIT_OK
    except Exception as exc:  # a bug or an unforeseen failure: still one line; -v shows the traceback
        logger.debug("unexpected failure", exc_info=True)
        sys.stderr.write(f"oasr {args.command}: error: {type(exc).__name__}: {exc}\n")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
