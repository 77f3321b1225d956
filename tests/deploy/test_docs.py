"""docs/deployment.md and docs/operations.md stay true to the files they describe."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.deploy.manifests import MONITORING, ROOT

DOCS = ("docs/deployment.md", "docs/operations.md")
PATH_LIKE = re.compile(r"`((?:deploy|examples|tests|docs)/[\w./-]+|Dockerfile|\.dockerignore)`")


@pytest.mark.parametrize("doc", DOCS)
def test_every_repository_path_named_exists(doc: str) -> None:
    text = (ROOT / doc).read_text()
    named = set(PATH_LIKE.findall(text))
    assert named, f"{doc} names no repository files"
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert not missing, f"{doc} names missing paths {missing}"


def test_operations_names_only_real_alerts_and_all_of_them() -> None:
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    text = (ROOT / "docs" / "operations.md").read_text()
    mentioned = set(re.findall(r"`(OASR[A-Z]\w+)`", text))
    assert mentioned - alerts == set(), f"operations.md mentions unknown alerts {sorted(mentioned - alerts)}"
    assert alerts - mentioned == set(), (
        f"operations.md does not say what to do about {sorted(alerts - mentioned)}"
    )


def test_documented_settings_exist() -> None:
    from app.settings import Settings

    fields = set(Settings.model_fields)
    for doc in DOCS:
        for name in set(re.findall(r"`(OASR_[A-Z_]+)", (ROOT / doc).read_text())):
            assert name.removeprefix("OASR_").lower() in fields, f"{doc}: {name} is not a setting"


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve(doc: str) -> None:
    path = ROOT / doc
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
        assert (path.parent / target).exists(), f"{doc}: link to missing {target}"


def test_operations_metric_tables_are_generated_from_the_registry() -> None:
    from app.metrics_doc import DOC_PATH, render_page

    page = DOC_PATH.read_text()
    assert page == render_page(page), (
        "docs/operations.md's metric tables are stale; regenerate them with: python -m app.metrics_doc")
