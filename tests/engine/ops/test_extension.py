"""Loading engine._C: it loads where it was built, falls back to the Python reference (logged
once) when it cannot load or is switched off, and the engine's info says which path runs."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.ops import extension

ROOT = Path(__file__).resolve().parents[3]


def test_the_built_library_registers_the_operators(ext: None) -> None:
    status = extension.extension_status()
    assert status.backend == "engine._C" and "kernels" in status.detail
    assert hasattr(torch.ops.oasr, "ctc_prefix_beam_search")


def test_a_library_that_cannot_load_falls_back_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(extension, "_status", None)
    monkeypatch.setitem(sys.modules, "engine._C", None)  # the next import of it raises ImportError
    monkeypatch.delenv(extension.DISABLE_ENV, raising=False)
    with caplog.at_level(logging.INFO, logger="engine.ops.extension"):
        first = extension.extension_status()
        again = extension.extension_status()
    assert first is again and not first.loaded and first.backend == "python"
    assert "make install" in first.detail
    records = [r for r in caplog.records if r.name == "engine.ops.extension"]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert "Python reference" in records[0].getMessage()
    with pytest.raises(RuntimeError, match="not available"):
        extension.use_extension(True)
    assert extension.use_extension(None) is False


def test_the_switch_forces_the_python_path_in_a_fresh_process() -> None:
    code = (
        "import logging; logging.basicConfig(level=logging.INFO, format='%(name)s %(message)s')\n"
        "from engine.ops import extension_status; s = extension_status(); print('BACKEND', s.backend)\n"
        "import torch; print('OPS', hasattr(torch.ops.oasr, 'ctc_prefix_beam_search'))"
    )
    env = {**os.environ, extension.DISABLE_ENV: "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "BACKEND python" in proc.stdout
    assert "OPS False" in proc.stdout  # the library was never loaded
    assert f"Python reference ({extension.DISABLE_ENV}=1)" in proc.stderr


def test_engine_info_names_the_kernel_path(engine: Any) -> None:
    info = engine.info()["kernels"]
    status = extension.extension_status()
    assert info == status.as_info()
    assert info["backend"] in ("engine._C", "python")


def test_operators_show_up_in_profiles_by_name(ext: None) -> None:
    from engine.ops import BeamState, ctc_prefix_beam_search

    lp = torch.log_softmax(torch.randn(2, 4, 5), dim=-1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        ctc_prefix_beam_search(lp, torch.full((2,), 4), BeamState.initial(2), beam=3, blank=0)
    assert any(e.name == "oasr::ctc_prefix_beam_search" for e in prof.events())
