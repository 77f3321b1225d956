"""Child process of the cold_start kind: start a backend from nothing, transcribe one clip.

Prints one JSON line of perf_counter timestamps (CLOCK_MONOTONIC, comparable with the
parent's) on stdout, then stops the backend. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

T_MAIN = time.perf_counter()  # as early as this module can take it: after interpreter start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--wav", required=True)
    parser.add_argument("--text", default="")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    from pathlib import Path

    from benchmarks.asrbench import audio, backends
    from benchmarks.asrbench.backends.base import Utterance

    backend = backends.create(args.backend, args.option)
    utt = Utterance("cold", audio.read_wav(Path(args.wav)), args.text)
    backend.prepare(utt)
    t_imported = time.perf_counter()
    backend.start()
    t_started = time.perf_counter()
    try:
        text = backend.transcribe(utt)
        t_done = time.perf_counter()
        backend.transcribe(utt)
        t_warm_done = time.perf_counter()
        print(json.dumps({"t_main": T_MAIN, "t_imported": t_imported, "t_started": t_started, "t_done": t_done,
                          "t_warm_done": t_warm_done, "text": text}), flush=True)
    finally:
        backend.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
