"""Our server over the network: suite-managed (`uvicorn app.main:app` on free ports, started
and stopped by the suite) or attached (`-o base_url=` / `-o grpc_target=`).

transport=http  OpenAI multipart POST /v1/audio/transcriptions; streaming over /v1/realtime
transport=grpc  Speech.Recognize; streaming over Speech.StreamingRecognize
"""

from __future__ import annotations

from typing import Any, ClassVar

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
from benchmarks.asrbench.backends.grpc_speech import GrpcSpeechClient
from benchmarks.asrbench.backends.openai_http import OpenAIHttpClient
from benchmarks.asrbench.backends.server_process import ServerProcess
from benchmarks.asrbench.paths import default_ckpt_dir


class OasrServerBackend(Backend):
    name = "oasr_server"
    summary = "OASR server (suite-managed uvicorn, or attached) over HTTP or gRPC"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "transport": Option("http", "request transport", ("http", "grpc")),
        "ckpt_dir": Option(default_ckpt_dir(), "OASR_CKPT_DIR of a managed server; default $CKPT_DIR"),
        "dtype": Option("auto", "OASR_DTYPE of a managed server"),
        "base_url": Option("", "attach to a running server's HTTP root instead of starting one"),
        "grpc_target": Option("", "attached server's gRPC host:port (default: base_url's host, port 50051)"),
        "service_mode": Option("streaming", "OASR_SERVICE_MODE of a managed server", ("streaming", "offline")),
        "max_batch_size": Option(0, "OASR_MAX_BATCH_SIZE of a managed server; 0 = server default"),
        "quantization": Option("auto", "OASR_QUANTIZATION of a managed server (auto: the server's default)",
                               ("auto", "none", "int8_w8a8")),
        "quantization_option": Option("", "OASR_QUANTIZATION_OPTION of a managed server: KEY=VALUE entries "
                                      "separated by ';', e.g. ignore=decoder.*"),
        "turn_detection": Option("none", "realtime sessions' turn detection (none: one item per session)",
                                 ("none", "server_vad")),
        "model": Option("", "`model` sent with requests; empty = the server's default"),
        "concurrency": Option(8, "requests the throughput kind keeps in flight"),
        "server_pid": Option(0, "attached server's process id, so the resource monitor samples it"),
        "startup_timeout_s": Option(300.0, "seconds a managed server may take to become ready"),
    }

    ALIASES: ClassVar[dict[str, str]] = {"url": "base_url", "grpc_addr": "grpc_target"}

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self._server: ServerProcess | None = None
        self._http: OpenAIHttpClient | None = None
        self._grpc: GrpcSpeechClient | None = None
        self._base_url = ""
        self._stream_gap: str | None = None

    @property
    def label(self) -> str:
        return f"oasr_server[{self.options['transport']}]"

    @property
    def attached(self) -> bool:
        return bool(self.options["base_url"] or self.options["grpc_target"])

    def capabilities(self) -> dict[str, Capability]:
        one_clip = ("the {} API takes one clip per request; the server's own batching shows in "
                    "throughput/load").format("OpenAI HTTP" if self.options["transport"] == "http" else "gRPC Recognize")
        return {
            "cold_start": unsupported("attached to a server the suite did not start") if self.attached
            else supported("spawn to first answer of a fresh uvicorn process"),
            "single": supported(),
            "batch": unsupported(one_clip),
            "throughput": supported(),
            "load": supported(),
            "longform": supported(),
            "streaming": unsupported(self._stream_gap) if self._stream_gap else supported(
                "/v1/realtime" if self.options["transport"] == "http" else "StreamingRecognize"),
        }

    def start(self) -> None:
        grpc_target = self.options["grpc_target"]
        if self.attached:
            self._base_url = self.options["base_url"]
            if not grpc_target and self._base_url:
                host = self._base_url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
                grpc_target = f"{host}:50051"
        else:
            env = {"OASR_SERVICE_MODE": self.options["service_mode"], "OASR_QUANTIZATION": self.options["quantization"],
                   "OASR_LOG_LEVEL": "warning"}
            if self.options["quantization_option"]:
                env["OASR_QUANTIZATION_OPTION"] = self.options["quantization_option"]
            if self.options["ckpt_dir"]:
                env["OASR_CKPT_DIR"] = self.options["ckpt_dir"]
            if self.options["dtype"] != "auto":
                env["OASR_DTYPE"] = self.options["dtype"]
            if int(self.options["max_batch_size"]):
                env["OASR_MAX_BATCH_SIZE"] = str(self.options["max_batch_size"])
            self._server = ServerProcess(env, float(self.options["startup_timeout_s"]))
            self._base_url, grpc_target = self._server.base_url, self._server.grpc_target
        if self.options["transport"] == "http":
            if not self._base_url:
                raise BackendError("transport=http needs a base_url (or a managed server)")
            self._http = OpenAIHttpClient(self._base_url, self.options["model"], "en", "",
                                          int(self.options["concurrency"]) + 8)
            from benchmarks.asrbench.backends import realtime

            gap = realtime.probe(self._base_url)
            self._stream_gap = f"/v1/realtime unavailable ({gap})" if gap else None
        else:
            self._grpc = GrpcSpeechClient(grpc_target, "en-US")
            self._grpc.wait_ready(float(self.options["startup_timeout_s"]))

    def stop(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
        if self._grpc is not None:
            self._grpc.close()
            self._grpc = None
        if self._server is not None:
            self._server.stop()
            self._server = None

    def prepare(self, utt: Utterance) -> None:
        utt.wav_bytes()

    def transcribe(self, utt: Utterance) -> str:
        client = self._http or self._grpc
        if client is None:
            raise BackendError("backend not started")
        return client.transcribe(utt)

    def open_stream(self, utt: Utterance) -> StreamSession:
        if self._grpc is not None:
            return self._grpc.open_stream()
        from benchmarks.asrbench.backends.realtime import RealtimeStream

        return RealtimeStream(self._base_url, self.options["model"], self.options["turn_detection"])

    def concurrency(self) -> int:
        return int(self.options["concurrency"])

    def pids(self) -> dict[str, int]:
        if self._server is not None:
            return {"server": self._server.proc.pid}
        return {"server": int(self.options["server_pid"])} if int(self.options["server_pid"]) else {}

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"base_url": self._base_url, "managed": self._server is not None}
        if self._server is not None:
            info.update(http_port=self._server.http_port, grpc_port=self._server.grpc_port,
                        ready_path=self._server.ready_path)
        if self._base_url:
            import httpx

            try:
                info["models"] = httpx.get(self._base_url.rstrip("/") + "/v1/models", timeout=5).json()
            except (httpx.HTTPError, ValueError):
                info["models"] = None
        return info
