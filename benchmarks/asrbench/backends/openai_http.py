"""Any OpenAI-compatible transcription server (POST /v1/audio/transcriptions, multipart).

`OpenAIHttpClient` is also the HTTP transport of the oasr_server backend.
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx

from benchmarks.asrbench.backends.base import (
    Backend,
    BackendError,
    Capability,
    Option,
    StreamSession,
    Utterance,
    supported,
    unsupported,
)

REQUEST_TIMEOUT_S = 1800.0
"""Per request; long-form clips on a slow CPU server take minutes."""


class OpenAIHttpClient:
    """Thread-safe: one pooled httpx.Client shared by all caller threads."""

    def __init__(self, base_url: str, model: str, language: str, api_key: str, max_connections: int) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, limits=limits,
                                    timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0))
        self._model = model
        self._language = language

    def transcribe(self, utt: Utterance) -> str:
        data = {"response_format": "json"}
        if self._model:
            data["model"] = self._model
        if self._language:
            data["language"] = self._language
        try:
            resp = self._client.post("/v1/audio/transcriptions", data=data,
                                     files={"file": (f"{utt.item_id}.wav", utt.wav_bytes(), "audio/wav")})
        except httpx.HTTPError as exc:
            raise BackendError(f"HTTP request failed: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise BackendError(f"HTTP {resp.status_code}: {resp.text[:300]}")
        return str(resp.json().get("text", "")).strip()

    def close(self) -> None:
        self._client.close()


class OpenAIHttpBackend(Backend):
    name = "openai_http"
    summary = "any OpenAI-compatible server by base_url (attached; nothing is started)"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "base_url": Option("", "server root, e.g. http://127.0.0.1:8000 (required)"),
        "model": Option("whisper-1", "`model` form field"),
        "language": Option("en", "`language` form field; empty omits it"),
        "api_key": Option("", "Bearer token, if the server wants one"),
        "concurrency": Option(8, "requests the throughput kind keeps in flight"),
        "realtime": Option(False, "the server also speaks the OpenAI realtime transcription WebSocket (/v1/realtime)"),
        "streaming_mode": Option("native", "what its realtime sessions do, as recorded with streaming results: "
                                 "native (partials while audio arrives) or buffered (decoded after the end)",
                                 ("native", "buffered")),
        "server_pid": Option(0, "the server's process id, so the resource monitor samples it"),
    }

    ALIASES: ClassVar[dict[str, str]] = {"url": "base_url"}

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self._client: OpenAIHttpClient | None = None

    def capabilities(self) -> dict[str, Capability]:
        attached = "attached to a server the suite did not start; its start-up is not observable"
        return {
            "cold_start": unsupported(attached),
            "single": supported(),
            "batch": unsupported("the OpenAI transcription API takes one file per request; server-side "
                                 "batching shows in throughput/load"),
            "throughput": supported(),
            "load": supported(),
            "longform": supported(),
            "streaming": supported(f"/v1/realtime, {self.options['streaming_mode']}") if self.options["realtime"]
            else unsupported("not declared: pass -o realtime=true if the server has /v1/realtime"),
        }

    def start(self) -> None:
        if not self.options["base_url"]:
            raise BackendError("openai_http needs -o base_url=http://host:port")
        self._client = OpenAIHttpClient(self.options["base_url"], self.options["model"], self.options["language"],
                                        self.options["api_key"], int(self.options["concurrency"]) + 8)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def prepare(self, utt: Utterance) -> None:
        utt.wav_bytes()

    def transcribe(self, utt: Utterance) -> str:
        if self._client is None:
            raise BackendError("backend not started")
        return self._client.transcribe(utt)

    def open_stream(self, utt: Utterance) -> StreamSession:
        from benchmarks.asrbench.backends.realtime import RealtimeStream

        return RealtimeStream(self.options["base_url"], self.options["model"], "none", self.options["api_key"])

    def concurrency(self) -> int:
        return int(self.options["concurrency"])

    def pids(self) -> dict[str, int]:
        return {"server": int(self.options["server_pid"])} if int(self.options["server_pid"]) else {}

    def info(self) -> dict[str, Any]:
        return {"base_url": self.options["base_url"], "realtime": self.options["realtime"],
                "streaming_mode": self.options["streaming_mode"] if self.options["realtime"] else None}
