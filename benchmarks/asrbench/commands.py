"""What each command does; cli.py only parses arguments and maps errors to exit codes."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.asrbench import datasets
from benchmarks.asrbench.paths import DEV_MANIFEST, results_root

if TYPE_CHECKING:
    from benchmarks.asrbench.profiles import Overrides

# Heavier modules (numpy, torch, HTTP clients, the backends) are imported by the commands that
# use them, so `prepare`/`datasets` start in a fraction of a second and fail fast.

logger = logging.getLogger(__name__)

SMOKE_MATRIX = [
    ("oasr_engine", []),
    ("oasr_server", ["transport=http"]),
    ("oasr_server", ["transport=grpc"]),
    ("faster_whisper", ["compute_type=int8"]),
    ("transformers", []),
]
"""What `smoke-all` (make bench-smoke) runs, each in its own process, before one report."""


def out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def deprecated(old: str, new: str) -> None:
    logger.warning("deprecated: %s; use %s", old, new)


def table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols)]
    lines += ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`-o KEY=VALUE` of prepare, values parsed as YAML."""
    import yaml

    options = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise datasets.DatasetError(f"-o {pair!r} is not KEY=VALUE")
        options[key] = yaml.safe_load(raw) if raw else ""
    return options


def cmd_datasets(_args: argparse.Namespace) -> int:
    out(table(datasets.registry(), ["name", "subsets", "prepared", "licence", "acquisition", "size"]))
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    options = parse_options(args.option or [])
    source_dir = Path(args.source_dir).expanduser() if args.source_dir else None
    subset = args.subset
    if args.manifest:
        deprecated("prepare manifest --manifest PATH", "prepare manifest --source-dir PATH")
        source_dir = Path(args.manifest)
    if args.name:
        deprecated("prepare --name N", "prepare --subset N")
        subset = args.name
    for key in ("count", "seed"):
        if getattr(args, key) is not None:
            deprecated(f"prepare synthetic --{key} N", f"prepare synthetic -o {key}=N")
            options[key] = getattr(args, key)
    if args.dataset == "manifest" and source_dir is None and not args.verify and subset in (None, "speech"):
        source_dir = DEV_MANIFEST  # our dev speech set, when asked for by its name or not at all
    if args.dataset == "longform":
        options.update(source=args.source, targets=[float(t) for t in args.targets.split(",")])
    if args.dataset == "earnings21" and args.shards:
        options["shards"] = args.shards
    prepared = None
    if args.verify and source_dir is None and not args.download and args.dataset not in ("longform", "synthetic"):
        chosen = subset or datasets.adapter(args.dataset).default_subset
        prepared = [datasets.load(f"{args.dataset}/{chosen}")]
    if prepared is None:
        prepared = datasets.prepare(args.dataset, subset, source_dir, args.download, options)
    problems = []
    for ds in prepared:
        stats = ds.card["duration_s"]
        out(f"{ds.ref}: {len(ds.items)} items ({ds.card['with_text']} with text), {stats['total']:.1f} s, "
            f"revision {ds.revision[:12]}, {ds.root}")
        if args.verify:
            found = datasets.verify(ds)
            problems += found
            out(f"{ds.ref}: verified {len(ds.items)} headers, {len(found)} problem(s)")
    for p in problems:
        logger.error("verify: %s", p)
    return 1 if problems else 0


def profile_overrides(args: argparse.Namespace) -> Overrides:
    from benchmarks.asrbench import profiles

    def split(values: list[str] | None) -> list[str] | None:
        return [x for v in values for x in v.split(",") if x] if values else None

    rng = None
    if args.duration_range:
        rng = [None if v.lower() in ("null", "none", "inf") else float(v) for v in args.duration_range]
    return profiles.Overrides(
        dataset=args.dataset, batch_sizes=args.batch_sizes, concurrency=args.concurrency, rates=args.rates,
        chunk_ms=args.chunk_ms, sessions=args.sessions, repetitions=args.repetitions, warmup=args.warmup,
        timeout_s=args.timeout_s, num_items=args.num_items, duration_range=rng, seed=args.seed,
        sets=args.set or [], only=split(getattr(args, "only", None)), skip=split(getattr(args, "skip", None)))


