"""A long recording of read English with an exact transcript, synthesized by flite (Debian's
`flite`), for `python -m benchmarks.long_form --audio ... --text ...`.

    python -m benchmarks.tts_recording --minutes 9 -o /tmp/alice.wav     # and /tmp/alice.txt

Why: the dev clips (../shared/data/speech) hold 3 minutes of mostly short, odd speech (whispered,
falsetto, card names, "word, word, word"); a long recording built from them repeats them, and
faster-whisper's batched pipeline leaves out 44 % of it (its VAD merges and drops whole
sentences), so it does less work than on the plain read speech issue 43 measures with. flite's
voices are robotic (tiny.en's WER on them is ~19 %), but the speech is continuous sentences with
1 s pauses, as there. The text is the first chapter of Alice's Adventures in Wonderland that
flite ships as an example (public domain); sentences (cut at . ! ? ; :) take turns among four
voices, each pass over them in a seeded order.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

SAMPLE_RATE = 16000
GAP_S = 1.0
TEXT = Path("/usr/share/doc/flite/examples/alice")
VOICES = ("slt", "rms", "awb", "kal16")


def sentences(text: str) -> list[str]:
    """The text's sentences of three words or more, quotes and underscores dropped."""
    text = re.sub(r"\s+", " ", re.sub(r"[`_]", "'", text))
    return [s.strip() for s in re.split(r"(?<=[.!?;:])\s+", text) if len(s.split()) >= 3]


def synthesize(sentence: str, voice: str, workdir: Path) -> np.ndarray:
    out = workdir / "sentence.wav"
    subprocess.run(["flite", "-voice", voice, "-t", sentence, "-o", str(out)], check=True)
    audio, rate = sf.read(str(out), dtype="float32")
    return audio if rate == SAMPLE_RATE else soxr.resample(audio, rate, SAMPLE_RATE).astype(np.float32)


def build(minutes: float, seed: int = 0) -> tuple[np.ndarray, str]:
    if shutil.which("flite") is None or not TEXT.exists():
        raise SystemExit("needs Debian's flite (apt-get install flite), which ships the text it reads")
    rng = random.Random(seed)
    pool = sentences(TEXT.read_text())
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), dtype=np.float32)
    parts: list[np.ndarray] = []
    texts: list[str] = []
    total, turn = 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        while total < minutes * 60 * SAMPLE_RATE:
            order = list(pool) if not texts else rng.sample(pool, len(pool))
            for sentence in order:
                if total >= minutes * 60 * SAMPLE_RATE:
                    break
                audio = synthesize(sentence, VOICES[turn % len(VOICES)], Path(tmp))
                turn += 1
                if parts:
                    parts.append(gap)
                parts.append(audio)
                texts.append(sentence)
                total += gap.size + audio.size
    return np.concatenate(parts), " ".join(texts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=9.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", type=Path, required=True, help="the WAV; the transcript goes beside it (.txt)")
    args = parser.parse_args(argv)
    audio, text = build(args.minutes, args.seed)
    sf.write(str(args.output), audio, SAMPLE_RATE, subtype="PCM_16")
    args.output.with_suffix(".txt").write_text(text + "\n")
    print(f"{args.output}: {audio.size / SAMPLE_RATE:.1f} s, {len(text.split())} words")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
