"""Reports: several runs side by side as Markdown + CSV (+ PNG plots with --plots).

Ratios are against the peer backend (faster_whisper) when one of the runs is the peer:
RTFx and req/s ratios are run / peer (>1: more work per second than the peer); latency
ratios are peer / run (>1: answers faster than the peer).
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

from benchmarks.asrbench.backends import PEER

logger = logging.getLogger(__name__)

# (column title, point, metric, ratio direction vs peer: "up" = run/peer, "down" = peer/run, None)
MAIN_COLUMNS: list[tuple[str, str, str, str | None]] = [
    ("single RTFx", "single/default", "rtfx", "up"),
    ("single p50 ms", "single/default", "latency_ms_p50", "down"),
    ("single p90 ms", "single/default", "latency_ms_p90", None),
    ("single p99 ms", "single/default", "latency_ms_p99", None),
    ("tput RTFx", "throughput/default", "rtfx", "up"),
    ("tput req/s", "throughput/default", "req_per_s", "up"),
    ("load c2 p50 ms", "load/closed-c2", "latency_ms_p50", "down"),
    ("load c2 p99 ms", "load/closed-c2", "latency_ms_p99", None),
    ("longform RTFx", "longform/*", "rtfx", "up"),
    ("stream 1st partial p50 ms", "streaming/paced", "first_partial_ms_p50", None),
    ("stream final p50 ms", "streaming/paced", "final_latency_ms_p50", None),
    ("cold start ms", "cold_start/default", "latency_ms_p50", "down"),
    ("WER", "single/default", "wer", None),
]
DETAIL_METRICS = ("n", "rtfx", "req_per_s", "latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "wer",
                  "empty_rate", "error_rate", "send_lag_ms_p99", "first_partial_ms_p50", "final_latency_ms_p50",
                  "final_latency_ms_p90", "partial_interval_ms_p50", "late_chunk_pct", "start_ms_mean")


def _value(summary: dict[str, Any], point: str, metric: str) -> float | None:
    if point.endswith("/*"):  # mean over a kind's points (e.g. every longform length)
        prefix = point[:-1]
        vals = [p["metrics"].get(metric) for k, p in summary["points"].items()
                if k.startswith(prefix) and p["status"] == "ok"]
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None
    p = summary["points"].get(point)
    if p is None or p["status"] != "ok":
        return None
    value: float | None = p["metrics"].get(metric)
    return value


def _status(summary: dict[str, Any], point: str) -> str:
    """Why a cell is empty: the kind's gap (unsupported/failed), the point's failure, or —."""
    kind = point.split("/")[0]
    gap = summary["points"].get(f"{kind}/*")
    if gap:
        return str(gap["status"])
    own = summary["points"].get(point)
    return "failed" if own is not None and own["status"] != "ok" else "—"


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    if isinstance(x, int):
        return str(x)
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"


def _peer(summaries: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((s for s in summaries if s["backend"] == PEER), None)


def _ratio(run_v: float | None, peer_v: float | None, direction: str) -> float | None:
    if not run_v or not peer_v:
        return None
    return run_v / peer_v if direction == "up" else peer_v / run_v


def main_table(summaries: list[dict[str, Any]]) -> str:
    peer = _peer(summaries)
    ratio_cols = [(t, p, m, d) for t, p, m, d in MAIN_COLUMNS if d] if peer else []
    header = ["run", *[c[0] for c in MAIN_COLUMNS], *[f"{t} ×peer" for t, *_ in ratio_cols]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in summaries:
        name = s["label"] + (" (SIMULATED)" if s["simulated"] else "")
        cells = [name]
        for _title, point, metric, _d in MAIN_COLUMNS:
            v = _value(s, point, metric)
            cells.append(_fmt(v) if v is not None else _status(s, point))
        for _title, point, metric, d in ratio_cols:
            assert peer is not None and d is not None
            r = _ratio(_value(s, point, metric), _value(peer, point, metric), d)
            cells.append(f"{r:.2f}×" if r is not None else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_table(summaries: list[dict[str, Any]]) -> str:
    points = sorted({p for s in summaries for p in s["points"] if not p.endswith("/*")})
    header = ["point", "metric", *[s["label"] for s in summaries]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for point in points:
        for metric in DETAIL_METRICS:
            vals = [s["points"].get(point, {}).get("metrics", {}).get(metric) for s in summaries]
            if all(v is None for v in vals):
                continue
            lines.append("| " + " | ".join([point, metric, *[_fmt(v) for v in vals]]) + " |")
    return "\n".join(lines)


def gaps(summaries: list[dict[str, Any]]) -> str:
    lines = []
    for s in summaries:
        for point, p in s["points"].items():
            if p["status"] != "ok":
                lines.append(f"- {s['label']}: `{point}` {p['status']}: {p.get('reason', '')}")
    return "\n".join(lines) or "- none"


def _load(summary: dict[str, Any]) -> str:
    """How busy the host and the measured processes were (from the out-of-process monitor)."""
    res = summary.get("resources", {})
    parts = []
    if "host" in res:
        parts.append(f"host CPU {res['host']['cpu_pct_mean']:.0f}% (load avg {res['host'].get('loadavg1_mean', 0):.1f})")
    for role in ("bench", "server"):
        if role in res:
            parts.append(f"{role} CPU {res[role]['cpu_pct_mean']:.0f}%, RSS max {res[role]['rss_mb_max']:.0f} MiB")
    return "; " + ", ".join(parts) if parts else ""


def render_markdown(summaries: list[dict[str, Any]], metas: list[dict[str, Any]]) -> str:
    env = metas[0]["environment"] if metas else {}
    runs = "\n".join(
        f"- `{s['run_id']}`: {s['label']}, profile {s['profile']}, status {s['status']}, "
        f"commit {str(m['environment'].get('git_commit'))[:10]}{' (dirty)' if m['environment'].get('git_dirty') else ''}, "
        f"workload {s['workload_hash'][:12]}{_load(s)}" for s, m in zip(summaries, metas, strict=True))
    hashes = {s["workload_hash"] for s in summaries}
    warn = "" if len(hashes) <= 1 else "\n**Warning: these runs ran different workloads; compare with care.**\n"
    return "\n".join([
        "# asrbench report", "",
        f"Machine: {env.get('cpu_model')}, {env.get('cpu_logical')} logical CPUs, "
        f"{env.get('memory_total_mb')} MiB. Percentiles are nearest-rank; warm-up excluded; "
        "×peer = ratio against faster_whisper (>1 is better).", warn,
        "## Main table", "", main_table(summaries), "",
        "## Runs", "", runs, "",
        "## Unsupported or failed", "", gaps(summaries), "",
        "## All points", "", detail_table(summaries), "",
    ])


def write_csv(path: Path, summaries: list[dict[str, Any]]) -> None:
    peer = _peer(summaries)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run_id", "label", "backend", "simulated", "point", "status", "metric", "value", "spread",
                    "peer_value"])
        for s in summaries:
            for point, p in s["points"].items():
                if p["status"] != "ok":
                    w.writerow([s["run_id"], s["label"], s["backend"], s["simulated"], point, p["status"], "", "",
                                "", ""])
                    continue
                for metric, value in p["metrics"].items():
                    peer_v = _value(peer, point, metric) if peer else None
                    w.writerow([s["run_id"], s["label"], s["backend"], s["simulated"], point, "ok", metric, value,
                                p.get("spread", {}).get(metric), peer_v])


def write_plots(out_dir: Path, summaries: list[dict[str, Any]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [s["label"] for s in summaries]
    written = []
    fig, ax = plt.subplots(figsize=(8, 4))
    for k, (title, point) in enumerate([("single", "single/default"), ("throughput", "throughput/default")]):
        vals = [_value(s, point, "rtfx") or 0.0 for s in summaries]
        ax.bar([i + 0.4 * k for i in range(len(labels))], vals, width=0.4, label=title)
    ax.set_xticks([i + 0.2 for i in range(len(labels))], labels, rotation=20, ha="right")
    ax.set_ylabel("RTFx (audio s / wall s)")
    ax.legend()
    fig.tight_layout()
    written.append(out_dir / "rtfx.png")
    fig.savefig(written[-1])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    for k, pct in enumerate(("p50", "p90", "p99")):
        vals = [_value(s, "single/default", f"latency_ms_{pct}") or 0.0 for s in summaries]
        ax.bar([i + 0.27 * k for i in range(len(labels))], vals, width=0.27, label=pct)
    ax.set_xticks([i + 0.27 for i in range(len(labels))], labels, rotation=20, ha="right")
    ax.set_ylabel("single-request latency (ms)")
    ax.legend()
    fig.tight_layout()
    written.append(out_dir / "latency.png")
    fig.savefig(written[-1])
    plt.close(fig)
    return written


def write_report(out_dir: Path, summaries: list[dict[str, Any]], metas: list[dict[str, Any]],
                 plots: bool = False) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = render_markdown(summaries, metas)
    if plots:
        pngs = write_plots(out_dir, summaries)
        md += "\n## Plots\n\n" + "\n".join(f"![{p.stem}]({p.name})" for p in pngs) + "\n"
    (out_dir / "report.md").write_text(md)
    write_csv(out_dir / "report.csv", summaries)
    logger.info("report written to %s", out_dir)
    return md
