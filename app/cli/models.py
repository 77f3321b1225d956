"""`oasr models`: list what a server serves; `oasr models pull NAME`: download a model ahead of time."""

from __future__ import annotations

import argparse
import sys

from app.cli.common import EXIT_OK, CliError, _client


def cmd_models(args: argparse.Namespace) -> int:
    if getattr(args, "models_command", None) == "pull":
        return cmd_models_pull(args)
    with _client(args) as client:
        models = client.models()
    for model in models:
        info = model.get("info") or {}
        details = " ".join(f"{k}={info[k]}" for k in ("family", "device", "service_mode") if k in info)
        if "state" in model:  # a server of several models: loaded, or loaded on first use
            details = f"state={model['state']} {details}".rstrip()
        sys.stdout.write(f"{model['id']}\t{details}\n")
    return EXIT_OK


def cmd_models_pull(args: argparse.Namespace) -> int:
    """Download each model into the Hugging Face cache (a progress bar on stderr) and print
    `<name>\\t<family>\\t<directory>`; a server started later with HF_HUB_OFFLINE=1 finds them there."""
    from tqdm.auto import tqdm

    from engine.errors import CheckpointError
    from engine.hub import resolve_model

    for name in args.names:
        try:
            model = resolve_model(name, args.revision, progress=tqdm)
        except CheckpointError as exc:
            raise CliError(str(exc)) from exc
        sys.stdout.write(f"{name}\t{model.family}\t{model.path}\n")
    return EXIT_OK


def add_models_parser(sub: argparse._SubParsersAction, client_flags: object,  # type: ignore[type-arg]
                      parser_class: type, epilog: str) -> None:
    models = sub.add_parser("models", help="list the models a server serves; `models pull NAME` downloads one",
                            epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    client_flags(models)  # type: ignore[operator]
    actions = models.add_subparsers(dest="models_command", metavar="ACTION", parser_class=parser_class)
    pull = actions.add_parser(
        "pull", help="download models into the Hugging Face cache ahead of time (for air-gapped servers)",
        description="Download models by alias (tiny.en ... large-v3-turbo, distil-large-v3) or Hugging Face "
                    "repo id (owner/name[@revision]) into the Hugging Face cache (HF_HOME / HF_HUB_CACHE), "
                    "fetching only the files a model family loads. Prints NAME, family and directory per model.",
        epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    pull.add_argument("names", nargs="+", metavar="NAME", help="alias or repo id, optionally @revision")
    pull.add_argument("--revision", help="branch, tag or commit for every NAME (default: the repo's default branch)")
    models.set_defaults(func=cmd_models)
