"""A long upload through a real server at its defaults (its windows decoded in parallel,
engine/models/whisper/longform.py), with the openai SDK: `stream=true` sends the text window by
window in order, `verbose_json` and SRT read as one recording, nothing over the trailing silence."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import openai
import pytest
import soundfile as sf

from tests.conftest import SAMPLE_RATE, reference_clips, wer
from tests.e2e.conftest import ServerProcess, start_server

pytestmark = pytest.mark.slow
MIN_SPEECH_S = 100.0  # four windows or more
TRAILING_S = 20.0
TIMEOUT_S = 600.0
MAX_WER = 25.0  # tiny.en on the dev clips: ~10-14 %; this catches lost or doubled windows


@pytest.fixture(scope="module")
def recording() -> tuple[bytes, float, str]:
    """(WAV bytes, where the speech ends (s), the reference text)."""
    clips = sorted((c for c in reference_clips() if c.duration <= 30.0), key=lambda c: c.id)
    parts: list[np.ndarray] = []
    texts: list[str] = []
    total = 0
    for clip in clips:
        if total >= MIN_SPEECH_S * SAMPLE_RATE:
            break
        parts += [clip.audio, np.zeros(SAMPLE_RATE, np.float32)]
        texts.append(clip.text or "")
        total += clip.audio.size + SAMPLE_RATE
    speech_end = total / SAMPLE_RATE
    parts.append(np.zeros(int(TRAILING_S * SAMPLE_RATE), np.float32))
    buf = io.BytesIO()
    sf.write(buf, np.concatenate(parts), SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue(), speech_end, " ".join(texts)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("longform-http"),
                       {"OASR_GRPC_PORT": "0", "OASR_REQUEST_TIMEOUT_SECS": str(int(TIMEOUT_S)),
                        "OASR_QUANTIZATION": "int8_w8a8"})
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def sdk(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT_S)


def _create(sdk: openai.OpenAI, data: bytes, **kwargs: Any) -> Any:
    return sdk.audio.transcriptions.create(model="whisper-1", file=("long.wav", data), **kwargs)


def test_stream_sends_windows_in_order(sdk: openai.OpenAI, recording: tuple[bytes, float, str]) -> None:
    data, _, reference = recording
    events = list(_create(sdk, data, stream=True))
    types = [e.type for e in events]
    assert types[-1] == "transcript.text.done" and types.count("transcript.text.done") == 1, types
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    assert len(deltas) >= 2, "a long upload's text should arrive window by window"
    assert "".join(deltas) == events[-1].text
    assert wer([reference], [events[-1].text]) <= MAX_WER, events[-1].text


def test_verbose_json_and_srt_read_as_one_recording(sdk: openai.OpenAI, recording: tuple[bytes, float, str]) -> None:
    data, speech_end, reference = recording
    out = _create(sdk, data, response_format="verbose_json", timestamp_granularities=["segment", "word"])
    assert out.duration == pytest.approx(speech_end + TRAILING_S, abs=0.05)
    assert wer([reference], [out.text]) <= MAX_WER, out.text
    previous = 0.0
    for seg in out.segments:
        assert previous - 1e-3 <= seg.start <= seg.end <= speech_end + 0.5, seg  # nothing over the trailing silence
        previous = seg.end
    starts = [w.start for w in out.words]
    assert starts == sorted(starts) and out.words[-1].end <= speech_end + 0.5
    # SRT against the same decoding's segments: word timestamps encode every window with its full
    # 30 s context (collate.py), so their segments may be cut otherwise ("... on the" | "left.")
    segments = _create(sdk, data, response_format="verbose_json", timestamp_granularities=["segment"]).segments
    srt = _create(sdk, data, response_format="srt")
    stamps = re.findall(r"(\d\d):(\d\d):(\d\d),(\d\d\d) --> (\d\d):(\d\d):(\d\d),(\d\d\d)", srt)
    assert len(stamps) == len(segments)
    starts_srt = [int(h) * 3600 + int(m) * 60 + int(sec) + int(ms) / 1000 for h, m, sec, ms, *_ in stamps]
    assert all(abs(a - seg.start) <= 0.0015 for a, seg in zip(starts_srt, segments)), (starts_srt, segments)
    seconds = [(int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000) for h, m, s, ms, *_ in stamps]
    assert seconds == sorted(seconds) and seconds[-1] < speech_end
