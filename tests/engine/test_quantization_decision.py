"""'auto' quantization is decided from what the machine is (issue 35 item 1): the CPU's flags and
the int8 exactness probe, never a start-up timing, so that the same config on the same machine
gives the same numbers on every start and under any load."""

from __future__ import annotations

import importlib
import time

import pytest
import torch

from engine.cpu_facts import CpuFacts, host_cpu_facts, parse_cpuinfo
from engine.quantization import QuantizationConfig, decide_quantization

# /proc/cpuinfo excerpts of the machines the decision must tell apart (flags shortened to the ones
# that matter plus neighbours, in the kernel's order)
ZEN4_VNNI = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni
processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx avx2
"""
ZEN3_AVX2 = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma\n"
SAPPHIRE_RAPIDS = "model name\t: Intel(R) Xeon(R) Platinum 8488C\nflags\t\t: avx2 avx512f amx_bf16 amx_tile amx_int8\n"
ALDER_LAKE = "model name\t: 12th Gen Intel(R) Core(TM) i7-12700\nflags\t\t: avx2 avx_vnni\n"
GRAVITON = "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd asimddp i8mm\n"


def test_cpuinfo_gives_the_first_processors_model_and_flags() -> None:
    facts = parse_cpuinfo(ZEN4_VNNI)
    assert facts.model_name == "AMD EPYC 9R14"
    assert "avx512_vnni" in facts.flags and facts.int8_dot_product == "avx512_vnni"
    assert parse_cpuinfo(SAPPHIRE_RAPIDS).int8_dot_product == "amx_int8"  # the best of several
    assert parse_cpuinfo(ALDER_LAKE).int8_dot_product == "avx_vnni"
    assert parse_cpuinfo(ZEN3_AVX2).int8_dot_product is None
    arm = parse_cpuinfo(GRAVITON)
    assert (arm.model_name, arm.int8_dot_product) == ("unknown", None) and "asimddp" in arm.flags


@pytest.mark.parametrize(("cpuinfo", "exact", "scheme"), [
    (ZEN4_VNNI, True, "int8_w8a8"),  # issue 35's machine: int8 on every start
    (ZEN4_VNNI, False, "none"),  # oneDNN capped below VNNI (ONEDNN_MAX_CPU_ISA): 8-bit sums saturate
    (SAPPHIRE_RAPIDS, True, "int8_w8a8"),
    (ALDER_LAKE, True, "int8_w8a8"),
    (ZEN3_AVX2, True, "none"),  # exact but MKL's generic int8 path: ~20x slower than float32
    (GRAVITON, True, "none"),
])
def test_auto_is_a_function_of_the_cpu_facts(cpuinfo: str, exact: bool, scheme: str) -> None:
    facts = parse_cpuinfo(cpuinfo)
    decisions = {decide_quantization("auto", "cpu", parse_cpuinfo(cpuinfo), exact) for _ in range(3)}
    assert len(decisions) == 1  # equal facts, equal decision (frozen dataclasses compare by value)
    decision = decisions.pop()
    assert (decision.asked, decision.scheme) == ("auto", scheme)
    assert facts.model_name in decision.reason


@pytest.mark.parametrize("asked", ["none", "int8_w8a8", "fp16", "bf16"])
def test_an_explicit_scheme_always_wins(asked: str) -> None:
    for cpuinfo in (ZEN4_VNNI, ZEN3_AVX2):
        decision = decide_quantization(asked, "cpu", parse_cpuinfo(cpuinfo), True)
        assert (decision.scheme, decision.reason) == (asked, "set explicitly")


def test_auto_on_a_gpu_keeps_the_float_type() -> None:
    assert decide_quantization("auto", "cuda", parse_cpuinfo(ZEN4_VNNI), True).scheme == "none"


@pytest.mark.auto_quantization
def test_loading_decides_without_reading_a_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model builder's whole decision (flags, exactness probe) runs with the clocks a timing
    would read made to fail: before issue 35 it timed int8 against float32 here."""
    build = importlib.import_module("engine.models.whisper.build")
    int8 = importlib.import_module("engine.models.whisper.int8")

    int8.int8_gemm_kind.cache_clear()
    host_cpu_facts.cache_clear()

    def no_clock() -> float:
        raise AssertionError("the quantization decision read a clock")

    for name in ("perf_counter", "monotonic", "time", "process_time"):
        monkeypatch.setattr(time, name, no_clock)
    decision = build.decide_layer_scheme(QuantizationConfig.parse("auto"), torch.device("cpu"))
    monkeypatch.undo()
    facts = host_cpu_facts()
    exact = int8.int8_gemm_kind() == "vnni"
    assert decision == decide_quantization("auto", "cpu", facts, exact)


def test_the_host_facts_are_read_once() -> None:
    assert isinstance(host_cpu_facts(), CpuFacts) and host_cpu_facts() is host_cpu_facts()
