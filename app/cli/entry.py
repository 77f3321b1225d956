"""The `oasr` entry point: the argument parser and `main`, which maps failures to exit codes."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from app.cli.common import (
    DEFAULT_URL,
    EPILOG,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    _Parser,
)
from app.cli.convert import add_convert_parsers
from app.cli.jobs import add_jobs_parser
from app.cli.models import add_models_parser
from app.cli.serve import _add_setting_flag, cmd_serve
from app.cli.stream import cmd_stream
from app.cli.transcribe import RESPONSE_FORMATS, cmd_transcribe
from app.settings_doc import setting_groups

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="oasr", description="OASR speech recognition: server and client.", epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    # usage: one line (argparse would list all ~100 flags); the groups below show them
    serve = sub.add_parser("serve", help="run the HTTP + gRPC server", epilog=EPILOG,
                           usage="%(prog)s [-h] [--SETTING VALUE ...]",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           description="Run the server. Each flag overrides its environment variable\n"
                                       "(--max-batch-size: OASR_MAX_BATCH_SIZE; docs/configuration.md).\n"
                                       "The server's own settings come first, then each model family's options.")
    for settings_group in setting_groups():
        group = serve.add_argument_group(settings_group.title, settings_group.description or None)
        for spec in settings_group.specs:
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
    tx.add_argument("--ckpt-dir", help="model for in-process transcription: a checkpoint directory, an alias (small.en, "
                                        "large-v3-turbo, ...) or a Hugging Face repo id (default: embedded tiny.en)")
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

    add_models_parser(sub, lambda p: client_flags(p, DEFAULT_URL), _Parser, EPILOG)

    stream = sub.add_parser("stream", help="play a file through /v1/realtime, printing partials live",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    stream.add_argument("file", metavar="FILE", help="audio file to play as live 24 kHz PCM16")
    client_flags(stream, DEFAULT_URL)
    stream.add_argument("--language", help="ISO 639-1 code, e.g. en (default: detected)")
    stream.add_argument("--speed", type=float, default=1.0,
                        help="playback speed; 1 is real time, 2 twice as fast (default: %(default)s)")
    stream.set_defaults(func=cmd_stream)

    add_jobs_parser(sub, lambda p: client_flags(p, DEFAULT_URL), _Parser, EPILOG)
    add_convert_parsers(sub, EPILOG)
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
