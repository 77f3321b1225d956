"""Which checkpoint an engine workload loads: a family's committed test fixture (`tiny`), a
random-weight model of realistic size written by `engine.synthetic` (`realistic`), or a directory
the caller names (`--ckpt-dir`, e.g. a trained model)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.synthetic import SYNTHETIC, write_checkpoint

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures"
TINY: dict[str, Path | None] = {
    "whisper": None,  # the embedded tiny.en (real weights) at both sizes
    "nemo": FIXTURES / "nemo" / "hybrid_cache_aware",
    "nemo-buffered": FIXTURES / "nemo" / "unified_rc",
    "wenet": FIXTURES / "wenet" / "u2pp",
    "zipformer": FIXTURES / "zipformer" / "tiny_streaming",
    "paraformer": FIXTURES / "paraformer" / "tiny",
    "paraformer-online": FIXTURES / "paraformer" / "online",
    "speechllm": FIXTURES / "speechllm" / "qwen3_asr",
}
"""--family names: a family, or a family's variant where its streaming style differs by checkpoint."""
FAMILIES = tuple(TINY)
SIZES = ("tiny", "realistic")


def describe(family: str, size: str, ckpt_dir: str | None) -> str:
    """One line naming the model a table's numbers are for."""
    if ckpt_dir:
        return f"{family}: {ckpt_dir}"
    if family == "whisper":
        return "whisper: the embedded tiny.en (real weights)"
    if size == "realistic" and family in SYNTHETIC:
        return f"{family}: random weights shaped like {SYNTHETIC[family].shape}"
    return f"{family}: committed test fixture {TINY[family].relative_to(REPO)}"  # type: ignore[union-attr]


@contextmanager
def checkpoint(family: str, size: str, ckpt_dir: str | None = None) -> Iterator[str | None]:
    """The directory to give `EngineConfig.ckpt_dir` (None: the embedded Whisper)."""
    if family not in TINY:
        raise ValueError(f"unknown --family {family!r} (known: {', '.join(FAMILIES)})")
    if ckpt_dir:
        yield ckpt_dir
    elif size == "realistic" and family in SYNTHETIC:
        with tempfile.TemporaryDirectory(prefix=f"oasr-{family}-") as tmp:
            yield write_checkpoint(family, tmp)
    elif size == "realistic" and family != "whisper":
        raise ValueError(f"no realistic-size synthetic {family} model; give a trained one with --ckpt-dir")
    else:
        fixture = TINY[family]
        yield None if fixture is None else str(fixture)
