"""The reference docs stay true to the code: the generated configuration page is current and
complete, and every setting, flag, path and link the docs name exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.settings import Settings
from app.settings_doc import DOC_PATH, render_markdown, setting_specs
from tests.docs.doc_blocks import ROOT

# The docs about using the server (deployment, operations and benchmarking have their own tests).
USER_DOCS = [Path(p) for p in ("README.md", "docs/api.md", "docs/streaming.md", "docs/architecture.md",
                               "docs/configuration.md", "docs/choosing-models-and-hardware.md")]


def test_configuration_doc_is_current() -> None:
    assert DOC_PATH.read_text() == render_markdown(), (
        "docs/configuration.md is stale; regenerate it with: python -m app.settings_doc")


def test_every_setting_is_documented() -> None:
    page = DOC_PATH.read_text()
    for spec in setting_specs():
        row = next((line for line in page.splitlines() if line.startswith(f"| `{spec.name}` |")), None)
        assert row is not None, f"setting {spec.name} is missing from docs/configuration.md"
        assert spec.env in row and spec.flag in row and spec.doc.split()[0] in row
    assert {s.name for s in setting_specs()} == set(Settings.model_fields)


@pytest.mark.parametrize("doc", USER_DOCS, ids=str)
def test_named_settings_and_flags_exist(doc: Path) -> None:
    if not (ROOT / doc).exists():
        pytest.fail(f"{doc} is missing")
    text = (ROOT / doc).read_text()
    specs = setting_specs()
    envs = {s.env for s in specs}
    for env in set(re.findall(r"\bOASR_[A-Z_]+[A-Z]\b", text)):
        # OASR_TEST_* are developer knobs of the test suite and benchmarks, not settings.
        assert env in envs or env.startswith("OASR_TEST_") or env == "OASR_SPEECH_DATA", f"{doc}: {env} is not a setting"
    serve_flags = {s.flag for s in specs} | {"--no-" + s.flag[2:] for s in specs if s.kind == "bool"}
    for flag in set(re.findall(r"`(--[a-z][a-z0-9-]*)", text)):
        known = serve_flags | {"--url", "--ckpt-dir", "--response-format", "--language", "--word-timestamps",
                               "--output", "--api-key", "--speed", "--model", "--device", "--check",
                               "--help", "--host", "--port"}
        assert flag in known, f"{doc}: {flag} is neither an `oasr serve` flag nor a CLI option"


@pytest.mark.parametrize("doc", USER_DOCS, ids=str)
def test_relative_links_and_repository_paths_exist(doc: Path) -> None:
    text = (ROOT / doc).read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        assert (ROOT / doc).parent.joinpath(target).exists(), f"{doc}: broken link {target}"
    for path in set(re.findall(r"`((?:app|engine|protos|tests|examples|deploy|docs|benchmarks)/[\w./-]+)`", text)):
        assert (ROOT / path.rstrip("/")).exists(), f"{doc}: names missing path {path}"
