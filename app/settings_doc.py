"""Every server setting described once, from `app.settings.Settings` itself.

`oasr serve` builds its flags from `setting_groups()` and docs/configuration.md is rendered by
`render_markdown()`, so neither can drift from the settings. Both show the same groups: the
server's own settings (`SERVER_SETTING_GROUPS`), then one group per model family. Regenerate the page with

    python -m app.settings_doc            # writes docs/configuration.md
    python -m app.settings_doc --check    # exit 1 when the page is stale
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic.fields import FieldInfo

from app.settings import SERVER_SETTING_GROUPS, ServerSettings, Settings, family_setting_names

ENV_PREFIX = "OASR_"
DOC_PATH = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

Kind = Literal["bool", "int", "float", "str", "choice", "list", "options"]


@dataclass(frozen=True)
class SettingSpec:
    name: str
    kind: Kind
    type_name: str
    """Shown in docs and `--help`: int, float, str, bool, one of {...}, comma-separated list,
    KEY=VALUE options (a repeatable flag; ';'-separated in the env var)."""
    default: Any
    optional: bool
    """Unset (None) is a meaningful value (e.g. ckpt_dir: the embedded model)."""
    choices: tuple[str, ...]
    doc: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def default_text(self) -> str:
        if self.default is None:
            return "unset"
        if self.kind == "list":
            return ",".join(map(str, self.default)) if self.default else "unset"
        if self.kind == "options":
            return ";".join(f"{k}={v}" for k, v in self.default.items()) if self.default else "unset"
        if self.kind == "bool":
            return "true" if self.default else "false"
        return str(self.default)


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the inner type, whether None is allowed) for `X | None` / `Optional[X]`."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _spec(name: str, field: FieldInfo) -> SettingSpec:
    inner, optional = _unwrap(field.annotation)
    origin = typing.get_origin(inner)
    choices: tuple[str, ...] = ()
    if origin is Literal:
        choices = tuple(str(c) for c in typing.get_args(inner))
        kind: Kind = "choice"
        type_name = " \\| ".join(f"`{c}`" for c in choices)
    elif origin is dict:
        kind, type_name = "options", "KEY=VALUE, repeatable"
    elif origin is list or origin is tuple:
        kind, type_name = "list", "comma-separated list"
    elif inner in (bool, int, float, str):
        kind, type_name = inner.__name__, inner.__name__
    else:
        raise TypeError(f"setting {name}: no CLI/doc rendering for type {inner!r}; teach app/settings_doc.py")
    default = field.get_default(call_default_factory=True)
    doc = " ".join((field.description or "").split())
    if not doc:
        raise ValueError(f"setting {name} has no docstring; every setting documents itself")
    return SettingSpec(name, kind, type_name, default, optional, choices, doc)


def setting_specs() -> list[SettingSpec]:
    """One spec per `Settings` field, in declaration order."""
    return [_spec(name, field) for name, field in Settings.model_fields.items()]


@dataclass(frozen=True)
class SettingGroup:
    title: str
    description: str
    specs: tuple[SettingSpec, ...]


def setting_groups() -> list[SettingGroup]:
    """The server's settings in `SERVER_SETTING_GROUPS`, then each model family's options (a family
    without options has no group); every setting lands in exactly one group."""
    specs = {s.name: s for s in setting_specs()}
    titles = dict((first, title) for title, first in SERVER_SETTING_GROUPS)
    groups: list[tuple[str, str, list[SettingSpec]]] = []
    for name in ServerSettings.model_fields:
        if name in titles:
            groups.append((titles[name], "", []))
        elif not groups:
            raise ValueError(f"setting {name} comes before the first group of SERVER_SETTING_GROUPS")
        groups[-1][2].append(specs.pop(name))
    for family, names in family_setting_names().items():
        if names:
            groups.append((f"{family} models", f"Apply when the served model is a {family} checkpoint.",
                           [specs.pop(name) for name in names]))
    if specs:
        raise ValueError(f"settings in no group: {', '.join(specs)}")
    return [SettingGroup(title, description, tuple(members)) for title, description, members in groups]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown() -> str:
    lines = [
        "# Configuration reference",
        "",
        "<!-- GENERATED by `python -m app.settings_doc` from app/settings.py; do not edit by hand. -->",
        "",
        "Every setting can be given three ways; the first one present wins:",
        "",
        "1. a flag of `oasr serve` (`--max-batch-size 8`; booleans as `--demo` / `--no-demo`);",
        "2. an environment variable `OASR_<NAME>` (`OASR_MAX_BATCH_SIZE=8`), which is also how",
        "   `make serve`, `uvicorn --factory app.main:create_app`, the container and the Kubernetes ConfigMap are",
        "   configured (`uvicorn app.main:app`, the older spelling, reads them too);",
        "3. the default below.",
        "",
        "Lists (API keys, CORS origins) are comma-separated in both forms. KEY=VALUE options repeat the",
        "flag (`--quantization-option ignore=decoder.* --quantization-option module_types=linear`) and",
        "are separated by `;` in the environment variable. `oasr serve --help` prints the same descriptions",
        "in the same groups: the server's own settings first, then each model family's options.",
    ]
    for group in setting_groups():
        lines += ["", f"## {group.title[0].upper()}{group.title[1:]}", ""]
        if group.description:
            lines += [group.description, ""]
        lines += ["| Setting | Environment variable | Flag | Type | Default | Description |",
                  "|---|---|---|---|---|---|"]
        for s in group.specs:
            lines.append(
                f"| `{s.name}` | `{s.env}` | `{s.flag}` | {s.type_name}{' (optional)' if s.optional else ''} "
                f"| `{_cell(s.default_text)}` | {_cell(s.doc)} |"
            )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.settings_doc", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/configuration.md is stale")
    parser.add_argument("--output", type=Path, default=DOC_PATH, help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale; run: python -m app.settings_doc", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
