"""What the host CPU is: its model name and instruction-set flags, read from /proc/cpuinfo.

Decisions that change a model's numbers ('auto' quantization) are taken from these facts, never
from a timing: a start-up benchmark answers differently on a busy machine (issue 35 measured the
int8-vs-float32 probe flip from "16.09 ms vs 2.61 ms" to "0.74 ms vs 6.79 ms" between two starts
20 s apart on one AMD EPYC), and with it the transcripts. Flags are what the silicon offers, the
same on every start and under any load.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

CPUINFO = Path("/proc/cpuinfo")

INT8_DOT_PRODUCT_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni")
"""x86 flags of the int8 dot-product instructions oneDNN's int8 GEMM is built on. Without one of
them the GEMM takes a generic path: on an AMD EPYC Zen 3 (AVX2 only) `torch._int_mm` ran ~20x
slower than float32 for a Whisper-tiny MLP shape (engine/models/whisper/int8.py)."""


@dataclass(frozen=True)
class CpuFacts:
    model_name: str
    """The first 'model name' of /proc/cpuinfo ('unknown' where there is none, e.g. macOS)."""
    flags: frozenset[str]
    """The first processor's 'flags' (x86) or 'Features' (ARM)."""

    @property
    def int8_dot_product(self) -> str | None:
        """The best int8 dot-product instruction set the CPU has, or None."""
        return next((f for f in INT8_DOT_PRODUCT_FLAGS if f in self.flags), None)


def parse_cpuinfo(text: str) -> CpuFacts:
    """The facts in a /proc/cpuinfo text (the first processor's; they are alike on one host)."""
    model, flags = "unknown", frozenset[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown":
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = frozenset(value.split())
    return CpuFacts(model_name=model, flags=flags)


@functools.lru_cache(maxsize=1)
def host_cpu_facts() -> CpuFacts:
    """This machine's facts, read once per process."""
    try:
        return parse_cpuinfo(CPUINFO.read_text())
    except OSError as e:
        logger.info("no %s (%s): CPU flags unknown, int8 dot products assumed absent", CPUINFO, e)
        return CpuFacts(model_name="unknown", flags=frozenset())


__all__ = ["INT8_DOT_PRODUCT_FLAGS", "CpuFacts", "host_cpu_facts", "parse_cpuinfo"]
