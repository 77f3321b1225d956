"""Keyword biasing on the dev set: does a rare word come out right, and does an unrelated list hurt?

`python -m benchmarks.keywords` decodes every dev clip with one reference and at most 30 s
(offline, greedy, the embedded model; `--ckpt-dir` another checkpoint, e.g. a trained NeMo RNN-T
or icefall Zipformer whose beam search takes keywords, with `--language ''` when the checkpoint
declares no language) three times: without keywords, with `--rare` as the one
keyword, and with `--unrelated` (words no clip says). It prints the clips whose transcript a
keyword list changed, how many clips have the rare phrase right each way, and the corpus WER
(Whisper's English normalizer) of each run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

MANIFEST = Path(os.environ.get("OASR_SPEECH_DATA", Path(__file__).resolve().parents[2] / "shared" / "data" / "speech")) \
    / "manifest.jsonl"
RARE = "Montreal Forced Aligner"
UNRELATED = "Kubernetes,PostgreSQL,Anthropic,Zanzibar,photosynthesis,Reykjavik,quaternion,Mozart"


def _clips(manifest: Path) -> list[tuple[str, str, np.ndarray]]:
    import soundfile as sf
    import soxr

    out = []
    for line in manifest.read_text().splitlines():
        row = json.loads(line)
        if not row.get("text") or row.get("channel_texts") or row["duration"] > 30:
            continue
        audio, rate = sf.read(manifest.parent / row["audio"], dtype="float32", always_2d=True)
        out.append((row["id"], row["text"], soxr.resample(audio.mean(axis=1), rate, 16000).astype(np.float32)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rare", default=RARE, help="the rare phrase, passed as the one keyword")
    parser.add_argument("--unrelated", default=UNRELATED, help="comma-separated keywords no clip says")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--ckpt-dir", default=None, help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--language", default="en", help="the requests' language ('' sends none)")
    parser.add_argument("--beam-size", type=int, default=1, help="1: greedy (a request with keywords beam-searches)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    from engine import ASREngine, DecodingOptions, EngineConfig

    norm = EnglishTextNormalizer()
    clips = _clips(args.manifest)
    refs = [norm(text) for _, text, _ in clips]
    rare = norm(args.rare)
    engine = ASREngine(EngineConfig(ckpt_dir=args.ckpt_dir) if args.ckpt_dir else EngineConfig())
    runs: dict[str, list[str]] = {}
    for name, keywords in (("none", ()), ("rare", (args.rare,)), ("unrelated", tuple(args.unrelated.split(",")))):
        started = time.monotonic()
        hyps = engine.transcribe([a for _, _, a in clips], decoding=DecodingOptions(
            language=args.language or None, keywords=keywords, beam_size=args.beam_size))
        runs[name] = [norm(h) for h in hyps]
        print(f"{name:10s} WER {100 * jiwer.wer(refs, runs[name]):6.2f} %   "
              f"'{rare}' right in {sum(rare in h for h, r in zip(runs[name], refs) if rare in r)} of "
              f"{sum(rare in r for r in refs)} clips that say it   ({time.monotonic() - started:.0f} s)")
    for (clip_id, _, _), plain, biased, other in zip(clips, runs["none"], runs["rare"], runs["unrelated"]):
        if len({plain, biased, other}) > 1:
            print(f"  {clip_id}: none={plain!r} rare={biased!r} unrelated={other!r}")
    engine.shutdown()


if __name__ == "__main__":
    main()
