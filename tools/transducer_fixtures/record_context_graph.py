"""Record icefall's own ContextGraph (icefall/context_graph.py) on seeded random keyword sets and
token streams: the bonus of every step (non-strict mode, as icefall's modified_beam_search calls
it) and of finalizing. Writes tests/fixtures/transducer/icefall_context_graph.json; the engine's
tests replay it against engine/ops/context_graph.py without icefall.

icefall's context_graph.py is plain Python (no k2): it is loaded from a checkout by file path
(`git archive` of k2-fsa/icefall, or any copy of the file):

    python3 tools/transducer_fixtures/record_context_graph.py --icefall /tmp/icefall
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEED = 20261203
CASES = 60
VOCAB = 8
"""Small, so keywords overlap and share prefixes and suffixes (the failure arcs get exercised)."""
STEPS = 40
BOOSTS = (1.5, 3.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--icefall", type=Path, required=True, help="an icefall checkout (holds icefall/context_graph.py)")
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "transducer" / "icefall_context_graph.json")
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("icefall_context_graph", args.icefall / "icefall" / "context_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = random.Random(SEED)
    cases = []
    for i in range(CASES):
        keywords = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(1, 6))]
        boost = BOOSTS[i % len(BOOSTS)]
        graph = module.ContextGraph(context_score=boost)
        graph.build(keywords)
        state = graph.root
        tokens = [rng.randrange(VOCAB) for _ in range(STEPS)]
        scores, finals = [], []
        for tok in tokens:
            score, state, _ = graph.forward_one_step(state, tok, strict_mode=False)
            scores.append(score)
            finals.append(graph.finalize(state)[0])
        cases.append({"keywords": keywords, "boost": boost, "tokens": tokens, "scores": scores, "finalize": finals})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"source": "icefall/context_graph.py ContextGraph, strict_mode=False",
                                    "vocab": VOCAB, "cases": cases}) + "\n")


if __name__ == "__main__":
    main()
