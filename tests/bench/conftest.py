from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.asrbench import runner


@pytest.fixture(scope="session")
def bench_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Results and datasets in a temp dir, never in the user's data dir or the checkout."""
    root = tmp_path_factory.mktemp("asrbench")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASRBENCH_RESULTS_DIR", str(root / "results"))
        mp.setenv("ASRBENCH_DATA_DIR", str(root / "data"))
        mp.delenv("ASRBENCH_TEST_STEP_DELAY_MS", raising=False)
        yield root


@pytest.fixture(scope="session")
def selftest_run(bench_dirs: Path) -> Path:
    return runner.run("selftest", "mock", [])


@pytest.fixture(scope="session")
def slowed_run(bench_dirs: Path) -> Iterator[Path]:
    """The same workload with every simulated engine step slowed by 40 ms."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASRBENCH_TEST_STEP_DELAY_MS", "40")
        yield runner.run("selftest", "mock", [])