def cmd_profiles(args: argparse.Namespace) -> int:
    import yaml

    from benchmarks.asrbench import profiles

    if args.name:
        resolved = profiles.resolve(args.name, profile_overrides(args))
        out(yaml.safe_dump(resolved, sort_keys=False, width=110).rstrip())
        return 0
    for name in profiles.names():
        raw = profiles.PROFILES[name]
        out(f"{name}: {' '.join(str(raw.get('description', '')).split())}")
    return 0


def cmd_backends(args: argparse.Namespace) -> int:
    from benchmarks.asrbench import backends

    for name in backends.names():
        try:
            cls = backends.get(name)
        except ImportError as exc:
            out(f"{name}: unavailable ({exc})")
            continue
        gap = cls.unavailable()
        out(f"{name}: {cls.summary}{' [simulated]' if cls.simulated else ''}"
            f"{' [unavailable: ' + gap + ']' if gap else ''}")
        if args.verbose:
            for key, opt in cls.OPTIONS.items():
                choices = f" {list(opt.choices)}" if opt.choices else ""
                out(f"    -o {key}={opt.default!r}{choices}: {opt.help}")
            for kind, cap in cls(cls.parse_options([])).capabilities().items():
                out(f"    {kind}: {'supported' if cap.supported else 'unsupported'}"
                    f"{': ' + cap.reason if cap.reason else ''}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from benchmarks.asrbench import report, runner


    tag = args.tag
    if args.group:
        deprecated("run --group G", "run --tag G")
        tag = tag or args.group
    run_dir = runner.run(args.profile, args.backend, args.option or [], overrides=profile_overrides(args), tag=tag,
                         out=Path(args.out) if args.out else None, monitor=not args.no_monitor)
    summary = json.loads((run_dir / "summary.json").read_text())
    out(report.main_table([summary]))
    out(str(run_dir))
    failed = [k for k, p in summary["points"].items() if p["status"] == "failed"]
    if failed:
        logger.error("failed points: %s", ", ".join(failed))
    return 0 if summary["status"] == "ok" and not failed else 1


def cmd_runs(_args: argparse.Namespace) -> int:
    from benchmarks.asrbench import records

    rows = []
    for run_dir in records.list_runs():
        meta = json.loads((run_dir / "run.json").read_text())
        rows.append({"run_id": meta["run_id"], "profile": meta["profile"]["name"], "backend": meta["backend"]["label"],
                     "tag": meta.get("tag") or meta.get("group") or "", "status": meta["status"],
                     "finished": meta.get("finished_utc") or "(incomplete)", "dir": run_dir.name})
    out(table(rows, ["run_id", "profile", "backend", "tag", "status", "finished", "dir"]) if rows
        else f"no runs under {results_root()}")
    return 0


def load_summary(ref: str) -> dict[str, Any]:
    from benchmarks.asrbench import records
    from benchmarks.asrbench.summary import summarize

    run_dir = records.resolve_run(ref)
    if (run_dir / "validation.json").is_file():
        data: dict[str, Any] = json.loads((run_dir / "validation.json").read_text())
        return data
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else summarize(records.load_run(run_dir))


def cmd_validate(args: argparse.Namespace) -> int:
    from benchmarks.asrbench import records, validate

    if args.run:
        deprecated("validate RUN", "validate --backend B --dataset D (untimed; RUN's WER is in its report)")
        rows = validate.run_accuracy_rows(load_summary(args.run), args.max_wer)
        out(table(rows, ["point", "wer", "empty_rate", "n_scored", "verdict"]) if rows else "no scored point")
        return 1 if any(r["verdict"] != "ok" for r in rows) else 0
    if not args.backend or not (args.dataset or args.manifest):
        raise datasets.DatasetError("validate needs --backend B and --dataset NAME/SUBSET (or --manifest FILE)")
    if args.manifest:
        opts = {"audio_root": args.audio_root} if args.audio_root else {}
        ds = datasets.prepare("manifest", None, Path(args.manifest), False, opts)[0]
    else:
        ds = datasets.ensure(args.dataset)
    reference = records.resolve_run(args.reference) if args.reference else None
    if reference is not None and not (reference / "validation.json").is_file():
        raise records.RunNotFoundError(f"--reference {args.reference}: {reference} is not a validation")
    out_dir, rep = validate.validate(args.backend, args.option or [], ds, args.num_items, args.normalizer, reference)
    out(validate.render(rep))
    out(str(out_dir))
    failed = validate.checks(rep, args.max_wer, args.max_empty_rate, args.max_changed, args.max_wer_delta,
                             args.max_drift_wer)
    for f in failed:
        logger.error("check failed: %s", f)
    return 1 if failed else 0


def cmd_compare(args: argparse.Namespace) -> int:
    from benchmarks.asrbench import records
    from benchmarks.asrbench.compare import compare, compare_validations, load_thresholds, render

    base, cand = load_summary(args.base), load_summary(args.cand)
    if base.get("kind") == "validation" or cand.get("kind") == "validation":
        code, text, data = compare_validations(base, cand, args.max_wer_regression)
    else:
        thresholds = load_thresholds(Path(args.thresholds) if args.thresholds else None)
        code, rows = compare(base, cand, thresholds, allow_missing=args.allow_missing)
        text, data = render(base, cand, code, rows, verbose=args.verbose), {"code": code, "rows": rows}
    out(text)
    if args.json:
        records.write_json(Path(args.json), data)
    return code


def _tagged(tag: str) -> list[Path]:
    from benchmarks.asrbench import records

    return [d for d in records.list_runs() if json.loads((d / "run.json").read_text()).get("tag") == tag]


def cmd_report(args: argparse.Namespace) -> int:
    from benchmarks.asrbench import records, report

    run_dirs = [records.resolve_run(r) for r in args.runs]
    tag = args.tag
    if args.group:
        deprecated("report --group G", "report --tag G")
        tag = tag or args.group
    if tag:
        run_dirs += sorted(_tagged(tag))
    if not run_dirs:
        raise records.RunNotFoundError("report needs at least one RUN or --tag")
    summaries = [load_summary(str(d)) for d in run_dirs]
    metas = [json.loads((d / "run.json").read_text()) for d in run_dirs]
    out_dir = Path(args.out) if args.out else run_dirs[0] / "report"
    out(report.write_report(out_dir, summaries, metas, plots=args.plots))
    out(f"report: {out_dir / 'report.md'}")
    return 0


def cmd_recompute(args: argparse.Namespace) -> int:
    from benchmarks.asrbench import records
    from benchmarks.asrbench.summary import summarize

    run_dir = records.resolve_run(args.run)
    fresh = summarize(records.load_run(run_dir))
    stored_path = run_dir / "summary.json"
    stored = json.loads(stored_path.read_text()) if stored_path.is_file() else None
    if args.write or stored is None:
        records.write_json(stored_path, fresh)
        out(f"wrote {stored_path}")
        return 0
    if stored == fresh:
        out(f"{run_dir.name}: stored summary reproduced exactly from the raw records")
        return 0
    differing = sorted(k for k in set(stored["points"]) | set(fresh["points"])
                       if stored["points"].get(k) != fresh["points"].get(k))
    out(f"{run_dir.name}: stored summary DIFFERS from the raw records at: {', '.join(differing) or 'header'}")
    return 1


def cmd_save_baseline(args: argparse.Namespace) -> int:
    from benchmarks.asrbench import records

    run_dir = records.resolve_run(args.run)
    target = results_root() / records.BASELINES / args.name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(run_dir, target)
    out(f"baseline {args.name!r} = {run_dir.name} ({target})")
    return 0


def cmd_smoke_all(args: argparse.Namespace) -> int:
    tag = f"{args.profile}-all-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    matrix = SMOKE_MATRIX if not args.backend else [(b.split(":")[0], b.split(":")[1:]) for b in args.backend]
    failed = []
    for name, pairs in matrix:
        cmd = [sys.executable, "-m", "benchmarks.asrbench", "run", "--profile", args.profile, "--backend", name,
               "--tag", tag, *[x for p in pairs for x in ("-o", p)]]
        if args.dataset:
            cmd += ["--dataset", args.dataset]
        logger.info("smoke-all: %s", " ".join(cmd[2:]))
        # Each backend in its own process: no model, thread pool or server leaks into the next.
        if subprocess.run(cmd).returncode != 0:
            failed.append(" ".join([name, *pairs]))
    run_dirs = sorted(_tagged(tag))
    if run_dirs:
        out_dir = Path(args.out) if args.out else results_root() / "reports" / tag
        cmd_report(argparse.Namespace(runs=[str(d) for d in run_dirs], tag=None, group=None, out=str(out_dir),
                                      plots=args.plots))
    if failed:
        logger.error("smoke-all: runs with failures: %s", "; ".join(failed))
    return 1 if failed or not run_dirs else 0
