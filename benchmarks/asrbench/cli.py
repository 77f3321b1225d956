"""Command line of asrbench: `python -m benchmarks.asrbench <command>`; see docs/benchmarking.md."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.asrbench import backends, datasets, profiles, records, report, validate
from benchmarks.asrbench.backends.base import BackendError, OptionError
from benchmarks.asrbench.compare import NOT_COMPARABLE, ThresholdsError, compare, load_thresholds, render
from benchmarks.asrbench.paths import DEFAULT_MANIFEST, results_root
from benchmarks.asrbench.summary import summarize

logger = logging.getLogger(__name__)

SMOKE_MATRIX = [
    ("oasr_engine", []),
    ("oasr_server", ["transport=http"]),
    ("oasr_server", ["transport=grpc"]),
    ("faster_whisper", []),
]
"""What `smoke-all` (make bench-smoke) runs, each in its own process, before one report."""


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    lines = ["  ".join(cols)]
    lines += ["  ".join(str(r.get(c, "")) for c in cols) for r in rows]
    return "\n".join(lines)


def cmd_datasets(_args: argparse.Namespace) -> int:
    prepared = datasets.list_prepared()
    _out(_table(prepared, ["name", "kind", "items", "duration_s", "id"]) if prepared else "no prepared datasets")
    missing = [n for n in datasets.RECIPES if n not in {p["name"] for p in prepared}]
    if missing:
        _out(f"known recipes not prepared yet (prepared on first use): {', '.join(missing)}")
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    if args.what == "manifest":
        ds = datasets.prepare_manifest(Path(args.manifest), args.name or "speech")
    elif args.what == "synthetic":
        ds = datasets.prepare_synthetic(args.name or "synthetic", args.count, args.seed)
    else:
        targets = [float(t) for t in args.targets.split(",")]
        ds = datasets.prepare_longform(args.source, targets, args.name)
    _out(f"{ds.name}: {ds.kind}, {len(ds.items)} items, {ds.total_duration_s:.1f} s, id {ds.id}")
    return 0


def cmd_profiles(_args: argparse.Namespace) -> int:
    for name in profiles.names():
        p = profiles.resolve(name)
        _out(f"{name}: {p['description']}\n  dataset {p['dataset']}, kinds: {', '.join(p['kinds'])}")
    return 0


def cmd_backends(args: argparse.Namespace) -> int:
    for name in backends.names():
        try:
            cls = backends.get(name)
        except ImportError as exc:
            _out(f"{name}: unavailable ({exc})")
            continue
        _out(f"{name}: {cls.summary}{' [simulated]' if cls.simulated else ''}")
        if args.verbose:
            for key, opt in cls.OPTIONS.items():
                choices = f" {list(opt.choices)}" if opt.choices else ""
                _out(f"    -o {key}={opt.default!r}{choices}: {opt.help}")
            caps = cls(cls.parse_options([])).capabilities()
            for kind, cap in caps.items():
                _out(f"    {kind}: {'supported' if cap.supported else 'unsupported'}"
                     f"{': ' + cap.reason if cap.reason else ''}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from benchmarks.asrbench import runner

    only = args.only.split(",") if args.only else None
    run_dir = runner.run(args.profile, args.backend, args.option or [], group=args.group, only=only)
    summary = json.loads((run_dir / "summary.json").read_text())
    _out(report.main_table([summary]))
    _out(str(run_dir))
    failed = [k for k, p in summary["points"].items() if p["status"] == "failed"]
    if failed:
        logger.error("failed points: %s", ", ".join(failed))
    return 0 if summary["status"] == "ok" and not failed else 1


def cmd_runs(_args: argparse.Namespace) -> int:
    rows = []
    for run_dir in records.list_runs():
        meta = json.loads((run_dir / "run.json").read_text())
        rows.append({"run_id": meta["run_id"], "profile": meta["profile"]["name"], "backend": meta["backend"]["label"],
                     "status": meta["status"], "group": meta.get("group") or ""})
    _out(_table(rows, ["run_id", "profile", "backend", "status", "group"]) if rows else f"no runs under {results_root()}")
    return 0


def _summary(ref: str) -> dict[str, Any]:
    run_dir = records.resolve_run(ref)
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else summarize(records.load_run(run_dir))


def cmd_validate(args: argparse.Namespace) -> int:
    summary = _summary(args.run)
    rows = validate.accuracy_rows(summary, args.max_wer, args.max_empty_rate)
    _out(_table(rows, ["point", "wer", "empty_rate", "n_scored", "verdict"]))
    failed = any(r["verdict"] != "ok" for r in rows)
    if args.reference:
        d = validate.drift(records.load_run(records.resolve_run(args.run)),
                           records.load_run(records.resolve_run(args.reference)))
        _out(f"drift vs {args.reference}: {d['changed']}/{d['n']} clips changed, drift WER {d['drift_wer']}")
        if d["changed_ids"]:
            _out("  changed: " + ", ".join(d["changed_ids"]))
        if d["drift_wer"] is not None and d["drift_wer"] > args.max_drift:
            failed = True
    return 1 if failed else 0


def cmd_compare(args: argparse.Namespace) -> int:
    thresholds = load_thresholds(Path(args.thresholds) if args.thresholds else None)
    base, cand = _summary(args.base), _summary(args.cand)
    code, rows = compare(base, cand, thresholds)
    _out(render(base, cand, code, rows))
    return code


def _group_runs(group: str) -> list[Path]:
    runs = []
    for run_dir in records.list_runs():
        if json.loads((run_dir / "run.json").read_text()).get("group") == group:
            runs.append(run_dir)
    return runs


def cmd_report(args: argparse.Namespace) -> int:
    run_dirs = [records.resolve_run(r) for r in args.runs]
    if args.group:
        run_dirs += _group_runs(args.group)
    if not run_dirs:
        raise records.RunNotFoundError("report needs at least one RUN or --group")
    summaries = [_summary(str(d)) for d in run_dirs]
    metas = [json.loads((d / "run.json").read_text()) for d in run_dirs]
    out_dir = Path(args.out) if args.out else results_root() / "reports" / datetime.now(timezone.utc).strftime(
        "%Y%m%dT%H%M%SZ")
    _out(report.write_report(out_dir, summaries, metas, plots=args.plots))
    _out(f"report: {out_dir / 'report.md'}")
    return 0


def cmd_recompute(args: argparse.Namespace) -> int:
    run_dir = records.resolve_run(args.run)
    fresh = summarize(records.load_run(run_dir))
    stored_path = run_dir / "summary.json"
    stored = json.loads(stored_path.read_text()) if stored_path.is_file() else None
    if args.write or stored is None:
        records.write_json(stored_path, fresh)
        _out(f"wrote {stored_path}")
        return 0
    if stored == fresh:
        _out(f"{run_dir.name}: stored summary reproduced exactly from the raw records")
        return 0
    differing = sorted(k for k in set(stored["points"]) | set(fresh["points"])
                       if stored["points"].get(k) != fresh["points"].get(k))
    _out(f"{run_dir.name}: stored summary DIFFERS from the raw records at: {', '.join(differing) or 'header'}")
    return 1


def cmd_save_baseline(args: argparse.Namespace) -> int:
    run_dir = records.resolve_run(args.run)
    meta = json.loads((run_dir / "run.json").read_text())
    name = args.name or f"{meta['profile']['name']}-{meta['backend']['label']}"
    target = results_root() / records.BASELINES / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(run_dir, target)
    _out(f"baseline {name!r} = {run_dir.name} ({target})")
    return 0


def cmd_smoke_all(args: argparse.Namespace) -> int:
    group = f"{args.profile}-all-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    matrix = SMOKE_MATRIX if not args.backend else [(b.split(":")[0], b.split(":")[1:]) for b in args.backend]
    failed = []
    for name, pairs in matrix:
        cmd = [sys.executable, "-m", "benchmarks.asrbench", "run", "--profile", args.profile, "--backend", name,
               "--group", group, *[x for p in pairs for x in ("-o", p)]]
        logger.info("smoke-all: %s", " ".join(cmd[2:]))
        # Each backend in its own process: no model, thread pool or server leaks into the next.
        if subprocess.run(cmd).returncode != 0:
            failed.append(" ".join([name, *pairs]))
    run_dirs = _group_runs(group)
    if run_dirs:
        out = Path(args.out) if args.out else results_root() / "reports" / group
        cmd_report(argparse.Namespace(runs=[str(d) for d in run_dirs], group=None, out=str(out), plots=args.plots))
    if failed:
        logger.error("smoke-all: runs with failures: %s", "; ".join(failed))
    return 1 if failed or not run_dirs else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.asrbench",
                                     description="Reproducible ASR speed/accuracy benchmarks (see docs/benchmarking.md).")
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("datasets", help="list prepared datasets").set_defaults(fn=cmd_datasets)

    p = sub.add_parser("prepare", help="prepare a dataset")
    psub = p.add_subparsers(dest="what", required=True)
    m = psub.add_parser("manifest", help="index a {id, audio, text} JSONL")
    m.add_argument("--manifest", default=str(DEFAULT_MANIFEST))
    m.add_argument("--name")
    s = psub.add_parser("synthetic", help="deterministic synthetic clips (suite self-tests)")
    s.add_argument("--name")
    s.add_argument("--count", type=int, default=6)
    s.add_argument("--seed", type=int, default=0)
    lf = psub.add_parser("longform", help="join consecutive clips of a prepared set up to target lengths")
    lf.add_argument("--source", default="speech")
    lf.add_argument("--targets", default="30,60,120", help="comma-separated target lengths in seconds")
    lf.add_argument("--name")
    p.set_defaults(fn=cmd_prepare)

    sub.add_parser("profiles", help="list profiles").set_defaults(fn=cmd_profiles)

    b = sub.add_parser("backends", help="list backends")
    b.add_argument("-v", "--verbose", action="store_true", help="options and declared capabilities")
    b.set_defaults(fn=cmd_backends)

    r = sub.add_parser("run", help="run a profile against a backend")
    r.add_argument("--profile", required=True, choices=profiles.names())
    r.add_argument("--backend", required=True, choices=backends.names())
    r.add_argument("-o", "--option", action="append", metavar="KEY=VALUE", help="backend option (repeatable)")
    r.add_argument("--group", help="tag runs meant to be reported together")
    r.add_argument("--only", help="comma-separated kinds of the profile to run (e.g. single,throughput)")
    r.set_defaults(fn=cmd_run)

    sub.add_parser("runs", help="list runs").set_defaults(fn=cmd_runs)

    v = sub.add_parser("validate", help="WER / empty rate per point; --reference: transcript drift")
    v.add_argument("run")
    v.add_argument("--reference", help="run whose transcripts this one should match")
    v.add_argument("--max-wer", type=float)
    v.add_argument("--max-empty-rate", type=float)
    v.add_argument("--max-drift", type=float, default=0.0, help="largest drift WER accepted vs --reference")
    v.set_defaults(fn=cmd_validate)

    c = sub.add_parser("compare", help="regression gate: exit 0 ok, 1 regression/failed/missing, 2 not comparable")
    c.add_argument("base")
    c.add_argument("cand")
    c.add_argument("--thresholds", help="YAML/JSON file of per-metric tolerances")
    c.set_defaults(fn=cmd_compare)

    rp = sub.add_parser("report", help="Markdown + CSV report of runs side by side")
    rp.add_argument("runs", nargs="*")
    rp.add_argument("--group", help="add every run of this group")
    rp.add_argument("--plots", action="store_true")
    rp.add_argument("-o", "--out", help="output directory")
    rp.set_defaults(fn=cmd_report)

    rc = sub.add_parser("recompute", help="recompute a run's summary from raw records; exit 1 if it differs")
    rc.add_argument("run")
    rc.add_argument("--write", action="store_true", help="overwrite the stored summary")
    rc.set_defaults(fn=cmd_recompute)

    sb = sub.add_parser("save-baseline", help="copy a run under baselines/NAME")
    sb.add_argument("run")
    sb.add_argument("--name")
    sb.set_defaults(fn=cmd_save_baseline)

    sa = sub.add_parser("smoke-all", help="smoke profile against every OASR backend and the peer, one report")
    sa.add_argument("--profile", default="smoke", choices=profiles.names())
    sa.add_argument("--backend", action="append", help="NAME[:key=value...] instead of the default matrix")
    sa.add_argument("--plots", action="store_true")
    sa.add_argument("-o", "--out")
    sa.set_defaults(fn=cmd_smoke_all)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("httpx", "httpcore", "faster_whisper"):  # one INFO line per request drowns the progress log
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        code: int = args.fn(args)
        return code
    except (datasets.DatasetError, profiles.ProfileError, BackendError, OptionError, ThresholdsError,
            records.RunNotFoundError) as exc:
        logger.error("%s", exc)
        return NOT_COMPARABLE if isinstance(exc, records.RunNotFoundError) and args.command == "compare" else 2
