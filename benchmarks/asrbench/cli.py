"""Command line of asrbench: `python -m benchmarks.asrbench <command>`; see docs/benchmarking.md.

    datasets                      registered datasets, licence, size, prepared subsets
    prepare NAME                  index a local copy (--source-dir) or download (--download)
    profiles [NAME]               built-in profiles, or one resolved with overrides
    backends [-v]                 backends, availability, options, capabilities
    run --profile P --backend B   execute a profile; exit 1 if any point failed
    runs                          stored runs, newest first
    validate --backend B --dataset D   WER and empty-transcript rate, untimed; drift vs --reference
    compare BASE CAND             regression gate: 0 ok, 1 regression/failed/missing, 2 not comparable
    report RUN [RUN ...]          Markdown + CSV (+ --plots)
    recompute RUN                 re-derive summaries from raw records
    save-baseline RUN --name N    copy a run to <results root>/baselines/N
    engine {rtf,lockstep,paced} --family F   one family's model in process (engine_bench/)
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from benchmarks.asrbench import commands, datasets
from benchmarks.asrbench.backends import names as backend_names
from benchmarks.asrbench.errors import USER_ERRORS, DatasetError, DatasetUnavailable, DownloadError
from benchmarks.asrbench.paths import set_data_dir
from benchmarks.asrbench.stats import NORMALIZERS

NOT_COMPARABLE = 2
"""compare's exit code when an input cannot be read (compare.NOT_COMPARABLE; not imported, to keep start-up light)."""
BUILTIN_PROFILES = sorted(p.stem for p in (Path(__file__).parent / "builtin_profiles").glob("*.yaml"))

logger = logging.getLogger(__name__)


