"""Static checks of the Dockerfile (Docker cannot run on these machines).

hadolint-style rules written in Python over dockerfile-parse's instruction list, plus
the one that matters most for us: the image installs exactly what `make install` does.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
MAKEFILE = ROOT / "Makefile"

SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSW(OR)?D|API_?KEY|PRIVATE|CREDENTIAL|ACCESS_KEY", re.IGNORECASE)
SECRET_VALUE = re.compile(r"-----BEGIN|\bsk-[A-Za-z0-9]{16,}|\bAKIA[0-9A-Z]{16}\b|\bghp_[A-Za-z0-9]{20,}")
PINNED_TAG = re.compile(r":\d+\.\d+\.\d+[^:/@]*$")


@dataclass
class Instruction:
    name: str
    value: str


def _instructions() -> list[Instruction]:
    parser = DockerfileParser(str(DOCKERFILE))
    return [
        Instruction(i["instruction"], i["value"]) for i in parser.structure if i["instruction"] != "COMMENT"
    ]


def _stages() -> list[list[Instruction]]:
    """Instructions grouped per build stage; global ARGs before the first FROM are stage 0."""
    stages: list[list[Instruction]] = [[]]
    for ins in _instructions():
        if ins.name == "FROM":
            stages.append([])
        stages[-1].append(ins)
    return stages


def _final_stage() -> list[Instruction]:
    return _stages()[-1]


def _arg_defaults() -> dict[str, str]:
    defaults: dict[str, str] = {}
    for ins in _stages()[0]:
        if ins.name == "ARG" and "=" in ins.value:
            key, _, value = ins.value.partition("=")
            defaults[key.strip()] = value.strip()
    return defaults


def _env_pairs(value: str) -> list[tuple[str, str]]:
    tokens = shlex.split(value)
    if tokens and "=" not in tokens[0]:  # legacy `ENV KEY value with spaces`
        return [(tokens[0], " ".join(tokens[1:]))]
    return [tuple(t.split("=", 1)) for t in tokens]  # type: ignore[misc]


def _pip_installs(commands: list[str]) -> list[list[str]]:
    """Arguments of every `pip install` in shell command strings, in order."""
    found: list[list[str]] = []
    for command in commands:
        # `${VAR:+...}` only adds options when VAR is set (the torch index); make's $(PIP) is pip.
        command = re.sub(r"\$\{\w+:\+[^}]*\}", "", command).replace("$(PIP)", "pip")
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token not in (";", "&&", "||", "&", "|"):
                words.append(token)
                continue
            if len(words) >= 2 and words[0].endswith("pip") and words[1] == "install":
                found.append(words[2:])
            words = []
    return found


def _makefile_install_steps() -> list[list[str]]:
    # `make install` = the $(STAMP) recipe: tab-indented lines under `$(STAMP):`.
    lines = MAKEFILE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("$(STAMP):"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return _pip_installs(recipe)


def _without_options(args: list[str]) -> list[str]:
    """Drop pip options that only choose where wheels come from (index, cache), keep the rest."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("--index-url", "--extra-index-url", "-i", "--find-links", "-f"):
            skip = True
            continue
        if arg.startswith(("--index-url=", "--extra-index-url=", "--find-links=", "--no-cache-dir")) or arg.startswith("${"):
            continue
        kept.append(arg)
    return kept


def _resolve(value: str, args: dict[str, str]) -> str:
    """Expand build args, also in defaults that name another arg (BUILDER_IMAGE=${BASE_IMAGE})."""
    for _ in range(len(args) + 1):
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), value)
        if expanded == value:
            break
        value = expanded
    return value


def test_base_images_are_pinned_to_an_exact_version() -> None:
    args = _arg_defaults()
    bases = [ins.value.split()[0] for ins in _instructions() if ins.name == "FROM"]
    assert len(bases) >= 2, "expected a multi-stage build (builder + runtime)"
    for raw in bases:
        image = _resolve(raw, args)
        assert "$" not in image, f"FROM {raw}: build arg has no default"
        assert not image.endswith(":latest"), f"FROM {image}: 'latest' is not a pin"
        assert "@sha256:" in image or PINNED_TAG.search(image), (
            f"FROM {image}: pin an exact X.Y.Z tag or a digest"
        )


