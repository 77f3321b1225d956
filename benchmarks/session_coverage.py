"""Is any utterance lost when several are transcribed as one recording? (issue 34, must-show 1)

Sessions are three short dev utterances joined by pauses: every rotation of the short dev clips
(session k holds clips k, k+1, k+2 of the pool, cyclically), the pause cycling through PAUSES_S
from one session to the next. Each session is transcribed offline as one recording and live
(`transcribe_outputs(..., streaming=True)`: the engine releases its audio one stream step at a
time), and its clips one by one. An utterance is missing from a session's transcript when fewer
than half of the words of its one-by-one transcript appear there (matched in order). WERs are
against the dev references, the one-by-one transcripts joined per session being the baseline.

    python -m benchmarks.session_coverage                  # engine defaults
    python -m benchmarks.session_coverage --modes offline  # offline sessions only
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

DATA = Path(os.environ.get("OASR_SPEECH_DATA", Path(__file__).resolve().parents[2] / "shared" / "data" / "speech"))
SAMPLE_RATE = 16000  # Hz
PAUSES_S = (0.4, 1.5, 3.0)  # silence between two utterances of a session
LEAD_S = 0.5  # silence before the first utterance and after the last
POOL_SECONDS = (1.5, 8.0)  # dev clips of this length (s) make up the sessions
SESSION_CLIPS = 3
MISSING_BELOW = 0.5  # an utterance with fewer than this share of its words found is missing

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionPlan:
    clips: tuple[str, ...]
    pause_s: float


def _manifest(data: Path = DATA) -> dict[str, dict[str, object]]:
    rows = [json.loads(line) for line in (data / "manifest.jsonl").read_text().splitlines() if line.strip()]
    return {str(r["id"]): r for r in rows}


def short_pool(data: Path = DATA) -> list[str]:
    """The short single-talker dev clips with a reference, in manifest order."""
    return [cid for cid, r in _manifest(data).items()
            if r.get("text") and not r.get("channel_texts")
            and POOL_SECONDS[0] <= float(r["duration"]) <= POOL_SECONDS[1]]  # type: ignore[arg-type]


def session_plans(pool: Sequence[str]) -> list[SessionPlan]:
    """Every rotation of the pool, three consecutive clips per session, pauses cycling."""
    n = len(pool)
    return [SessionPlan(tuple(pool[(k + j) % n] for j in range(SESSION_CLIPS)), PAUSES_S[k % len(PAUSES_S)])
            for k in range(n)]


def load(clip_id: str, data: Path = DATA) -> np.ndarray:
    audio, rate = sf.read(data / str(_manifest(data)[clip_id]["audio"]), dtype="float32", always_2d=True)
    mono = audio.mean(axis=1)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def session_audio(plan: SessionPlan, clips: dict[str, np.ndarray]) -> np.ndarray:
    lead = np.zeros(int(LEAD_S * SAMPLE_RATE), np.float32)
    pause = np.zeros(int(plan.pause_s * SAMPLE_RATE), np.float32)
    parts = [lead]
    for i, cid in enumerate(plan.clips):
        parts += [pause] if i else []
        parts.append(clips[cid])
    return np.concatenate([*parts, lead])


NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"])}
"""Spelled numbers the normalizer leaves alone when they stand alone ("One." stays "one")."""


def spoken_words(text: str) -> list[str]:
    """Words as the coverage count compares them: each word through Whisper's English normalizer
    on its own (normalizing a whole text joins number runs: "Six. One. One." -> "611"), small
    numbers as digits ("six" and "6." both read "6")."""
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    words = [piece for word in text.split() for piece in norm(word).split()]
    return [NUMBER_WORDS.get(w, w) for w in words]


def _join_split_words(words: list[str], vocabulary: set[str]) -> list[str]:
    """Two adjacent words that spell one word of `vocabulary` ("fire fox" for "firefox") as one."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if i + 1 < len(words) and words[i] + words[i + 1] in vocabulary:
            out.append(words[i] + words[i + 1])
            i += 2
        else:
            out.append(words[i])
            i += 1
    return out


def utterance_coverage(utterances: Sequence[str], session: str) -> list[float]:
    """Per utterance (its one-by-one transcript), the share of its words that the session's
    transcript holds, matched in order against all utterances' words at once (a word written as
    two in the session, or two as one, still counts)."""
    words = [spoken_words(u) for u in utterances]
    flat = [w for ws in words for w in ws]
    heard = _join_split_words(spoken_words(session), set(flat))
    joined = [_join_split_words(ws, set(heard)) for ws in words]
    flat_joined = [w for ws in joined for w in ws]
    owner = [i for i, ws in enumerate(joined) for _ in ws]
    totals = [owner.count(i) for i in range(len(words))]
    found = [0] * len(words)
    matcher = difflib.SequenceMatcher(a=flat_joined, b=heard, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.a, block.a + block.size):
            found[owner[k]] += 1
    return [f / t if t else 1.0 for f, t in zip(found, totals)]


def missing(utterances: Sequence[str], session: str) -> list[int]:
    """Indexes of the utterances the session's transcript lost."""
    return [i for i, share in enumerate(utterance_coverage(utterances, session)) if share < MISSING_BELOW]


def corpus_wer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    return 100.0 * float(jiwer.wer([norm(r) for r in references], [norm(h) for h in hypotheses]))


