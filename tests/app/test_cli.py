"""The `oasr` console script, run as a user runs it: a subprocess, real model, real server."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.cli import EXIT_FAILURE, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, build_parser
from app.settings import SERVER_SETTING_GROUPS
from app.settings_doc import setting_groups, setting_specs
from tests.conftest import Clip, manifest, wer
from tests.e2e.conftest import REPO, ServerProcess, free_port, start_server

CLIP_IDS = ("libri_61-70968-0000", "jfk_inaugural")
MAX_WER_PERCENT = 15.0  # tiny.en on clean read speech lands far below; a broken path lands far above


def _oasr() -> list[str]:
    """The installed console script (`pip install -e .` puts it next to the interpreter)."""
    script = Path(sys.executable).with_name("oasr")
    if script.exists():
        return [str(script)]
    found = shutil.which("oasr")
    if found:
        return [found]
    pytest.fail("the `oasr` console script is not installed; run: .venv/bin/pip install -e . --no-deps")


def run_oasr(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    # Bytes, decoded here: text mode would turn the in-place partials' \r into newlines.
    raw = subprocess.run([*_oasr(), *args], capture_output=True, timeout=timeout, cwd=REPO)
    return subprocess.CompletedProcess(raw.args, raw.returncode, raw.stdout.decode(), raw.stderr.decode())


def clip(clip_id: str) -> Clip:
    for c in manifest():
        if c.id == clip_id:
            return c
    raise AssertionError(f"clip {clip_id} is not in the speech data")


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected a one-line error, got:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Streaming mode, so `oasr stream` gets live partials; offline uploads work the same.
    srv = start_server(tmp_path_factory.mktemp("cli"), {"OASR_SERVICE_MODE": "streaming"})
    yield srv
    srv.terminate()


# ---------------------------------------------------------------- parser and help


def test_serve_has_exactly_one_flag_per_setting() -> None:
    parser = build_parser()
    serve = next(a for a in parser._subparsers._group_actions if a.dest == "command").choices["serve"]  # type: ignore[union-attr]
    flags = {opt for action in serve._actions for opt in action.option_strings if opt.startswith("--")}
    flags -= {"--help"}
    expected = {s.flag for s in setting_specs()} | {"--no-" + s.flag[2:] for s in setting_specs() if s.kind == "bool"}
    assert flags == expected


def test_serve_help_lists_every_setting() -> None:
    result = run_oasr("serve", "--help")
    assert result.returncode == EXIT_OK, result.stderr
    for spec in setting_specs():
        assert spec.flag in result.stdout
    assert "--quantization-option KEY=VALUE" in result.stdout


def test_serve_help_groups_flags_server_first_then_each_family() -> None:
    result = run_oasr("serve", "--help")
    assert result.returncode == EXIT_OK, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "usage: oasr serve [-h] [--SETTING VALUE ...]"  # not ~70 lines of every flag
    groups = setting_groups()
    headers = [lines.index(f"{g.title}:") for g in groups]  # each group's heading, once
    assert headers == sorted(headers), "groups are not in setting_groups() order"
    server_titles = [title for title, _ in SERVER_SETTING_GROUPS]
    assert [g.title for g in groups[:len(server_titles)]] == server_titles  # the server's own first
    families = [g.title for g in groups[len(server_titles):]]
    assert families and all(t.endswith(" models") for t in families)
    assert {"whisper models", "wenet models", "nemo models"} <= set(families)
    # every flag is listed inside its own group: after its heading, before the next one
    ends = [*headers[1:], next(i for i, line in enumerate(lines) if line == "exit codes:")]
    for group, start, end in zip(groups, headers, ends, strict=True):
        listed = {line.split()[0].rstrip(",") for line in lines[start + 1:end] if line.startswith("  --")}
        assert listed == {s.flag for s in group.specs}, group.title


def test_every_setting_is_in_exactly_one_group() -> None:
    names = [s.name for g in setting_groups() for s in g.specs]
    assert sorted(names) == sorted(s.name for s in setting_specs())


def test_help_documents_exit_codes() -> None:
    result = run_oasr("--help")
    assert result.returncode == EXIT_OK
    for code in (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_UNREACHABLE):
        assert f"\n  {code} " in result.stdout, result.stdout
    assert "server unreachable" in result.stdout


# ---------------------------------------------------------------- errors


def test_missing_file_is_a_one_line_usage_error(tmp_path: Path) -> None:
    result = run_oasr("transcribe", str(tmp_path / "nope.wav"))
    assert result.returncode == EXIT_USAGE
    assert "no such file" in one_line_error(result)


def test_unknown_flag_is_a_one_line_usage_error() -> None:
    result = run_oasr("transcribe", "--no-such-flag", "x.wav")
    assert result.returncode == EXIT_USAGE
    assert "--no-such-flag" in one_line_error(result)


def test_bad_serve_value_is_a_usage_error_before_anything_loads() -> None:
    result = run_oasr("serve", "--max-batch-size", "many")
    assert result.returncode == EXIT_USAGE
    assert "--max-batch-size" in one_line_error(result)


def test_quantization_options_fold_into_one_engine_object(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.settings import Settings

    monkeypatch.setenv("OASR_QUANTIZATION", "int8_w8a8")
    monkeypatch.setenv("OASR_QUANTIZATION_OPTION", "ignore=ctc.*,decoder.*; module_types=linear")
    config = Settings().engine_config()
    assert config.quantization == {"scheme": "int8_w8a8", "ignore": "ctc.*,decoder.*", "module_types": "linear"}
    assert config.quantization_config().ignore == ("ctc.*", "decoder.*")
    monkeypatch.delenv("OASR_QUANTIZATION_OPTION")
    assert Settings().engine_config().quantization == "int8_w8a8"  # no options: the key alone


def test_a_quantization_option_without_a_value_is_a_usage_error() -> None:
    result = run_oasr("serve", "--quantization-option", "decoder.*")
    assert result.returncode == EXIT_USAGE
    assert "--quantization-option: Value error, expected KEY=VALUE" in one_line_error(result)


def test_unreachable_server_exits_3(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    for args in (("models", "--url", url), ("transcribe", "--url", url, str(clip(CLIP_IDS[0]).path)),
                 ("stream", "--url", url, str(clip(CLIP_IDS[0]).path))):
        result = run_oasr(*args)
        assert result.returncode == EXIT_UNREACHABLE, (args, result.stderr)
        assert "cannot reach the server" in one_line_error(result)


def test_undecodable_file_in_process_exits_1(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.wav"
    bogus.write_text("this is not audio")
    result = run_oasr("transcribe", str(bogus))
    assert result.returncode == EXIT_FAILURE
    assert "notes.wav" in one_line_error(result)


# ---------------------------------------------------------------- in process


def test_transcribe_in_process_is_accurate() -> None:
    c = clip(CLIP_IDS[0])
    result = run_oasr("transcribe", str(c.path))
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stderr == "", "no progress bar or log lines when stderr is not a terminal"
    assert c.text is not None
    assert wer([c.text], [result.stdout]) < MAX_WER_PERCENT, result.stdout


def test_many_files_show_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios

    parent, child = pty.openpty()
    # A pty starts 0 columns wide, where tqdm draws nothing; give it a terminal's size.
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([*_oasr(), "transcribe", *(str(clip(i).path) for i in CLIP_IDS), "-o", str(tmp_path)],
                            stderr=child, stdout=subprocess.DEVNULL, cwd=REPO)
    os.close(child)
    seen = b""
    while True:
        ready, _, _ = select.select([parent], [], [], 1.0)
        if ready:
            try:
                data = os.read(parent, 4096)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            seen += data
        elif proc.poll() is not None:
            break
    assert proc.wait(timeout=180) == EXIT_OK, seen.decode(errors="replace")
    bar = seen.decode(errors="replace")
    assert f"{len(CLIP_IDS)}/{len(CLIP_IDS)}" in bar and "file/s" in bar, bar
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{clip(i).path.stem}.txt" for i in CLIP_IDS)


def test_transcribe_in_process_verbose_json_with_words(tmp_path: Path) -> None:
    c = clip(CLIP_IDS[0])
    out = tmp_path / "out.json"
    result = run_oasr("transcribe", str(c.path), "--response-format", "verbose_json", "--word-timestamps",
                      "--language", "en", "-o", str(out))
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == ""
    body = json.loads(out.read_text())
    words = body["words"]
    assert len(words) >= 10
    assert all(0 <= w["start"] <= w["end"] <= c.duration + 0.5 for w in words)
    assert body["duration"] == pytest.approx(c.duration, abs=0.1)


# ---------------------------------------------------------------- against a server


def test_transcribe_many_files_via_url_into_a_directory(server: ServerProcess, tmp_path: Path) -> None:
    clips = [clip(i) for i in CLIP_IDS]
    result = run_oasr("transcribe", "--url", server.base_url, "--response-format", "srt",
                      *(str(c.path) for c in clips), "-o", str(tmp_path / "out"))
    assert result.returncode == EXIT_OK, result.stderr
    for c in clips:
        srt = (tmp_path / "out" / f"{c.path.stem}.srt").read_text()
        assert srt.startswith("1\n00:00:00,"), srt
        text = " ".join(line for line in srt.splitlines() if line and "-->" not in line and not line.isdigit())
        assert c.text is not None
        assert wer([c.text], [text]) < MAX_WER_PERCENT, text


def test_server_error_is_one_line_with_the_servers_message(server: ServerProcess, tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("this is not audio")
    result = run_oasr("transcribe", "--url", server.base_url, str(bogus))
    assert result.returncode == EXIT_FAILURE
    assert "HTTP 400" in one_line_error(result)


def test_models_lists_the_served_model(server: ServerProcess) -> None:
    result = run_oasr("models", "--url", server.base_url)
    assert result.returncode == EXIT_OK, result.stderr
    served = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"][0]["id"]
    first = result.stdout.splitlines()[0]
    assert first.split("\t")[0] == served
    assert "family=whisper" in first and "service_mode=streaming" in first


def test_stream_prints_partials_in_place_then_the_transcript(server: ServerProcess) -> None:
    # Half speed: a loaded machine still gets interim passes back while the audio plays (at real
    # time, on 2 busy cores, every pass could still be in flight when the final supersedes it).
    c = clip(CLIP_IDS[0])
    started = time.monotonic()
    result = run_oasr("stream", "--url", server.base_url, "--speed", "0.5", str(c.path))
    took = time.monotonic() - started
    assert result.returncode == EXIT_OK, result.stderr
    assert "aclose()" not in result.stderr and "ERROR" not in result.stderr, result.stderr  # ends cleanly
    assert took >= c.duration * 2 * 0.9, f"{c.duration:.1f} s of audio played at half speed in {took:.1f} s"
    frames = result.stdout.split("\r")
    assert len([f for f in frames if f.strip()]) >= 3, f"expected partials before the final: {frames}"
    final = frames[-1]
    assert final.endswith("\n")
    assert c.text is not None
    assert wer([c.text], [final]) < MAX_WER_PERCENT, final


def test_serve_applies_its_flags_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [*_oasr(), "serve", "--host", "127.0.0.1", "--port", str(port), "--grpc-port", "0",
         "--served-model-name", "cli-model", "--max-batch-size", "4",
         "--quantization", "int8_w8a8", "--quantization-option", "ignore=decoder.*,encoder.blocks.0.*"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["cli-model"]
        info = models["data"][0]["info"]  # the flags reached the engine as one quantization object
        assert (info["quantization"], info["quantization_ignore"]) == ("int8_w8a8", ["decoder.*", "encoder.blocks.0.*"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == EXIT_OK, (tmp_path / "serve.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
