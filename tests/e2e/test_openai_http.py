"""The OpenAI-shaped HTTP surface end to end: the official `openai` SDK with only `base_url`
changed, and httpx multipart uploads of every container format, against a real
`uvicorn --factory app.main:create_app` with the embedded Whisper tiny.en.

Requests are fired concurrently from module-scoped fixtures (one engine batch instead of a
queue of single requests); each test then checks one answer.
"""

from __future__ import annotations

import asyncio
import io
import re
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import soxr

from tests.audio_variants import encode_variant
from tests.conftest import Clip, load_clip, manifest, wer
from tests.e2e.conftest import ServerProcess, start_server

SDK_CLIP = "jfk_inaugural"  # 11 s, 44.1 kHz stereo FLAC: the file goes up exactly as stored
VARIANT_CLIP = "libri_61-70968-0000"  # 4.9 s read speech, re-encoded below
MAX_WER = 15.0  # percent; tiny.en is near 0 on both clips, lossy 8 kHz codecs cost a few words
FILENAMES = {"wav": "a.wav", "flac": "a.flac", "mp3": "a.mp3", "m4a": "a.m4a", "ogg_opus": "a.ogg",
             "webm_opus": "a.webm"}
TIMEOUT_S = 300.0  # per client call: a shared 2-core box under load can take minutes; never unbounded


def clip(clip_id: str) -> Clip:
    return next(c for c in manifest() if c.id == clip_id)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # HTTP surfaces only: no gRPC listener (app/grpc/service.py is tested on its own).
    srv = start_server(tmp_path_factory.mktemp("openai"), env={"OASR_GRPC_PORT": "0"})
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def sdk(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT_S)


def _stream_events(client: openai.OpenAI, path: Path, **kwargs: Any) -> list[Any]:
    with path.open("rb") as f:
        return list(client.audio.transcriptions.create(model="whisper-1", file=f, stream=True, **kwargs))


def _create(client: openai.OpenAI, path: Path, **kwargs: Any) -> Any:
    with path.open("rb") as f:
        return client.audio.transcriptions.create(model="whisper-1", file=f, **kwargs)


@pytest.fixture(scope="module")
def sdk_answers(sdk: openai.OpenAI) -> dict[str, Future[Any]]:
    """Every SDK call of this module, in flight together; tests read one result each."""
    path = clip(SDK_CLIP).path
    calls: dict[str, Callable[[], Any]] = {
        "json": lambda: _create(sdk, path),
        "text": lambda: _create(sdk, path, response_format="text"),
        "srt": lambda: _create(sdk, path, response_format="srt"),
        "vtt": lambda: _create(sdk, path, response_format="vtt"),
        "verbose_json": lambda: _create(sdk, path, response_format="verbose_json"),
        "words": lambda: _create(sdk, path, response_format="verbose_json", timestamp_granularities=["word"]),
        "stream": lambda: _stream_events(sdk, path),
        "logprobs": lambda: _create(sdk, path, include=["logprobs"]),
        "stream-logprobs": lambda: _stream_events(sdk, path, include=["logprobs"]),
    }
    pool = ThreadPoolExecutor(max_workers=len(calls))
    futures = {name: pool.submit(call) for name, call in calls.items()}
    pool.shutdown(wait=False)
    return futures


def _answer(answers: dict[str, Future[Any]], name: str) -> Any:
    return answers[name].result(timeout=TIMEOUT_S)


def _reference() -> str:
    text = clip(SDK_CLIP).text
    assert text
    return text


def test_sdk_json(sdk_answers: dict[str, Future[Any]]) -> None:
    out = _answer(sdk_answers, "json")
    assert isinstance(out, openai.types.audio.Transcription)
    assert wer([_reference()], [out.text]) <= MAX_WER, out.text


def test_sdk_text(sdk_answers: dict[str, Future[Any]]) -> None:
    out = _answer(sdk_answers, "text")
    assert isinstance(out, str) and not out.lstrip().startswith("{")
    assert wer([_reference()], [out]) <= MAX_WER, out