def test_final_stage_runs_as_a_non_root_numeric_user() -> None:
    users = [ins.value for ins in _final_stage() if ins.name == "USER"]
    assert users, "final stage has no USER: the server would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"USER {users[-1]} is root"
    # Kubernetes' runAsNonRoot can only verify a numeric uid.
    assert user.isdigit(), f"USER {users[-1]}: use a numeric uid"


def test_healthcheck_probes_healthz_on_the_served_port_without_curl() -> None:
    checks = [ins.value for ins in _final_stage() if ins.name == "HEALTHCHECK"]
    assert checks, "no HEALTHCHECK"
    options, _, command = checks[-1].partition("CMD")
    argv = json.loads(command.strip())
    assert argv[0] == "python", "health check must not need curl/wget in a slim image"
    assert f"127.0.0.1:{_cmd_port()}/healthz" in argv[-1]
    assert "--start-period=" in options, (
        "without a start period a slow model load marks the container unhealthy"
    )


def _cmd() -> list[str]:
    cmds = [ins.value for ins in _final_stage() if ins.name == "CMD"]
    assert cmds, "no CMD"
    try:
        argv = json.loads(cmds[-1])
    except json.JSONDecodeError:
        pytest.fail(f"CMD {cmds[-1]!r} is shell form: SIGTERM would go to /bin/sh, not uvicorn")
    assert isinstance(argv, list)
    return argv


def _cmd_option(name: str) -> str:
    argv = _cmd()
    assert name in argv, f"CMD lacks {name}"
    return argv[argv.index(name) + 1]


def _cmd_port() -> int:
    return int(_cmd_option("--port"))


def test_cmd_is_exec_form_uvicorn_with_graceful_shutdown() -> None:
    argv = _cmd()
    assert argv[:3] == ["uvicorn", "--factory", "app.main:create_app"]
    assert _cmd_option("--host") == "0.0.0.0"
    assert int(_cmd_option("--timeout-graceful-shutdown")) > 0
    stops = [ins.value for ins in _final_stage() if ins.name == "STOPSIGNAL"]
    assert stops in ([], ["SIGTERM"])
    assert not [ins for ins in _final_stage() if ins.name == "ENTRYPOINT"], (
        "an ENTRYPOINT wrapper would eat SIGTERM"
    )


def test_exposes_http_and_grpc_ports() -> None:
    exposed = {
        int(p.split("/")[0]) for ins in _final_stage() if ins.name == "EXPOSE" for p in ins.value.split()
    }
    assert exposed == {_cmd_port(), 50051}
    env = dict(pair for ins in _final_stage() if ins.name == "ENV" for pair in _env_pairs(ins.value))
    assert env.get("OASR_GRPC_PORT", "50051") == "50051"


def test_no_secrets_in_env_or_arg() -> None:
    for ins in _instructions():
        if ins.name == "ENV":
            pairs = _env_pairs(ins.value)
        elif ins.name == "ARG":
            key, _, value = ins.value.partition("=")
            pairs = [(key, value)]
        else:
            continue
        for key, value in pairs:
            assert not SECRET_NAME.search(key), f"{ins.name} {key}: secrets belong in runtime env / a Secret"
            assert not SECRET_VALUE.search(value), f"{ins.name} {key}: value looks like a credential"


def test_no_add_and_no_remote_sources() -> None:
    for ins in _instructions():
        assert ins.name != "ADD", f"ADD {ins.value}: use COPY (ADD fetches URLs and unpacks archives)"
        if ins.name == "RUN":
            assert not re.search(r"\b(curl|wget)\b", ins.value), "RUN downloads outside a package manager"


def test_apt_installs_are_minimal_and_clean_their_lists() -> None:
    for ins in _instructions():
        if ins.name != "RUN" or "apt-get" not in ins.value:
            continue
        assert "apt-get upgrade" not in ins.value and "dist-upgrade" not in ins.value
        if "apt-get install" in ins.value:
            assert "apt-get update" in ins.value, "update and install in one layer, or the list goes stale"
            assert "--no-install-recommends" in ins.value
            assert re.search(r"\s-y\b", ins.value)
            assert "rm -rf /var/lib/apt/lists/*" in ins.value, "apt lists left in the layer"


