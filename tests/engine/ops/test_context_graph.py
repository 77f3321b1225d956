"""ContextGraph (keyword biasing of transducer beam searches) against icefall's own ContextGraph:
icefall's bonuses per step and at finalize on seeded keyword sets and token streams, recorded by
tools/transducer_fixtures/record_context_graph.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.ops.context_graph import ContextGraph

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "transducer" / "icefall_context_graph.json"
# Bonuses are sums of a few boosts (1.5, 3.0): exact in float64 up to reassociation.
TOL = 1e-9


def _cases() -> list[dict]:  # type: ignore[type-arg]
    return json.loads(FIXTURE.read_text())["cases"]  # type: ignore[no-any-return]


def test_steps_and_finalize_equal_icefall() -> None:
    cases = _cases()
    assert len(cases) >= 50
    for case in cases:
        graph = ContextGraph.from_keywords(case["keywords"], case["boost"])
        node = graph.root
        for tok, score, final in zip(case["tokens"], case["scores"], case["finalize"], strict=True):
            delta, node = graph.step(node, tok)
            assert delta == pytest.approx(score, abs=TOL), case
            assert graph.finalize(node) == pytest.approx(final, abs=TOL), case


def test_rows_agree_with_steps() -> None:
    vocab = json.loads(FIXTURE.read_text())["vocab"] + 2  # tokens no keyword uses too
    for case in _cases()[:20]:
        graph = ContextGraph.from_keywords(case["keywords"], case["boost"])
        node = graph.root
        for tok in case["tokens"]:
            deltas, nexts = graph.row(node, vocab)
            for t in range(vocab):
                d, n = graph.step(node, t)
                assert (float(deltas[t]), int(nexts[t])) == (pytest.approx(d, abs=1e-6), n)
            node = graph.step(node, tok)[1]


def test_a_keyword_inside_another_partial_match_is_found() -> None:
    """icefall's example: 'she' completes inside a partial 'shell'; in non-strict mode the longest
    keyword ending there keeps its bonus and the match restarts at the root."""
    she, shell, he = [1, 2, 3], [1, 2, 3, 4, 4], [2, 3]
    graph = ContextGraph.from_keywords([he, she, shell], boost=1.0)
    total, node = 0.0, graph.root
    for tok in [1, 2, 3]:
        delta, node = graph.step(node, tok)
        total += delta
    assert (total, node) == (3.0, graph.root), "'she' matched: its three tokens' bonus kept"
    total, node = 0.0, graph.root
    for tok in [5, 2, 3]:  # 'he' after an unrelated token
        delta, node = graph.step(node, tok)
        total += delta
    assert (total, node) == (2.0, graph.root)
    delta, node = graph.step(graph.root, 1)
    assert graph.finalize(node) == -1.0, "an unfinished match gives its bonus back"


def test_boosts_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0"):
        ContextGraph.from_keywords([[1, 2]], boost=0.0)
