"""benchmarks/long_form.py runs end to end on a short recording (the issue's command at a size a
test affords): its table has every system's row, each with a WER, and the ratio to faster-whisper's
batched pipeline. No timing is asserted."""

from __future__ import annotations

import pytest

from benchmarks import long_form


@pytest.mark.auto_quantization  # the benchmark measures the engine at its defaults, on purpose
def test_a_short_recording_reports_every_system(capsys: pytest.CaptureFixture[str]) -> None:
    assert long_form.main(["--minutes", "0.4", "--no-sequential"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU: ") and "engine defaults: " in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| system")]
    names = [line.split(" | ")[0].lstrip("| ") for line in rows]
    assert names == ["oasr engine, defaults", "faster-whisper int8, sequential", long_form.BATCHED_PEER]
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[3]) < 50.0, line  # a WER: the recording was transcribed
        assert float(cells[4]) > 0.0, line  # the ratio to the batched pipeline, the target