def test_install_steps_are_the_ones_make_uses() -> None:
    make_steps = [_without_options(s) for s in _makefile_install_steps()]
    assert len(make_steps) == 2, f"Makefile install recipe changed shape: {make_steps}"
    make_torch, make_project = make_steps
    assert len(make_torch) == 1 and make_torch[0].startswith("torch=="), make_torch

    args = _arg_defaults()
    runs = [ins.value for ins in _stages()[1] if ins.name == "RUN"]
    # ${TORCH_SPEC} resolves via the ARG default; options that only pick the index are dropped.
    docker_steps = [_without_options([_resolve(a, args) for a in s]) for s in _pip_installs(runs)]
    torch_step = next(i for i, s in enumerate(docker_steps) if any(a.startswith("torch") for a in s))
    project_step = next(i for i, s in enumerate(docker_steps) if "." in s or "-e" in s)
    assert torch_step < project_step, "torch must be installed (pinned) before the project, as in make"
    assert args["TORCH_SPEC"] == make_torch[0], "Dockerfile torch pin differs from the Makefile's"

    # make: `-e .[dev]`; image: the same install without the dev extra.
    make_target = [re.sub(r"\[.*\]$", "", a) for a in make_project]
    assert docker_steps[torch_step] == [args["TORCH_SPEC"]]
    assert docker_steps[project_step] == make_target


def test_embedded_model_check_passes_against_the_installed_package() -> None:
    """Run the build's own model check here, so it cannot silently test nothing."""
    runs = [ins.value for ins in _stages()[1] if ins.name == "RUN"]
    snippets = [m.group(1) for r in runs for m in re.finditer(r'python -c "([^"]+)"', r)]
    model_checks = [s for s in snippets if "embedded_checkpoint_dir" in s]
    assert model_checks, "the build does not verify the embedded model"
    result = subprocess.run([sys.executable, "-c", model_checks[0]], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "embedded model:" in result.stdout


def test_copied_sources_exist_and_are_not_dockerignored() -> None:
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for must in (".git", ".venv"):
        assert must in ignored, f".dockerignore must exclude {must}"
    for ins in _instructions():
        if ins.name != "COPY" or ins.value.startswith("--from"):
            continue
        *sources, _dest = shlex.split(ins.value)
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
            assert not any(fnmatch.fnmatch(src, pat) for pat in ignored), (
                f"COPY {src}: excluded by .dockerignore"
            )


def test_ports_and_grace_agree_with_the_settings_defaults() -> None:
    if importlib.util.find_spec("app.settings") is None:
        pytest.skip("app/settings.py is not written yet")
    from app.settings import Settings

    fields = Settings.model_fields
    assert _cmd_port() == fields["port"].default
    exposed = {
        int(p.split("/")[0]) for ins in _final_stage() if ins.name == "EXPOSE" for p in ins.value.split()
    }
    assert exposed == {fields["port"].default, fields["grpc_port"].default}
    # uvicorn must not cut in-flight HTTP work sooner than the app promises to let it finish.
    assert float(_cmd_option("--timeout-graceful-shutdown")) >= fields["shutdown_grace_secs"].default


def test_image_builds_the_kernels_as_make_install_does() -> None:
    """engine._C is compiled in the builder like `make install` compiles it (strict: an image
    must not silently ship without kernels)."""
    make = MAKEFILE.read_text()
    assert "$(PY) -m engine.csrc.build" in make and "install: $(STAMP) $(EXT_STAMP)" in make
    runs = [ins.value for ins in _stages()[1] if ins.name == "RUN"]
    builds = [r for r in runs if "python -m engine.csrc.build --strict" in r]
    assert builds, "the builder stage does not compile engine._C"
    assert "TORCH_CUDA_ARCH_LIST" in builds[0], "the CUDA arch list build arg does not reach the build"
