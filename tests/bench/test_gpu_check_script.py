"""benchmarks/gpu_check.sh runs on a lent GPU machine where a wrong path or flag stops it at its
first step and costs the whole loan: every test file, module and flag it names exists here."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"


def _commands() -> list[list[str]]:
    """Each `$PY ...` command of the script, as words (continuations joined, pipes cut off)."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        words = shlex.split(line.split("|")[0], comments=True)
        if "$PY" in words:
            commands.append(words[words.index("$PY") + 1:])
    return commands


def test_the_script_parses_and_runs_python_commands() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    assert len(_commands()) >= 3  # the device probe, the tests, the benchmarks


def test_every_test_file_it_names_exists() -> None:
    named = [w for words in _commands() for w in words if w.startswith("tests/")]
    assert named, "the script runs no test file"
    missing = [path for path in named if not (REPO / path).is_file()]
    assert not missing, missing


def test_every_module_and_flag_it_names_exists() -> None:
    for words in _commands():
        if words[:1] != ["-m"] or words[1] == "pytest":
            continue
        module, flags = words[1], [w for w in words[2:] if w.startswith("--")]
        assert importlib.util.find_spec(module) is not None, module
        usage = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout
        unknown = [flag for flag in flags if flag not in usage]
        assert not unknown, (module, unknown)
