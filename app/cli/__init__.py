"""`oasr`: serve, transcribe files, list models, stream a file live.

    oasr serve [--<setting> VALUE ...]          every server setting as a flag (docs/configuration.md)
    oasr transcribe FILE... [--url URL | --ckpt-dir DIR] [--response-format F] [-o OUT]
    oasr models [--url URL]
    oasr stream FILE [--url URL]
    oasr jobs submit|list|get|cancel|wait ...   batch jobs on a server (long-running recognize)
    oasr convert SRC OUT                        a checkpoint in the layout the engine loads fastest
    oasr quantize SRC OUT [--ignore GLOBS]      the same with int8 weights quantized ahead of time

Errors are one line on stderr; the exit code says what kind (`EXIT_*` in `common`, and `oasr --help`).

Modules, one per command: `serve`, `transcribe`, `models`, `stream`, `jobs`, `convert` (and quantize); `common` holds the exit
codes, `CliError` and the HTTP client bits they share; `entry` the parser and `main`.
"""

from __future__ import annotations

from app.cli.common import (
    DEFAULT_URL,
    EPILOG,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    HTTP_TIMEOUT_S,
    CliError,
)
from app.cli.entry import build_parser, main
from app.cli.models import cmd_models
from app.cli.serve import cmd_serve
from app.cli.stream import STREAM_CHUNK_MS, STREAM_RATE_HZ, cmd_stream
from app.cli.transcribe import EXTENSIONS, LONG_AUDIO_S, RESPONSE_FORMATS, cmd_transcribe

__all__ = [
    "DEFAULT_URL",
    "EPILOG",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "EXTENSIONS",
    "HTTP_TIMEOUT_S",
    "LONG_AUDIO_S",
    "RESPONSE_FORMATS",
    "STREAM_CHUNK_MS",
    "STREAM_RATE_HZ",
    "CliError",
    "build_parser",
    "cmd_models",
    "cmd_serve",
    "cmd_stream",
    "cmd_transcribe",
    "main",
]