STEP_S = 0.5  # a paced stream's block: the default WhisperOptions.stream_step_ms
UNEVEN_BLOCK_S = (0.5, 2.5)  # a loaded server runs a stream's passes this far apart (s of audio)
MODES = ("offline", "live", "paced", "uneven")
"""offline: one recording per session. live: `transcribe_outputs(streaming=True)`, every session's
audio attached (the engine releases one stream step per engine step, so a pass hears many steps).
paced: streams fed STEP_S at a time, every pass a block makes due run to completion (a machine
that keeps up). uneven: blocks of UNEVEN_BLOCK_S, seeded per session (a loaded machine)."""


def feed_in_blocks(engine: object, audios: Sequence[np.ndarray], blocks: Sequence[Sequence[int]]) -> list[str]:
    """Final texts of streams fed together round by round, stream k its blocks[k] (samples), each
    round's passes run to completion (the engine stepped by engine/loop.py)."""
    from benchmarks.asrbench.engine_bench.measure import step_until_idle

    rids = [engine.add_streaming_request() for _ in audios]  # type: ignore[attr-defined]
    offsets = [0] * len(audios)
    finals: dict[str, str] = {}
    for round_ in range(max(len(b) for b in blocks)):
        for k, (rid, audio) in enumerate(zip(rids, audios)):
            if offsets[k] >= audio.size:
                continue
            n = blocks[k][round_] if round_ < len(blocks[k]) else audio.size
            engine.feed_chunk(rid, audio[offsets[k] : offsets[k] + n], is_last=offsets[k] + n >= audio.size)  # type: ignore[attr-defined]
            offsets[k] += n
        step_until_idle(engine, lambda outs: finals.update((o.request_id, o.text) for o in outs if o.finished))  # type: ignore[arg-type]
    return [finals[rid] for rid in rids]


def block_plan(audios: Sequence[np.ndarray], mode: str) -> list[list[int]]:
    """Per stream, the audio (samples) fed each round."""
    import random

    plans = []
    for k, audio in enumerate(audios):
        rng = random.Random(k)
        sizes: list[int] = []
        while sum(sizes) < audio.size:
            seconds = STEP_S if mode == "paced" else rng.uniform(*UNEVEN_BLOCK_S)
            sizes.append(int(seconds * SAMPLE_RATE))
        plans.append(sizes)
    return plans


def transcribe_sessions(engine: object, audios: Sequence[np.ndarray], mode: str) -> list[str]:
    if mode in ("offline", "live"):
        return [o.text for o in engine.transcribe_outputs(list(audios), streaming=mode == "live")]  # type: ignore[attr-defined]
    return feed_in_blocks(engine, audios, block_plan(audios, mode))


@dataclass
class ModeResult:
    mode: str
    wer: float
    missing: list[tuple[int, str]]  # (session index, clip id)
    seconds: float
    texts: list[str]


def evaluate(engine: object, plans: Sequence[SessionPlan], modes: Sequence[str] = ("offline", "live"),
             data: Path = DATA) -> tuple[float, dict[str, ModeResult]]:
    """One-by-one WER, and each mode's session WER and missing utterances, on one engine."""
    rows = _manifest(data)
    ids = sorted({cid for p in plans for cid in p.clips})
    clips = {cid: load(cid, data) for cid in ids}
    alone = dict(zip(ids, (o.text for o in engine.transcribe_outputs([clips[c] for c in ids]))))  # type: ignore[attr-defined]
    refs = [" ".join(str(rows[c]["text"]) for c in p.clips) for p in plans]
    baseline = corpus_wer(refs, [" ".join(alone[c] for c in p.clips) for p in plans])
    audios = [session_audio(p, clips) for p in plans]
    results = {}
    for mode in modes:
        start = time.perf_counter()
        texts = transcribe_sessions(engine, audios, mode)
        seconds = time.perf_counter() - start
        lost = [(k, p.clips[i]) for k, (p, t) in enumerate(zip(plans, texts))
                for i in missing([alone[c] for c in p.clips], t)]
        results[mode] = ModeResult(mode, corpus_wer(refs, texts), lost, seconds, texts)
    return baseline, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--sessions", type=int, default=None, help="only the first N rotations (default: all)")
    parser.add_argument("--quantization", default=None, help="EngineConfig.quantization (default: the engine's)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every session's transcripts")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from engine import ASREngine, EngineConfig

    config = EngineConfig(service_mode="streaming")
    if args.quantization is not None:
        config.quantization = args.quantization
    engine = ASREngine(config)
    try:
        plans = session_plans(short_pool())[: args.sessions]
        baseline, results = evaluate(engine, plans, args.modes)
    finally:
        engine.shutdown()
    utterances = SESSION_CLIPS * len(plans)
    print(f"{len(plans)} sessions ({utterances} utterances), pauses {PAUSES_S} s; one-by-one WER {baseline:.2f} %")
    print("| mode | utterances missing | WER | WER - one-by-one | wall s |")
    print("|---|---|---|---|---|")
    for r in results.values():
        print(f"| {r.mode} | {len(r.missing)} of {utterances} | {r.wer:.2f} % | {r.wer - baseline:+.2f} | {r.seconds:.1f} |")
    for r in results.values():
        for k, cid in r.missing:
            print(f"{r.mode}: session {k} ({plans[k].pause_s} s pauses) lost {cid}: {r.texts[k]!r}")
        if args.verbose:
            for k, text in enumerate(r.texts):
                print(f"{r.mode} {k} {plans[k].clips} {plans[k].pause_s}: {text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
