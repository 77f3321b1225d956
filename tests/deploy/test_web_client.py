"""The browser demo's pieces that can be checked without a browser: the files reference
each other correctly, the scripts parse, and the AudioWorklet resampler turns microphone
audio at common rates into 24 kHz 16-bit PCM (run in Node with the worklet globals shimmed).

The full page, in Chromium against a live server, is tests/e2e/test_browser.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

from tests.deploy.manifests import ROOT

WEB = ROOT / "examples" / "web"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(
    NODE is None, reason="node not installed: the worklet cannot run outside a browser"
)

# Runs pcm-worklet.js with the AudioWorkletGlobalScope pieces it uses, feeds a sine in
# 128-frame render quanta (what browsers call process() with), and prints the PCM.
HARNESS = r"""
const fs = require("fs");
const [path, rate, freq, seconds, channels, amplitude] = process.argv.slice(1).map((v, i) => (i ? Number(v) : v));
const posted = [];
globalThis.sampleRate = rate;
globalThis.AudioWorkletProcessor = class { constructor() { this.port = { postMessage: (m) => posted.push(m) }; } };
let Processor = null;
globalThis.registerProcessor = (name, cls) => { if (name === "pcm-capture") Processor = cls; };
new Function(fs.readFileSync(path, "utf8"))();
const proc = new Processor();
const total = Math.round(rate * seconds);
for (let start = 0; start < total; start += 128) {
  const n = Math.min(128, total - start);
  const chans = [];
  for (let c = 0; c < channels; c++) {
    const buf = new Float32Array(n);
    for (let i = 0; i < n; i++) buf[i] = amplitude * Math.sin(2 * Math.PI * freq * (start + i) / rate);
    chans.push(buf);
  }
  proc.process([chans]);
}
proc.port.onmessage({ data: "flush" });
const samples = [];
for (const buffer of posted) samples.push(...new Int16Array(buffer));
process.stdout.write(JSON.stringify({ chunks: posted.map((b) => b.byteLength / 2), samples }));
"""


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "script":
            self.scripts.append(attributes)
        if attributes.get("id"):
            self.ids.add(str(attributes["id"]))


def test_page_scripts_and_elements_line_up() -> None:
    refs = _Refs()
    refs.feed((WEB / "index.html").read_text())
    assert [s["src"] for s in refs.scripts] == ["app.js"]
    assert refs.scripts[0]["type"] == "module", "app.js uses import.meta.url to find the worklet"
    app = (WEB / "app.js").read_text()
    used_ids = set(re.findall(r'\$\("([\w-]+)"\)', app))
    assert used_ids <= refs.ids, f"app.js looks up missing elements {sorted(used_ids - refs.ids)}"
    worklet = re.search(r'new URL\("([\w.-]+)", import\.meta\.url\)', app)
    assert worklet and (WEB / worklet.group(1)).is_file()
    registered = re.search(r'registerProcessor\("([\w-]+)"', (WEB / worklet.group(1)).read_text())
    assert registered and f'new AudioWorkletNode(this.context, "{registered.group(1)}")' in app


def test_page_speaks_the_openai_realtime_transcription_protocol() -> None:
    app = (WEB / "app.js").read_text()
    # Relative to the app root, so the page works under /demo/ and behind a path prefix.
    for url in ("v1/realtime?intent=transcription", "v1/audio/transcriptions", "v1/models"):
        # a string or a template literal (the realtime URL appends the session's own query)
        assert re.search(rf'new URL\(["`]{re.escape(url)}(\$\{{\w+\}})?["`], apiBase\(\)\)', app), url
    for event in (
        "session.update",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.completed",
    ):
        assert f'"{event}"' in app, event
    assert 'format: { type: "audio/pcm", rate: SAMPLE_RATE }' in app
    assert "const SAMPLE_RATE = 24000;" in app
    assert 'form.append("timestamp_granularities[]", "word")' in app


@needs_node
@pytest.mark.parametrize("name", ["app.js", "pcm-worklet.js"])
def test_scripts_parse(name: str) -> None:
    assert NODE is not None
    args = [NODE, "--experimental-default-type=module", "--check", str(WEB / name)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def _run_worklet(
    rate: int, freq: float, seconds: float, channels: int = 1, amplitude: float = 0.5
) -> dict[str, list[int]]:
    assert NODE is not None
    result = subprocess.run(
        [
            NODE,
            "-e",
            HARNESS,
            str(WEB / "pcm-worklet.js"),
            str(rate),
            str(freq),
            str(seconds),
            str(channels),
            str(amplitude),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out: dict[str, list[int]] = json.loads(result.stdout)
    return out


@needs_node
@pytest.mark.parametrize(("rate", "channels"), [(48000, 1), (44100, 2), (16000, 1)])
def test_worklet_resamples_microphone_audio_to_24khz_pcm16(rate: int, channels: int) -> None:
    seconds, freq = 2.0, 440.0
    out = _run_worklet(rate, freq, seconds, channels)
    pcm = np.asarray(out["samples"], dtype=np.float64)
    assert abs(len(pcm) - 24000 * seconds) <= 2, "output must be 24 kHz whatever the input rate"
    assert all(n <= 2400 for n in out["chunks"]) and out["chunks"][0] == 2400, "100 ms chunks"
    # Amplitude 0.5 of full scale survives (box filter attenuation at 440 Hz is tiny).
    assert 0.45 * 32767 < np.abs(pcm).max() < 0.52 * 32767
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(len(pcm))))
    peak_hz = np.argmax(spectrum) * 24000 / len(pcm)
    assert abs(peak_hz - freq) < 2.0, f"a {freq} Hz tone came out at {peak_hz:.1f} Hz"


@needs_node
def test_worklet_clips_instead_of_wrapping() -> None:
    # A tone at 1.5x full scale must saturate, not wrap around to the opposite sign.
    pcm = np.asarray(_run_worklet(24000, 100.0, 0.2, amplitude=1.5)["samples"])
    reference = np.sin(2 * np.pi * 100.0 * np.arange(len(pcm)) / 24000)
    assert pcm.max() == 32767 and pcm.min() == -32768
    assert np.all(np.sign(pcm[np.abs(reference) > 0.1]) == np.sign(reference[np.abs(reference) > 0.1]))
