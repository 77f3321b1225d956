"""`oasr convert SRC OUT` and `oasr quantize SRC OUT`: a checkpoint rewritten, once, in the layout the
engine loads fastest (float, or with int8 weights quantized ahead of time); the family is detected
from SRC as for any model directory. Both work in process: no server is involved."""

from __future__ import annotations

import argparse
import sys

from app.cli.common import EXIT_OK, CliError


def _convert_errors() -> tuple[type[Exception], ...]:
    from engine.errors import CheckpointError, InvalidRequestError, UnsupportedError

    return CheckpointError, InvalidRequestError, UnsupportedError


def cmd_convert(args: argparse.Namespace) -> int:
    from engine.convert import convert_checkpoint

    try:
        done = convert_checkpoint(args.src, args.out, args.revision)
    except _convert_errors() as exc:
        raise CliError(str(exc)) from exc
    sys.stdout.write(f"{args.src}\t{done.family}\t{done.out_dir}\n")
    return EXIT_OK


def cmd_quantize(args: argparse.Namespace) -> int:
    from engine.convert import quantize_checkpoint
    from engine.quantization import QuantizationConfig

    try:
        quantization = QuantizationConfig.parse({"scheme": args.scheme, "ignore": args.ignore or ""})
        done = quantize_checkpoint(args.src, args.out, quantization, args.revision)
    except _convert_errors() as exc:
        raise CliError(str(exc)) from exc
    sys.stdout.write(f"{args.src}\t{done.family}\t{done.out_dir}\n")
    return EXIT_OK


def add_convert_parsers(sub: argparse._SubParsersAction, epilog: str) -> None:  # type: ignore[type-arg]
    source_help = ("checkpoint directory, a checkpoint file in one (model.nemo, tiny.en.pt), an alias or a "
                   "Hugging Face repo id")
    convert = sub.add_parser(
        "convert", help="rewrite a checkpoint in the layout the engine loads fastest",
        description="Rewrite an OpenAI Whisper .pt, a Transformers Whisper directory, a CTranslate2 directory or "
                    "a NeMo .nemo as OUT, a directory in OASR's own layout (oasr.json + safetensors weights): "
                    "serving OUT does no conversion at start. Prints SRC, family and OUT.",
        epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    convert.add_argument("src", metavar="SRC", help=source_help)
    convert.add_argument("out", metavar="OUT", help="output directory (new, empty, or an earlier conversion)")
    convert.add_argument("--revision", help="hub revision when SRC is a model name")
    convert.set_defaults(func=cmd_convert)

    quantize = sub.add_parser(
        "quantize", help="write int8 weights ahead of time (no quantization work at start)",
        description="Quantize SRC's linear layers to int8 (int8_w8a8: weights per output channel, as the "
                    "engine does at load) and write OUT in OASR's own layout. A server given OUT serves it "
                    "quantized with quantization unset; another quantization setting is refused. The int8 range "
                    "follows this machine's int8 GEMM (±127 with VNNI, ±63 without): quantize on the kind of "
                    "CPU that serves. Whisper checkpoints only. Prints SRC, family and OUT.",
        epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    quantize.add_argument("src", metavar="SRC", help=source_help)
    quantize.add_argument("out", metavar="OUT", help="output directory (new, empty, or an earlier conversion)")
    quantize.add_argument("--scheme", default="int8_w8a8", choices=("int8_w8a8",), help="(default: %(default)s)")
    quantize.add_argument("--ignore", metavar="GLOBS",
                          help="comma-separated module-path globs kept in float (e.g. 'decoder.*')")
    quantize.add_argument("--revision", help="hub revision when SRC is a model name")
    quantize.set_defaults(func=cmd_quantize)
