"""`oasr jobs submit|list|get|cancel|wait`: batch transcription through a server's
long-running recognition API (`/v1/speech:longrunningrecognize`, `/v1/operations`)."""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from typing import Any

from app.cli.common import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError, _check_files, _error_message, _http

POLL_INTERVAL_S = 1.0
"""How often `wait` polls the operation."""


def _google_error(response: Any) -> str:
    try:
        err = response.json()["error"]
        return f"HTTP {response.status_code} {err.get('status', '')}: {err['message']}"
    except (ValueError, KeyError, TypeError):
        return _error_message(response)


def _config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {"encoding": "AUTO"}
    if args.language:
        config["languageCode"] = args.language
    if args.separate_channels:
        config["enableSeparateRecognitionPerChannel"] = True
    if args.word_timestamps:
        config["enableWordTimeOffsets"] = True
    return config


def _transcript_lines(op: dict[str, Any]) -> list[str]:
    results = op.get("response", {}).get("results", [])
    lines = []
    for r in results:
        text = r["alternatives"][0]["transcript"] if r.get("alternatives") else ""
        tag = r.get("channelTag", 0)
        lines.append(f"[channel {tag}] {text}" if tag else text)
    return lines


def _finished(op: dict[str, Any]) -> int:
    """Print a finished operation's transcript (stdout) or error (stderr); the exit code."""
    if "error" in op:
        err = op["error"]
        raise CliError(f"operation {op['name']} ended with code {err.get('code')}: {err.get('message', '')}",
                       EXIT_FAILURE)
    for line in _transcript_lines(op):
        sys.stdout.write(line + "\n")
    return EXIT_OK


def cmd_jobs_submit(args: argparse.Namespace) -> int:
    if bool(args.files) == bool(args.uri):
        raise CliError("give audio FILEs or --uri (a file:// path under the server's --audio-uri-root)", EXIT_USAGE)
    sources: list[dict[str, Any]] = [{"uri": args.uri}] if args.uri else [
        {"content": base64.b64encode(path.read_bytes()).decode()} for path in _check_files(args.files)]
    names = []
    with _http(args) as client:
        for audio in sources:
            body: dict[str, Any] = {"config": _config(args), "audio": audio}
            if args.callback_url:
                body["callback"] = {"url": args.callback_url, "secret": args.callback_secret or ""}
            response = client.post("/v1/speech:longrunningrecognize", json=body)
            if response.status_code != 200:
                raise CliError(_google_error(response))
            names.append(response.json()["name"])
    if args.wait:
        return max(_wait(args, name) for name in names)
    for name in names:
        sys.stdout.write(name + "\n")
    return EXIT_OK


def cmd_jobs_list(args: argparse.Namespace) -> int:
    with _http(args) as client:
        response = client.get("/v1/operations", params={"pageSize": args.page_size, "filter": args.filter or "",
                                                       "extensions": "true"})
    if response.status_code != 200:
        raise CliError(_google_error(response))
    for op in response.json()["operations"]:
        meta = op["metadata"]
        sys.stdout.write(f"{op['name']}\t{meta['state']}\t{meta['progressPercent']}%\t{meta['startTime']}\n")
    return EXIT_OK


def cmd_jobs_get(args: argparse.Namespace) -> int:
    with _http(args) as client:
        response = client.get(f"/v1/operations/{args.name}", params={"extensions": "true"})
    if response.status_code != 200:
        raise CliError(_google_error(response))
    sys.stdout.write(json.dumps(response.json(), indent=2) + "\n")
    return EXIT_OK


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    with _http(args) as client:
        response = client.post(f"/v1/operations/{args.name}:cancel")
    if response.status_code != 200:
        raise CliError(_google_error(response))
    return EXIT_OK


def _wait(args: argparse.Namespace, name: str) -> int:
    from tqdm import tqdm

    deadline = time.monotonic() + args.timeout if args.timeout else None
    with _http(args) as client, tqdm(total=100, unit="%", desc=name[:12], file=sys.stderr, leave=False,
                                     disable=not sys.stderr.isatty(), dynamic_ncols=True) as bar:
        while True:
            response = client.get(f"/v1/operations/{name}", params={"extensions": "true"})
            if response.status_code != 200:
                raise CliError(_google_error(response))
            op = response.json()
            bar.n = int(op["metadata"].get("progressPercent", 0))
            bar.set_postfix_str(op["metadata"].get("state", ""))
            bar.refresh()
            if op.get("done"):
                break
            if deadline is not None and time.monotonic() > deadline:
                raise CliError(f"operation {name} not done after {args.timeout:g} s (still "
                               f"{op['metadata'].get('state')}); `oasr jobs wait {name}` again later")
            time.sleep(args.interval)
    return _finished(op)


def cmd_jobs_wait(args: argparse.Namespace) -> int:
    return _wait(args, args.name)


def add_jobs_parser(sub: Any, client_flags: Any, parser_class: type, epilog: str) -> None:
    jobs = sub.add_parser("jobs", help="batch jobs: submit, list, get, cancel, wait (long-running recognize)",
                          epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION", parser_class=parser_class)

    submit = actions.add_parser("submit", help="queue audio files (or a server-side --uri); prints operation names")
    submit.add_argument("files", nargs="*", metavar="FILE", help="audio files (sent base64 in the request)")
    submit.add_argument("--uri", help="file:///path under the server's --audio-uri-root instead of FILEs")
    submit.add_argument("--language", help="BCP-47 or ISO 639-1 code, e.g. en-US (default: detected)")
    submit.add_argument("--separate-channels", action="store_true",
                        help="recognize each channel on its own (results carry channel tags)")
    submit.add_argument("--word-timestamps", action="store_true", help="word times in the results")
    submit.add_argument("--callback-url", help="webhook for the finished operation (host on the server's allow-list)")
    submit.add_argument("--callback-secret", help="key of the webhook's X-OASR-Signature")
    submit.add_argument("--wait", action="store_true", help="wait for each job and print its transcript")
    submit.add_argument("--interval", type=float, default=POLL_INTERVAL_S, help=argparse.SUPPRESS)
    submit.add_argument("--timeout", type=float, default=0.0, help=argparse.SUPPRESS)
    client_flags(submit)
    submit.set_defaults(func=cmd_jobs_submit)

    listing = actions.add_parser("list", help="operations, newest first: name, state, progress, submitted")
    listing.add_argument("--filter", help="state=QUEUED|RUNNING|SUCCEEDED|FAILED|CANCELLED or done=true|false")
    listing.add_argument("--page-size", type=int, default=50, help="most operations shown (default: %(default)s)")
    client_flags(listing)
    listing.set_defaults(func=cmd_jobs_list)

    for name, helptext, func in (("get", "print an operation as JSON", cmd_jobs_get),
                                 ("cancel", "cancel a queued or running operation", cmd_jobs_cancel)):
        action = actions.add_parser(name, help=helptext)
        action.add_argument("name", metavar="NAME", help="operation name (from submit or list)")
        client_flags(action)
        action.set_defaults(func=func)

    wait = actions.add_parser("wait", help="show progress until an operation is done, then print its transcript")
    wait.add_argument("name", metavar="NAME", help="operation name")
    wait.add_argument("--interval", type=float, default=POLL_INTERVAL_S,
                      help="seconds between polls (default: %(default)s)")
    wait.add_argument("--timeout", type=float, default=0.0, help="give up after this many seconds (default: never)")
    client_flags(wait)
    wait.set_defaults(func=cmd_jobs_wait)
