"""app.main is a factory module: importing it builds no app and reads no settings; `create_app`
builds one per call, and `app.main.app` (for `uvicorn app.main:app`) is built once, on first access.
Each check runs in a fresh interpreter, where no other test has touched the module."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.paths import REPO


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_importing_app_main_builds_nothing() -> None:
    # An invalid setting would fail Settings(): the import must not read the settings at all.
    result = _python("""
        import logging
        import app.main
        assert "app" not in vars(app.main), "an app was built at import"
        assert not logging.getLogger().handlers, "logging was configured at import"
        print("ok")
    """, OASR_MAX_BATCH_SIZE="many")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_module_app_is_built_on_first_access_from_the_environment() -> None:
    result = _python("""
        import app.main
        from fastapi import FastAPI
        first = app.main.app
        assert isinstance(first, FastAPI)
        assert app.main.app is first, "a second access built another app"
        assert first.state.settings.max_batch_size == 3
        assert app.main.create_app() is not first
        print("ok")
    """, OASR_MAX_BATCH_SIZE="3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_module_app_reports_a_bad_setting_when_accessed() -> None:
    result = _python("""
        import app.main
        try:
            app.main.app
        except Exception as exc:
            print(type(exc).__name__, "max_batch_size" in str(exc))
    """, OASR_MAX_BATCH_SIZE="many")
    assert result.stdout.strip() == "ValidationError True", result.stderr


def test_other_missing_attributes_still_raise_attribute_error() -> None:
    import app.main

    try:
        app.main.no_such_thing  # noqa: B018 - the access is the test
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("app.main.no_such_thing did not raise AttributeError")