def _add_overrides(p: argparse.ArgumentParser, selection: bool) -> None:
    """The documented override flags of `run` (and `profiles NAME`), in the order they apply."""
    p.add_argument("--dataset", help="replace the profile's primary dataset (NAME/SUBSET)")
    sweep = p.add_argument_group("sweep flags")
    sweep.add_argument("--batch-sizes", type=int, nargs="+", metavar="B")
    sweep.add_argument("--concurrency", type=int, nargs="+", metavar="N", help="closed-loop client counts")
    sweep.add_argument("--rates", type=float, nargs="+", metavar="R", help="open-loop req/s (switches load to open loop)")
    sweep.add_argument("--chunk-ms", type=int, nargs="+", metavar="MS")
    sweep.add_argument("--sessions", type=int, nargs="+", metavar="N")
    sweep.add_argument("--repetitions", type=int)
    sweep.add_argument("--warmup", help="warm-up per benchmark: an integer or 'all'")
    sweep.add_argument("--timeout-s", type=float)
    wl = p.add_argument_group("workload flags")
    wl.add_argument("--num-items", type=int)
    wl.add_argument("--duration-range", nargs=2, metavar=("LOW", "HIGH"), help="seconds, [LOW, HIGH); HIGH may be null")
    wl.add_argument("--seed", type=int)
    p.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE",
                   help="section: defaults, workloads.<name> or a benchmark name (repeatable)")
    if selection:
        p.add_argument("--only", action="append", help="benchmark names or kinds to run (comma-separated)")
        p.add_argument("--skip", action="append", help="benchmark names or kinds to leave out")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.asrbench",
                                     description="ASR inference benchmark suite (see docs/benchmarking.md).")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--data-dir", help="prepared datasets (default $ASRBENCH_DATA_DIR or ~/.cache/oasr/asrbench)")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("datasets", help="registered datasets and their prepared subsets").set_defaults(
        fn=commands.cmd_datasets)

    p = sub.add_parser("prepare", help="index a local copy (--source-dir) or download (--download) a dataset")
    p.add_argument("dataset", choices=list(datasets.DATASETS), metavar="NAME")
    p.add_argument("--subset")
    p.add_argument("--source-dir", help="existing copy (for manifest: the manifest file)")
    p.add_argument("--download", action="store_true", help="fetch the corpus (nothing is downloaded without it)")
    p.add_argument("--verify", action="store_true", help="re-read every file's header duration")
    p.add_argument("-o", "--option", action="append", metavar="KEY=VALUE",
                   help="adapter option, e.g. audio_root, group_sep, language")
    p.add_argument("--source", help="longform: the prepared dataset to build from (NAME/SUBSET)")
    p.add_argument("--targets", default="60,300,900", help="longform: comma-separated target lengths in seconds")
    p.add_argument("--shards", type=int, help="earnings21 --download: Parquet shards to fetch")
    p.add_argument("--manifest", help=argparse.SUPPRESS)  # pre-2.0 spellings, each with a deprecation line
    p.add_argument("--name", help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    p.set_defaults(fn=commands.cmd_prepare)

    pr = sub.add_parser("profiles", help="list profiles, or print one resolved with overrides")
    pr.add_argument("name", nargs="?")
    _add_overrides(pr, selection=True)
    pr.set_defaults(fn=commands.cmd_profiles)

    b = sub.add_parser("backends", help="backends, availability and (-v) options and capabilities")
    b.add_argument("-v", "--verbose", action="store_true")
    b.set_defaults(fn=commands.cmd_backends)

    r = sub.add_parser("run", help="execute a profile against a backend; exit 1 if any point failed")
    r.add_argument("--profile", required=True, help=f"built-in ({', '.join(BUILTIN_PROFILES)}) or a YAML file")
    r.add_argument("--backend", required=True, choices=backend_names())
    r.add_argument("-o", "--option", action="append", metavar="KEY=VALUE", help="backend option, parsed as YAML")
    _add_overrides(r, selection=True)
    r.add_argument("--tag", help="label stored with the run (runs, report --tag)")
    r.add_argument("--out", help="write this run under DIR instead of the results root")
    r.add_argument("--no-monitor", action="store_true", help="no resource monitoring")
    r.add_argument("--group", help=argparse.SUPPRESS)
    r.set_defaults(fn=commands.cmd_run)

    sub.add_parser("runs", help="stored runs, newest first").set_defaults(fn=commands.cmd_runs)

    v = sub.add_parser("validate", help="WER and empty-transcript rate on a labelled subset (untimed)")
    v.add_argument("run", nargs="?", help=argparse.SUPPRESS)  # pre-2.0: score a timed run
    v.add_argument("--backend", choices=backend_names())
    v.add_argument("-o", "--option", action="append", metavar="KEY=VALUE")
    v.add_argument("--dataset", help="NAME/SUBSET")
    v.add_argument("--manifest", help="a fixed manifest instead of a dataset")
    v.add_argument("--audio-root", help="with --manifest: where relative audio paths resolve")
    v.add_argument("--num-items", type=int, help="first N labelled items (default all)")
    v.add_argument("--normalizer", default="english", choices=NORMALIZERS)
    v.add_argument("--reference", help="a validation of another backend to measure drift against")
    v.add_argument("--max-wer", type=float, help="WER limit in percent")
    v.add_argument("--max-empty-rate", type=float, default=0.0)
    v.add_argument("--max-changed", type=int, help="with --reference: most hypotheses allowed to change")
    v.add_argument("--max-wer-delta", type=float, help="with --reference: most WER increase in points")
    v.add_argument("--max-drift-wer", type=float, help="with --reference: most drift WER in percent")
    v.set_defaults(fn=commands.cmd_validate)

    c = sub.add_parser("compare", help="regression gate: 0 ok, 1 regression/failed/missing, 2 not comparable")
    c.add_argument("base")
    c.add_argument("cand")
    c.add_argument("--thresholds", help="YAML/JSON file of per-metric tolerances")
    c.add_argument("--json", help="write the comparison as JSON")
    c.add_argument("--allow-missing", action="store_true", help="list missing results without failing")
    c.add_argument("--max-wer-regression", type=float, default=0.3, help="validations: WER points allowed")
    c.add_argument("-v", "--verbose", action="store_true", help="also list unchanged metrics")
    c.set_defaults(fn=commands.cmd_compare)

    rp = sub.add_parser("report", help="Markdown + CSV report of stored runs side by side")
    rp.add_argument("runs", nargs="*")
    rp.add_argument("--tag", help="add every run with this tag")
    rp.add_argument("--plots", action="store_true")
    rp.add_argument("--out", "-o", dest="out", help="output directory (default <first run>/report)")
    rp.add_argument("--group", help=argparse.SUPPRESS)
    rp.set_defaults(fn=commands.cmd_report)

    rc = sub.add_parser("recompute", help="re-derive a run's summaries from its raw records; exit 1 if they differ")
    rc.add_argument("run")
    rc.add_argument("--write", action="store_true", help="overwrite the stored summary")
    rc.set_defaults(fn=commands.cmd_recompute)

    sb = sub.add_parser("save-baseline", help="copy a run to <results root>/baselines/NAME")
    sb.add_argument("run")
    sb.add_argument("--name", required=True)
    sb.set_defaults(fn=commands.cmd_save_baseline)

    sa = sub.add_parser("smoke-all", help="one profile against every OASR backend and the peers, one report")
    sa.add_argument("--profile", default="smoke")
    sa.add_argument("--backend", action="append", help="NAME[:key=value...] instead of the default matrix")
    sa.add_argument("--dataset")
    sa.add_argument("--plots", action="store_true")
    sa.add_argument("--out", "-o", dest="out")
    sa.set_defaults(fn=commands.cmd_smoke_all)

    # listed here for --help; main() hands everything after `engine` to the workloads' own parser
    en = sub.add_parser("engine", add_help=False,
                        help="one family's model in process: rtf, lockstep or paced (engine --help)")
    en.add_argument("args", nargs=argparse.REMAINDER)
    en.set_defaults(fn=_engine_workloads)
    return parser


def _engine_workloads(args: argparse.Namespace) -> int:
    from benchmarks.asrbench.engine_bench.cli import main as engine_main

    return engine_main(args.args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["engine"]:  # its own parser: engine workloads take no profile, dataset or backend
        return _engine_workloads(argparse.Namespace(args=argv[1:]))
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("httpx", "httpcore", "faster_whisper"):  # one INFO line per request drowns the progress log
        logging.getLogger(chatty).setLevel(logging.WARNING)
    set_data_dir(Path(args.data_dir).expanduser() if args.data_dir else None)
    try:
        code: int = args.fn(args)
        return code
    except DatasetUnavailable as exc:
        sys.stderr.write(f"error: {exc}\n")  # the acquisition instructions, verbatim
        return 1
    except USER_ERRORS as exc:
        logger.error("%s", exc)
        if args.command == "compare":
            return NOT_COMPARABLE
        return 1 if isinstance(exc, (DatasetError, DownloadError)) else 2
    finally:
        set_data_dir(None)
