"""`oasr serve`: every server setting as a flag, then uvicorn on `app.main.create_app(settings)`."""

from __future__ import annotations

import argparse
import os
from typing import Any

from app.cli.common import EXIT_OK, EXIT_USAGE, CliError
from app.settings_doc import SettingSpec, setting_specs


def _add_setting_flag(group: argparse._ArgumentGroup, spec: SettingSpec) -> None:
    # SUPPRESS: a flag left out leaves its OASR_* variable (or the default) in charge.
    common: dict[str, Any] = {"dest": spec.name, "default": argparse.SUPPRESS,
                              # argparse %-formats help strings: a literal % in a docstring must be doubled
                              "help": f"{spec.doc} [default: {spec.default_text}]".replace("%", "%%")}
    if spec.kind == "bool":
        group.add_argument(spec.flag, action=argparse.BooleanOptionalAction, **common)
    elif spec.kind == "choice":
        group.add_argument(spec.flag, choices=spec.choices, **common)
    elif spec.kind == "list":
        group.add_argument(spec.flag, metavar="A,B,...", **common)
    elif spec.kind == "options":
        group.add_argument(spec.flag, metavar="KEY=VALUE", action="append", **common)
    else:
        group.add_argument(spec.flag, metavar=spec.kind.upper(), **common)


def _env_value(spec: SettingSpec, value: Any) -> str:
    if spec.kind == "bool":
        return "true" if value else "false"
    if spec.kind == "options":  # the repeated flag's entries, as the env var separates them
        return ";".join(value)
    return str(value)


def cmd_serve(args: argparse.Namespace) -> int:
    from app.startup_gc import pause_collection

    pause_collection()  # until the lifespan reports ready: see app/startup_gc.py
    import pydantic

    for spec in setting_specs():
        if spec.name in vars(args):
            os.environ[spec.env] = _env_value(spec, getattr(args, spec.name))
    from app.settings import Settings

    try:
        settings = Settings()
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"--{'.'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}" for e in exc.errors())
        raise CliError(f"invalid setting: {problems}", EXIT_USAGE) from exc
    import uvicorn

    # The app `uvicorn --factory app.main:create_app` serves, from the settings checked above.
    from app.main import create_app

    config = uvicorn.Config(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level.lower(),
                            timeout_graceful_shutdown=int(settings.shutdown_grace_secs) + 5)
    server = uvicorn.Server(config)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits 1 itself when it cannot bind
        raise CliError(f"server failed to start on {settings.host}:{settings.port} (see the log above)") from exc
    if not server.started:
        raise CliError(f"server failed to start on {settings.host}:{settings.port} (see the log above)")
    return EXIT_OK
