"""Accuracy checks of a run: WER and empty rate per point, and transcript drift against a
reference run (the same clips transcribed by another run: a changed decoder shows up here
before it shows up in WER)."""

from __future__ import annotations

from typing import Any

from benchmarks.asrbench.stats import normalize, wer


def accuracy_rows(summary: dict[str, Any], max_wer: float | None, max_empty: float | None) -> list[dict[str, Any]]:
    rows = []
    for point, p in summary["points"].items():
        if p["status"] != "ok" or p["metrics"].get("wer") is None:
            continue
        w, e = p["metrics"]["wer"], p["metrics"]["empty_rate"]
        bad = (max_wer is not None and w > max_wer) or (max_empty is not None and e > max_empty)
        rows.append({"point": point, "wer": w, "empty_rate": e, "n_scored": p["metrics"]["n_scored"],
                     "verdict": "FAIL" if bad else "ok"})
    return rows


def _transcripts(run: dict[str, Any]) -> dict[str, str]:
    """First successful measured transcript of each clip (kinds agree on a clip's text)."""
    out: dict[str, str] = {}
    for r in run["requests"]:
        if r["phase"] == "measure" and r["ok"]:
            out.setdefault(r["item_id"], r["text"])
    return out


def drift(run: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """WER of this run's transcripts against the reference run's, over clips both transcribed."""
    mine, theirs = _transcripts(run), _transcripts(reference)
    shared = sorted(set(mine) & set(theirs))
    if not shared:
        return {"n": 0, "drift_wer": None, "changed": 0, "changed_ids": []}
    changed = [i for i in shared if normalize(mine[i]) != normalize(theirs[i])]
    result = wer([theirs[i] for i in shared], [mine[i] for i in shared])
    return {"n": len(shared), "drift_wer": result["wer"], "changed": len(changed), "changed_ids": changed}
