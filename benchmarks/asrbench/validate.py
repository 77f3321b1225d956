"""Correctness validation, untimed: WER and the empty-transcript rate of a backend on a
labelled subset, and transcript drift against a reference validation (the same clips
transcribed by another implementation of the same checkpoint).

Validation uses the fastest path the backend offers (native batches, else concurrent
requests up to its declared concurrency) and writes, under <results root>/validation/:
    validation.json    backend, dataset, normaliser, wer_pct, empty_rate, failures, drift
    predictions.jsonl  {id, ref, hyp, error}
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.asrbench import SUITE_VERSION, backends, datasets
from benchmarks.asrbench.backends.base import Backend, Utterance
from benchmarks.asrbench.records import new_validation_dir, read_jsonl, write_json
from benchmarks.asrbench.stats import normalize, wer

logger = logging.getLogger(__name__)

BATCH_ROWS = 16
"""Items per native batch call during validation."""


def _utterances(ds: datasets.Dataset, num_items: int | None) -> list[Utterance]:
    labelled = [i for i in ds.items if i.text]
    if not labelled:
        raise datasets.DatasetError(f"{ds.ref} has no item with a reference transcript")
    chosen = labelled[:num_items] if num_items else labelled
    return [Utterance(i.id, ds.audio(i), i.text or "") for i in chosen]


def _transcribe_all(backend: Backend, utts: list[Utterance]) -> list[tuple[str, str | None]]:
    """(hypothesis, error) per utterance, by the fastest path the backend declares."""
    caps = backend.capabilities()
    if caps.get("batch") is not None and caps["batch"].supported:
        out: list[tuple[str, str | None]] = []
        for k in range(0, len(utts), BATCH_ROWS):
            chunk = utts[k:k + BATCH_ROWS]
            try:
                out += [(t, None) for t in backend.transcribe_batch(chunk)]
            except Exception as exc:  # a failed batch is recorded per item, not raised
                out += [("", f"{type(exc).__name__}: {exc}")] * len(chunk)
        return out

    def one(utt: Utterance) -> tuple[str, str | None]:
        try:
            return backend.transcribe(utt), None
        except Exception as exc:  # a failed request is counted, not raised
            return "", f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max_workers=max(1, backend.concurrency()), thread_name_prefix="validate") as pool:
        return list(pool.map(one, utts))


def drift(predictions: list[dict[str, Any]], reference: list[dict[str, Any]], normalizer: str) -> dict[str, Any]:
    """On the clips both transcribed: the share whose normalised hypothesis changed, and the
    WER of these hypotheses against the reference hypotheses (drift_wer_pct)."""
    theirs = {p["id"]: p["hyp"] for p in reference if not p.get("error")}
    shared = [p for p in predictions if not p.get("error") and p["id"] in theirs]
    if not shared:
        return {"n": 0, "changed": 0, "changed_pct": None, "drift_wer_pct": None, "changed_ids": []}
    changed = [p["id"] for p in shared if normalize(p["hyp"], normalizer) != normalize(theirs[p["id"]], normalizer)]
    scored = wer([theirs[p["id"]] for p in shared], [p["hyp"] for p in shared], normalizer)
    return {"n": len(shared), "changed": len(changed), "changed_pct": round(100.0 * len(changed) / len(shared), 2),
            "drift_wer_pct": None if scored["wer"] is None else round(100.0 * scored["wer"], 2),
            "changed_ids": changed}


def validate(backend_name: str, option_pairs: list[str], ds: datasets.Dataset, num_items: int | None,
             normalizer: str, reference: Path | None = None) -> tuple[Path, dict[str, Any]]:
    backend = backends.create(backend_name, option_pairs)
    utts = _utterances(ds, num_items)
    backend.start()
    try:
        for utt in utts:
            backend.prepare(utt)
        results = _transcribe_all(backend, utts)
        info = backend.info()
    finally:
        backend.stop()
    predictions = [{"id": u.item_id, "ref": u.text, "hyp": hyp, "error": err}
                   for u, (hyp, err) in zip(utts, results, strict=True)]
    ok = [p for p in predictions if not p["error"]]
    scored = wer([p["ref"] for p in ok], [p["hyp"] for p in ok], normalizer)
    out_dir, vid = new_validation_dir(backend.label)
    report: dict[str, Any] = {
        "kind": "validation", "suite_version": SUITE_VERSION, "validation_id": vid, "dir": out_dir.name,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "backend": {"name": backend.name, "label": backend.label, "options": backend.options,
                    "option_pairs": option_pairs, "info": info},
        "dataset": ds.ref, "revision": ds.revision, "items": len(predictions), "normalizer": normalizer,
        "wer_pct": None if scored["wer"] is None else round(100.0 * scored["wer"], 2),
        "empty_rate": scored["empty_rate"], "failed": len(predictions) - len(ok), "n_scored": scored["n_scored"],
    }
    if reference is not None:
        ref_report = json.loads((reference / "validation.json").read_text())
        report["reference"] = {"dir": str(reference), "backend": ref_report["backend"]["label"],
                               "wer_pct": ref_report.get("wer_pct")}
        report["drift"] = drift(predictions, read_jsonl(reference / "predictions.jsonl"), normalizer)
        if report["wer_pct"] is not None and ref_report.get("wer_pct") is not None:
            report["drift"]["wer_delta_pct"] = round(report["wer_pct"] - ref_report["wer_pct"], 2)
    write_json(out_dir / "validation.json", report)
    (out_dir / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return out_dir, report


def checks(report: dict[str, Any], max_wer: float | None, max_empty_rate: float, max_changed: int | None,
           max_wer_delta: float | None, max_drift_wer: float | None) -> list[str]:
    """The configured checks that fail (empty when all pass)."""
    failed = []
    if report["failed"]:
        failed.append(f"{report['failed']} request(s) failed")
    if max_wer is not None and (report["wer_pct"] is None or report["wer_pct"] > max_wer):
        failed.append(f"WER {report['wer_pct']} % > --max-wer {max_wer}")
    if report["empty_rate"] is not None and report["empty_rate"] > max_empty_rate:
        failed.append(f"empty-transcript rate {report['empty_rate']} > --max-empty-rate {max_empty_rate}")
    d = report.get("drift")
    if d:
        if max_changed is not None and d["changed"] > max_changed:
            failed.append(f"{d['changed']} hypotheses changed > --max-changed {max_changed}")
        if max_wer_delta is not None and d.get("wer_delta_pct") is not None and d["wer_delta_pct"] > max_wer_delta:
            failed.append(f"WER delta {d['wer_delta_pct']} points > --max-wer-delta {max_wer_delta}")
        if max_drift_wer is not None and (d["drift_wer_pct"] is None or d["drift_wer_pct"] > max_drift_wer):
            failed.append(f"drift WER {d['drift_wer_pct']} % > --max-drift-wer {max_drift_wer}")
    return failed


def render(report: dict[str, Any]) -> str:
    lines = [f"validation {report['validation_id']}: {report['backend']['label']} on {report['dataset']} "
             f"({report['items']} items, normaliser {report['normalizer']})",
             f"  WER {report['wer_pct']} %   empty-transcript rate {report['empty_rate']}   "
             f"failed {report['failed']}"]
    d = report.get("drift")
    if d:
        lines.append(f"  drift vs {report['reference']['backend']} ({Path(report['reference']['dir']).name}): "
                     f"drift WER {d['drift_wer_pct']} %, {d['changed']}/{d['n']} hypotheses changed "
                     f"({d['changed_pct']} %), WER delta {d.get('wer_delta_pct')} points")
        if d["changed_ids"]:
            lines.append("  changed: " + ", ".join(d["changed_ids"]))
    return "\n".join(lines)


def run_accuracy_rows(summary: dict[str, Any], max_wer: float | None) -> list[dict[str, Any]]:
    """WER per point of a timed run (the pre-2.0 `validate RUN`)."""
    rows = []
    for point, p in summary["points"].items():
        if p["status"] != "ok" or p["metrics"].get("wer") is None:
            continue
        bad = max_wer is not None and p["metrics"]["wer"] > max_wer
        rows.append({"point": point, "wer": p["metrics"]["wer"], "empty_rate": p["metrics"]["empty_rate"],
                     "n_scored": p["metrics"]["n_scored"], "verdict": "FAIL" if bad else "ok"})
    return rows