SRT_CUE = re.compile(r"(\d+)\n(\d\d):(\d\d):(\d\d),(\d\d\d) --> (\d\d):(\d\d):(\d\d),(\d\d\d)\n(.+)")
VTT_CUE = re.compile(r"(\d\d):(\d\d):(\d\d)\.(\d\d\d) --> (\d\d):(\d\d):(\d\d)\.(\d\d\d)\n(.+)")


def _seconds(h: str, m: str, s: str, ms: str) -> float:
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def _check_cues(cues: list[tuple[float, float, str]], duration: float) -> None:
    assert cues, "no cues"
    previous_end = 0.0
    for start, end, _ in cues:
        assert previous_end - 0.01 <= start <= end <= duration + 0.05, cues
        previous_end = end
    assert wer([_reference()], [" ".join(text for *_, text in cues)]) <= MAX_WER, cues


def test_sdk_srt(sdk_answers: dict[str, Future[Any]]) -> None:
    out = _answer(sdk_answers, "srt")
    blocks = [b for b in out.strip().split("\n\n") if b.strip()]
    matches = [SRT_CUE.fullmatch(b.strip()) for b in blocks]
    assert all(matches), out
    assert [int(m.group(1)) for m in matches if m] == list(range(1, len(blocks) + 1))
    cues = [(_seconds(*m.groups()[1:5]), _seconds(*m.groups()[5:9]), m.group(10)) for m in matches if m]
    _check_cues(cues, clip(SDK_CLIP).duration)


def test_sdk_vtt(sdk_answers: dict[str, Future[Any]]) -> None:
    out = _answer(sdk_answers, "vtt")
    header, *blocks = [b for b in out.strip().split("\n\n") if b.strip()]
    assert header.strip() == "WEBVTT", out
    matches = [VTT_CUE.fullmatch(b.strip()) for b in blocks]
    assert all(matches), out
    cues = [(_seconds(*m.groups()[0:4]), _seconds(*m.groups()[4:8]), m.group(9)) for m in matches if m]
    _check_cues(cues, clip(SDK_CLIP).duration)


def test_sdk_verbose_json_has_real_segments(sdk_answers: dict[str, Future[Any]]) -> None:
    out = _answer(sdk_answers, "verbose_json")
    assert isinstance(out, openai.types.audio.TranscriptionVerbose)
    assert out.language == "english"
    assert out.duration == pytest.approx(clip(SDK_CLIP).duration, abs=0.05)
    assert wer([_reference()], [out.text]) <= MAX_WER, out.text
    assert out.segments, "verbose_json without segments"
    _check_cues([(s.start, s.end, s.text) for s in out.segments], out.duration)
    for seg in out.segments:
        assert seg.tokens and seg.avg_logprob < 0 and 0 <= seg.no_speech_prob <= 1
    assert out.words is None  # not asked for


def test_sdk_word_timestamps_are_monotonic_inside_the_audio(sdk_answers: dict[str, Future[Any]]) -> None:
    out = _answer(sdk_answers, "words")
    assert out.words, "timestamp_granularities=['word'] returned no words"
    starts = [w.start for w in out.words]
    assert starts == sorted(starts), starts
    for w in out.words:
        assert 0.0 <= w.start <= w.end <= out.duration + 0.05, w
    assert out.words[-1].end > 0.5 * out.duration  # the words span the speech, not one instant
    assert wer([_reference()], [" ".join(w.word for w in out.words)]) <= MAX_WER
    confidences = [w.model_extra["confidence"] for w in out.words if w.model_extra]  # our extension field
    assert len(confidences) == len(out.words) and all(0.0 <= c <= 1.0 for c in confidences)


def test_sdk_stream_sends_deltas_then_done(sdk_answers: dict[str, Future[Any]]) -> None:
    events = _answer(sdk_answers, "stream")
    types = [e.type for e in events]
    assert types[-1] == "transcript.text.done" and types.count("transcript.text.done") == 1, types
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    assert deltas, types
    done = events[-1].text
    assert "".join(deltas) == done
    assert wer([_reference()], [done]) <= MAX_WER, done


