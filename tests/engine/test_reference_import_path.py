"""The reference design's engine import path (`from oasr.engine import ASREngine`, its engine
document §7) names the engine's own objects, and the client package stays free of it."""

from __future__ import annotations

import subprocess
import sys

import engine
from engine.engine import ASREngine


def test_oasr_engine_is_the_engine() -> None:
    from oasr import engine as reference

    assert reference.ASREngine is ASREngine
    assert (reference.EngineConfig, reference.DecodingOptions) == (engine.EngineConfig, engine.DecodingOptions)


def test_importing_the_clients_loads_no_engine() -> None:
    code = "import sys, oasr; print(any(m == 'engine' or m.startswith('engine.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