def test_sdk_include_logprobs_with_usage(sdk_answers: dict[str, Future[Any]]) -> None:
    out = _answer(sdk_answers, "logprobs")
    assert out.logprobs and all(lp.logprob <= 0 for lp in out.logprobs)
    assert b"".join(bytes(int(b) for b in lp.bytes) for lp in out.logprobs).decode().strip() == out.text.strip()
    assert out.usage.type == "duration" and out.usage.seconds >= 1
    assert out.text == _answer(sdk_answers, "json").text  # asking for logprobs changes nothing else


def test_sdk_stream_with_logprobs(sdk_answers: dict[str, Future[Any]]) -> None:
    events = _answer(sdk_answers, "stream-logprobs")
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    done = events[-1]
    assert deltas and done.type == "transcript.text.done" and done.logprobs, [e.type for e in events]
    assert [lp.token for d in deltas for lp in d.logprobs or []] == [lp.token for lp in done.logprobs]
    assert done.usage is not None and done.usage.type == "duration"


def test_sdk_translation_names_the_english_only_limit(sdk: openai.OpenAI) -> None:
    with (
        clip(SDK_CLIP).path.open("rb") as f,
        pytest.raises(openai.BadRequestError) as err,
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", DeprecationWarning)  # the SDK marks translations deprecated
        sdk.audio.translations.create(model="whisper-1", file=f)
    assert err.value.status_code == 400
    assert "english-only" in err.value.message.lower()
    assert isinstance(err.value.body, dict) and err.value.body.get("type") == "invalid_request_error"


# ----------------------------------------------------------------------------- httpx multipart


# Every container once as an OpenAI upload, the rates and channel counts spread across them
# (tests/e2e/test_google_http.py sends the same containers raw at the other rates, plus the
# headerless encodings); tests/app/test_audio.py checks the full format x rate x channels grid
# at the decoder, so here each HTTP path needs one pass per format, not the whole grid.
VARIANT_CASES = [
    ("wav", 8000, 1),
    ("flac", 44100, 2),
    ("mp3", 16000, 1),
    ("m4a", 48000, 2),
    ("ogg_opus", 44100, 1),
    ("webm_opus", 8000, 2),
]


def _case_id(case: tuple[str, int, int]) -> str:
    fmt, rate, channels = case
    return f"{fmt}-{rate}-{'stereo' if channels == 2 else 'mono'}"


def _encode(fmt: str, rate: int, channels: int) -> bytes:
    samples = load_clip(VARIANT_CLIP)  # float32 mono 16 kHz
    if rate != 16000:
        samples = soxr.resample(samples, 16000, rate).astype(np.float32)
    return encode_variant(samples, rate, fmt, channels=channels)


@pytest.fixture(scope="module")
def multipart_answers(server: ServerProcess) -> dict[tuple[str, int, int], httpx.Response | BaseException]:
    """Every case of VARIANT_CASES uploaded as OpenAI multipart, all at once."""

    async def run() -> list[httpx.Response | BaseException]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=TIMEOUT_S,
                                     limits=httpx.Limits(max_connections=len(VARIANT_CASES))) as client:
            return await asyncio.gather(*(
                client.post("/v1/audio/transcriptions",
                            files={"file": (FILENAMES[fmt], _encode(fmt, rate, ch), "application/octet-stream")},
                            data={"model": "whisper-1"})
                for fmt, rate, ch in VARIANT_CASES
            ), return_exceptions=True)

    return dict(zip(VARIANT_CASES, asyncio.run(run())))


@pytest.mark.parametrize("case", VARIANT_CASES, ids=_case_id)
def test_multipart_upload_transcribes(
    multipart_answers: dict[tuple[str, int, int], httpx.Response | BaseException], case: tuple[str, int, int]
) -> None:
    answer = multipart_answers[case]
    if isinstance(answer, BaseException):
        raise answer
    assert answer.status_code == 200, answer.text
    reference = clip(VARIANT_CLIP).text
    assert reference
    assert wer([reference], [answer.json()["text"]]) <= MAX_WER, answer.json()


# ------------------------------------------------------------------------------- bad input


def _wav(rate: int, seconds: float = 0.5) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(int(rate * seconds), dtype=np.float32), rate, format="WAV")
    return buf.getvalue()


def _truncated(fmt: str, keep: float) -> bytes:
    body = _encode(fmt, 16000, 1)
    return body[: int(len(body) * keep)]


# (case id, form fields, file factory (None: no file part), expected status, param, words in the message)
BAD_INPUT = [
    ("empty-file", {}, lambda: b"", 400, "file", ["empty"]),
    ("garbage", {}, lambda: bytes(range(256)) * 40, 400, "file", ["not recognised", "WAV"]),
    ("truncated-wav", {}, lambda: _truncated("wav", 0.5), 400, "file", ["truncated"]),
    ("truncated-mp3", {}, lambda: _truncated("mp3", 0.33), 400, "file", ["truncated"]),
    ("unsupported-rate", {}, lambda: _wav(2000), 400, "file", ["2000 Hz", "not supported"]),
    ("no-file", {"model": "whisper-1"}, None, 400, None, ["file", "required"]),
    ("temperature-5", {"temperature": "5"}, lambda: _wav(16000), 400, None, ["temperature", "5"]),
    ("temperature-text", {"temperature": "hot"}, lambda: _wav(16000), 400, None, ["temperature"]),
    ("response-format-xml", {"response_format": "xml"}, lambda: _wav(16000), 400, "response_format",
     ["response_format", "verbose_json"]),
    ("granularities-with-json", {"timestamp_granularities[]": "word"}, lambda: _wav(16000), 400,
     "timestamp_granularities", ["verbose_json"]),
    ("granularity-unknown", {"response_format": "verbose_json", "timestamp_granularities[]": "char"},
     lambda: _wav(16000), 400, "timestamp_granularities", ["word", "segment", "char"]),
    ("stream-srt", {"stream": "true", "response_format": "srt"}, lambda: _wav(16000), 400, "stream",
     ["stream", "json", "text"]),
    ("language-on-english-only", {"language": "fr"}, lambda: _wav(16000), 400, None, ["english-only", "'fr'"]),
    ("include-unknown", {"include[]": "tokens"}, lambda: _wav(16000), 400, "include", ["include", "logprobs"]),
    ("logprobs-with-srt", {"include[]": "logprobs", "response_format": "srt"}, lambda: _wav(16000), 400, "include",
     ["response_format=json"]),
    ("language-on-english-only-stream", {"language": "fr", "stream": "true"}, lambda: _wav(16000), 400, None,
     ["english-only", "'fr'"]),
]


@pytest.mark.parametrize(("fields", "file", "status", "param", "words"), [c[1:] for c in BAD_INPUT],
                         ids=[c[0] for c in BAD_INPUT])
def test_bad_input_gets_openai_error_envelope(
    server: ServerProcess, fields: dict[str, str], file: Callable[[], bytes] | None, status: int,
    param: str | None, words: list[str],
) -> None:
    files = {"file": ("upload.bin", file(), "application/octet-stream")} if file is not None else None
    r = httpx.post(server.base_url + "/v1/audio/transcriptions", data=fields, files=files, timeout=TIMEOUT_S)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    for word in words:
        assert word.lower() in error["message"].lower(), error["message"]


def test_still_serving_after_bad_input(sdk: openai.OpenAI) -> None:
    """Runs after the bad-input cases (file order): the engine and decoders are unharmed."""
    out = _create(sdk, clip(VARIANT_CLIP).path, response_format="text")
    reference = clip(VARIANT_CLIP).text
    assert reference and wer([reference], [out]) <= MAX_WER
